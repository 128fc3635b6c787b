// The transfer rules of transfer.h. No device call.
#include "transfer.h"

#include <algorithm>
#include <cstring>

#include "../../support/finite.h"
#include "../../support/format.h"

namespace lenet::cuda {

const char* to_string(Transfer t) {
    switch (t) {
        case Transfer::staged: return "staged";
        case Transfer::parameter: return "parameter";
        case Transfer::mapped: return "mapped";
        case Transfer::chunked: return "chunked";
    }
    return "?";
}

int parameter_blob(int64_t bytes) {
    for (int blob : kParameterBlobs)
        if (bytes <= blob) return blob;
    return 0;
}

namespace {

// The fused kernel's transfer for one kind of input (`bytes` per image).
Transfer fused_transfer(const TransferAsk& a, int64_t bytes, std::string* why, const char* kind) {
    const int64_t batch = bytes * a.capacity;
    const std::string size = std::string(kind) + " " + grouped_str(batch) + " bytes a full batch";
    if (a.tile_images == 1 && parameter_blob(batch)) {
        *why = size + ": the kernel's launch parameter";
        return Transfer::parameter;
    }
    if (batch <= kMappedBytes) {
        *why = size + (a.tile_images == 1 ? "" : " (tiles of " + std::to_string(a.tile_images) + " images)") +
               ": read by the kernel from mapped memory (more than a launch parameter holds)";
        return Transfer::mapped;
    }
    *why = size + ": chunks over " + std::to_string(a.streams) + " streams (more than " + grouped_str(kMappedBytes) +
           " bytes: copies overlapped with compute)";
    return Transfer::chunked;
}

}  // namespace

TransferPlan choose_transfer(const TransferAsk& a) {
    TransferPlan t;
    if (a.path != "fast") {
        t.why = "cuda_path='" + a.path + "': the path verified on a GPU";
        return t;
    }
    if (a.fused) {
        std::string v, p;
        t.values = fused_transfer(a, a.input_size * int64_t(sizeof(float)), &v, "float32");
        t.pixels = fused_transfer(a, a.input_size, &p, "uint8");
        t.why = v + "; " + p;
        return t;
    }
    // cuDNN's descriptors are fixed to the plan's capacity: a layered plan cannot run a
    // chunk of it, so above the mapped size it keeps the verified staging.
    const int64_t batch = a.input_size * int64_t(sizeof(float)) * a.capacity;
    if (batch <= kMappedBytes) {
        t.values = t.pixels = Transfer::mapped;
        t.why = "float32 " + grouped_str(batch) +
                " bytes a full batch: read in by a kernel from mapped memory, answers written to mapped memory, "
                "a completion flag (layers on cuDNN + cuBLAS: no launch parameter)";
    } else {
        t.why = "float32 " + grouped_str(batch) + " bytes a full batch (more than " + grouped_str(kMappedBytes) +
                "): staged, as verified (cuDNN's descriptors hold the capacity: no chunks)";
    }
    return t;
}

int chunk_rows(int capacity, int64_t row_bytes) {
    constexpr int64_t kMinChunkBytes = 512 * 1024;
    constexpr int kChunksPerBatch = 8;
    const int64_t floor_rows = (kMinChunkBytes + row_bytes - 1) / std::max<int64_t>(row_bytes, 1);
    const int64_t even = (capacity + kChunksPerBatch - 1) / kChunksPerBatch;
    return int(std::clamp<int64_t>(std::max(even, floor_rows), 1, std::max(capacity, 1)));
}

int fused_launch_rows(const std::string& path, int capacity, int64_t input_size) {
    if (path != "fast") return capacity;
    int rows = capacity;
    for (const int64_t row : {input_size * int64_t(sizeof(float)), input_size})  // float32, uint8
        if (row * capacity > kMappedBytes) rows = std::min(rows, chunk_rows(capacity, row));  // fused_transfer's rule
    return rows;
}

std::vector<Chunk> chunk_schedule(int n, int rows, int streams) {
    if (rows < 1 || streams < 1)
        throw InputError("chunk_schedule: rows and streams must be positive, got " + std::to_string(rows) + " and " +
                         std::to_string(streams));
    std::vector<Chunk> chunks;
    for (int first = 0, k = 0; first < n; first += rows, ++k)
        chunks.push_back({first, std::min(rows, n - first), k % streams});
    return chunks;
}

std::pair<int64_t, int64_t> part_range(int64_t count, int parts, int i) {
    return {count * i / parts, count * (i + 1) / parts};
}

void HostBuffers::add(const void* host, size_t bytes, const void* device) {
    std::lock_guard<std::mutex> lock(mutex_);
    regions_[uintptr_t(host)] = {bytes, device};
}

void HostBuffers::remove(const void* host) {
    std::lock_guard<std::mutex> lock(mutex_);
    regions_.erase(uintptr_t(host));
}

const void* HostBuffers::find(const void* p, size_t bytes) const {
    const uintptr_t at = uintptr_t(p);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = regions_.upper_bound(at);  // the first region starting after p
    if (it == regions_.begin()) return nullptr;
    --it;
    const uintptr_t offset = at - it->first;
    if (offset > it->second.bytes || bytes > it->second.bytes - offset) return nullptr;
    return static_cast<const char*>(it->second.device) + offset;
}

int64_t copy_rows(ThreadPool* pool, char* dst, const char* src, int64_t count, size_t row_bytes, int64_t floats) {
    if (count <= 0) return -1;
    const int64_t most = std::max<int64_t>(1, count * int64_t(row_bytes) / (64 * 1024));
    const int parts = int(std::min<int64_t>(pool ? pool->workers() + 1 : 1, most));
    std::vector<int64_t> bad(size_t(parts), -1);
    auto part = [&](int i) {
        const auto [begin, end] = part_range(count, parts, i);
        if (dst) std::memcpy(dst + begin * row_bytes, src + begin * row_bytes, size_t(end - begin) * row_bytes);
        if (floats == 0) return;
        const auto* values = reinterpret_cast<const float*>(src) + begin * floats;
        if (const int64_t r = first_non_finite(values, end - begin, floats); r >= 0) bad[size_t(i)] = begin + r;
    };
    if (parts > 1)
        pool->parallel_for(parts, part);
    else
        part(0);
    for (const int64_t b : bad)
        if (b >= 0) return b;  // parts in order: the first found is the first row
    return -1;
}

}  // namespace lenet::cuda
