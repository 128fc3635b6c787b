// How a plan's input reaches the GPU and its answers come back (its "transfer"), and
// the host's side of a call: which transfer a plan takes and why, how a large batch
// is cut into chunks over several streams, how the host's copies are split over
// threads, and how the host waits for a completion flag instead of synchronizing the
// stream. No device call here: CI tests every rule of it without a GPU.
//
// The transfers (cuda_path="fast" only, except `staged`; none of them has run on a GPU
// yet, docs/gpu.md):
//   staged     the verified path: the host copies the batch into pinned staging, a CUDA
//              graph copies it to the device, runs the layers and copies the answers
//              back, the host synchronizes the stream.
//   parameter  the fused kernel gets the whole input as its launch parameter (CUDA
//              12.1+ allows 32,764 bytes of them), writes the answers into mapped pinned
//              memory and raises a completion flag there; the host spins on the flag.
//              No copy command, no graph, no stream synchronize: one launch.
//   mapped     as parameter, the input read by the kernel from mapped pinned memory
//              (over PCIe, as it goes); for a layered plan, a small kernel reads it in
//              and another writes the answers out and raises the flag, inside the graph.
//   chunked    the batch cut into chunks over several streams: the host copies chunk
//              i + 1 into pinned staging (over several threads, checking the values as
//              it goes) while the GPU uploads and runs chunk i; each chunk's answers come
//              back as soon as it is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../../support/errors.h"
#include "../../support/thread_pool.h"

namespace lenet::cuda {

enum class Transfer { staged, parameter, mapped, chunked };
const char* to_string(Transfer t);

// The fused kernel's parameter blobs, bytes: a launch copies the whole blob, so the
// smallest that holds the input is used. The largest leaves room under the 32,764-byte
// limit for the kernel's other arguments (checked where the kernel is declared).
constexpr int kParameterBlobs[] = {4096, 16384, 31744};
// The blob for `bytes` of input, or 0 when none holds it.
int parameter_blob(int64_t bytes);

// Up to this many bytes of input a call, the kernel reads the input over PCIe itself
// (mapped); above, the DMA engines are the faster way and the batch is chunked.
constexpr int64_t kMappedBytes = 256 * 1024;

// What decides a plan's transfer.
struct TransferAsk {
    std::string path = "auto";  // cuda_path
    bool fused = false;         // the plan runs the fused whole-network kernel
    int tile_images = 1;        // its images per block
    int capacity = 1;           // the plan's batch capacity
    int64_t input_size = 0;     // values per image
    int streams = 2;            // for chunked
};

// One transfer for float32 values and one for uint8 pixels (a quarter of the bytes:
// a plan may take its pixels as a parameter and its values mapped), and why.
struct TransferPlan {
    Transfer values = Transfer::staged, pixels = Transfer::staged;
    std::string why;
};
TransferPlan choose_transfer(const TransferAsk& a);

// A chunk of a call's batch: rows [first, first + count), on stream `stream`.
struct Chunk {
    int first = 0, count = 0, stream = 0;
};
// Rows per chunk for a plan of `capacity` whose images are `row_bytes` of input: about
// 8 chunks a full batch (so that copies and compute overlap), none under 512 KiB (a DMA
// that small costs more than it moves), none above the capacity.
int chunk_rows(int capacity, int64_t row_bytes);
// The rows of the smallest full launch of the fused kernel on cuda_path='fast' for a plan
// of `capacity` images of `input_size` values: a chunk where a kind of input is chunked,
// else the capacity. Its tile (images per block) is chosen for these rows, so that a
// chunk's launch still has blocks enough for the GPU (issue 67: tiles sized for 4,096
// images left a 512-row chunk 64 blocks on a 132-SM GPU).
int fused_launch_rows(const std::string& path, int capacity, int64_t input_size);
// The chunks of n rows, `rows` each (the last shorter), round-robin over `streams`.
std::vector<Chunk> chunk_schedule(int n, int rows, int streams);
// Part i of `parts` near-equal parts of [0, count): [begin, end).
std::pair<int64_t, int64_t> part_range(int64_t count, int parts, int i);

// How long the host spins on a completion flag before it asks the stream whether it
// failed, and how often after; past `yield_after_us` it yields the CPU between looks.
struct SpinPolicy {
    double first_query_us = 20, query_every_us = 20, yield_after_us = 2000;
};
enum class StreamState { running, idle, failed };

// The spin-wait hint between two reads of a flag: the core slows the loop (x86 PAUSE, ~40-140
// cycles; ARM YIELD) and gives a sibling hyperthread its resources, at a few tens of
// nanoseconds on the batch-1 critical path.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

// Spins until read() == seq; returns how many reads it took. Every query_every_us
// (after first_query_us) it asks query(&error): `failed` throws CudaError(error) (a
// kernel that faulted never raises its flag: the stream's error is the answer);
// `idle` with the flag still not raised throws too (the work ended without it), after
// one more read. now() gives microseconds; yield() gives the CPU away.
template <class Read, class Query, class Now, class Yield>
int64_t wait_for_flag(Read read, uint32_t seq, Query query, Now now, Yield yield, const SpinPolicy& p = {}) {
    const double start = now();
    double next = start + p.first_query_us;
    for (int64_t reads = 1;; ++reads) {
        if (read() == seq) return reads;
        cpu_relax();
        const double t = now();
        if (t < next) continue;
        std::string error;
        const StreamState s = query(&error);
        if (s == StreamState::failed) throw CudaError(error);
        if (s == StreamState::idle) {
            const uint32_t last = read();
            if (last == seq) return reads + 1;
            throw CudaError("the GPU finished the call without raising its completion flag (expected " +
                            std::to_string(seq) + ", read " + std::to_string(last) + ")");
        }
        if (t - start >= p.yield_after_us) yield();
        next = t + p.query_every_us;
    }
}

// Host regions the GPU addresses too (mapped pinned buffers handed out to callers),
// by host address: a stream looks a call's input up here to read it in place.
class HostBuffers {
public:
    void add(const void* host, size_t bytes, const void* device);
    void remove(const void* host);
    // The device address of [p, p + bytes) when it lies inside one region, else null.
    const void* find(const void* p, size_t bytes) const;

private:
    struct Region {
        size_t bytes = 0;
        const void* device = nullptr;
    };
    mutable std::mutex mutex_;
    std::map<uintptr_t, Region> regions_;
};

// The host's read of a flag the GPU writes into mapped memory: an acquire load, so
// that the answers written before it are read after it.
inline uint32_t read_flag(const uint32_t* flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }

// Copies `count` rows of `row_bytes` from src to dst (dst null: none, only the check),
// split over the pool's threads and the caller's in parts of 64 KiB or more. Rows of
// `floats` float32 values (0: bytes, not checked) are checked as they are copied,
// while they are in the cache anyway. Returns the first row holding a NaN or an
// infinity, or -1.
int64_t copy_rows(ThreadPool* pool, char* dst, const char* src, int64_t count, size_t row_bytes, int64_t floats);

}  // namespace lenet::cuda
