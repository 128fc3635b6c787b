// The interface every backend implements: the only thing the executor (and so
// the network code) knows about a device.
//
// Life cycle, for a network of Steps (net/network.h):
//   prepare(step)                 once per engine: weights into the backend's memory and layout;
//   kernel(step, consts, cap)     once per plan: descriptors, algorithms, scratch for `cap` images;
//   stream(cap)                   once per plan: the per-plan execution context;
//   Stream::forward(...)          per call: nothing is allocated or planned there.
// A plan (kernels + buffers + stream) is used by one thread at a time; the
// executor keeps a pool of them, so a backend needs no locking of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "../net/network.h"
#include "../support/thread_pool.h"

namespace lenet {

// How a backend stores activations. NHWC is the canonical layout of network.h.
enum class Layout { nhwc, nchw };

// Memory owned by a backend (host memory for the CPU, device memory for CUDA).
using Buffer = std::unique_ptr<float, std::function<void(float*)>>;

// A Step's constants (weights, bias) as the backend keeps them.
struct StepConstants {
    virtual ~StepConstants() = default;
};

// What a kernel or a stream decided when it was planned or first run (an
// algorithm, whether a fusion applied and why, graph or eager), for
// Engine.describe(): (name, value) pairs.
using Fact = std::pair<std::string, std::variant<bool, int64_t, std::string>>;
using Facts = std::vector<Fact>;

// The inputs of a kernel call: x[0] is the first (the only one but for merge and
// concat steps), in the order of Step::inputs.
using Inputs = const float* const*;

// One Step, planned for a fixed batch capacity.
class Kernel {
public:
    virtual ~Kernel() = default;
    // x, y: backend memory holding n <= capacity images in the backend's layout.
    // x and y never alias. Must not allocate, plan or block. A backend whose kernels
    // are fixed to their capacity (cuDNN descriptors) may process all `capacity`
    // rows; rows past n are then scratch, never returned. `spare`: threads with
    // nothing else to do during this call (the executor's, when the whole call is
    // one task), over which a large kernel may split its work; null otherwise.
    virtual void run(Inputs x, float* y, int n, ThreadPool* spare) = 0;
    virtual Facts facts() const { return {}; }
};

// Runs the layers of one plan for one call. `layers(in, out, n)` launches every
// kernel from backend memory `in` to backend memory `out`.
using LayerWalk = std::function<void(const float* in, float* out, int n)>;

// A call's input on the host, in the backend's layout: float32 values, or (only for a
// backend whose streams take_pixels()) uint8 pixels that the stream converts to
// float(p) * scale itself (a GPU uploads a quarter of the bytes and scales there).
struct HostInput {
    const float* values = nullptr;
    const uint8_t* pixels = nullptr;
    float scale = 1.f;
};

// Thrown by a stream that checks a call's float32 values itself (Stream::checks_values):
// image `image` of the call holds a NaN or an infinity.
struct NonFiniteInput {
    int64_t image = 0;
};

class Stream {
public:
    virtual ~Stream() = default;
    // Whether forward() checks float32 inputs for NaN and infinities itself (while it
    // copies them, over its own threads), throwing NonFiniteInput: the executor then
    // does not read them once more before.
    virtual bool checks_values() const { return false; }
    // x_host: n images; y_host: the n outputs, in the backend's layout. Returns when
    // y_host is written. A CPU stream runs `layers` on the host pointers directly; a
    // GPU stream stages through pinned memory and may capture the whole walk (copies
    // included) once and replay it.
    virtual void forward(HostInput x_host, float* y_host, int n, const LayerWalk& layers) = 0;
    virtual Facts facts() const { return {}; }
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;          // "cpu", "cuda"
    virtual std::string description() const = 0;   // e.g. "CPU, OpenBLAS 0.3.x, 2 threads"
    virtual Layout layout() const = 0;
    // The largest batch one plan runs; the executor splits bigger calls.
    virtual int max_batch() const = 0;
    // The capacity of the plan used for n <= max_batch() images.
    virtual int plan_capacity(int n) const = 0;
    // How many plans may usefully run at the same time.
    virtual int parallelism() const = 0;

    virtual std::shared_ptr<const StepConstants> prepare(const Step& step) = 0;
    virtual std::unique_ptr<Kernel> kernel(const Step& step, const StepConstants* constants, int capacity) = 0;
    // One kernel running `step` then `next` (e.g. a convolution and the pooling of
    // its output, without writing the convolution out), or null when this backend
    // does not fuse the pair. The executor asks for every adjacent pair.
    virtual std::unique_ptr<Kernel> fused_kernel(const Step& step, const Step& next, const StepConstants* constants,
                                                 int capacity) {
        (void)step, (void)next, (void)constants, (void)capacity;
        return nullptr;
    }
    // Told, as a plan is built, of each kernel whose output only the next kernel
    // reads, as its only input: the two may agree to hand that value over in a layout
    // of their own (the buffer keeps its size; no one else sees it). By default they
    // keep the backend's layout.
    virtual void link(Kernel& producer, Kernel& consumer) { (void)producer, (void)consumer; }
    // One kernel running the whole network (every step, in order, from the network's
    // input to its output), or null with *why saying why not (empty: this backend has
    // none). The executor asks first, then falls back to a kernel per step.
    virtual std::unique_ptr<Kernel> network_kernel(const std::vector<Step>& steps,
                                                   const std::vector<const StepConstants*>& constants, int capacity,
                                                   std::string* why) {
        (void)steps, (void)constants, (void)capacity;
        why->clear();
        return nullptr;
    }
    // Whether the executor should time a network kernel against a kernel per step
    // when it plans, and keep the faster (else it takes the network kernel).
    virtual bool time_paths() const { return false; }
    // Whether this backend's streams take uint8 pixels (HostInput::pixels).
    virtual bool takes_pixels() const { return false; }
    virtual Buffer alloc(size_t floats) = 0;
    // input_size, output_size: floats per image going in and coming out.
    virtual std::unique_ptr<Stream> stream(int capacity, int64_t input_size, int64_t output_size) = 0;
    // The stream of a plan that runs the whole network as `whole` (network_kernel's): a
    // backend may launch that kernel itself, its own way (the CUDA backend's "fast" path).
    virtual std::unique_ptr<Stream> network_stream(Kernel& whole, int capacity, int64_t input_size,
                                                   int64_t output_size) {
        (void)whole;
        return stream(capacity, input_size, output_size);
    }
    // Host memory of `bytes` that this backend's streams take without copying it first
    // (the CUDA backend: mapped pinned memory), owned by the pointer's last holder, whatever
    // becomes of the backend. By default plain memory.
    virtual std::shared_ptr<void> host_buffer(size_t bytes) {
        return std::shared_ptr<void>(::operator new(bytes ? bytes : 1, std::align_val_t(64)),
                                     [](void* p) { ::operator delete(p, std::align_val_t(64)); });
    }
};

// The smallest power of two >= n, at most `cap`: plan capacities that let a few
// plans serve every batch size.
inline int pow2_capacity(int n, int cap) {
    int c = 1;
    while (c < n && c < cap) c *= 2;
    return c < cap ? c : cap;
}

// Options every backend factory receives.
struct BackendOptions {
    int threads = 1;          // CPU worker threads
    // CPU: "auto" (the best direct kernels this CPU runs), "avx512", "avx2", "neon"
    // (aarch64), "generic", or "blas" (im2col + SGEMM everywhere: the reference path).
    std::string cpu_kernels = "auto";
    // CPU: "exact" (every algorithm at least as close to float64 as the direct kernels:
    // Winograd's sums in double, backends/cpu/winograd.h) or "fast" (Winograd in float32,
    // up to about 11x further from float64 on lenet-tf). CUDA: unused (allow_tf32 is its
    // opt-in; cuDNN's algorithms are held to IMPLICIT_GEMM's answer).
    std::string precision = "exact";
    bool allow_tf32 = false;  // CUDA: permit TF32 tensor-core math
    bool cuda_graphs = true;  // CUDA: capture each plan's forward pass and replay it
    // CUDA: "auto" (the fused whole-network kernel where its rule says it is faster,
    // else cuDNN + cuBLAS), "fused" (the fused kernel wherever it can run the network),
    // "library" (cuDNN + cuBLAS always), or "fast" (the fused kernel within auto's size
    // rule, else cuDNN + cuBLAS, with the transfers of backends/cuda/transfer.h: not yet
    // run on a GPU, so not the default).
    std::string cuda_path = "auto";
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;
// A factory as a plain function: what a backend library hands over (provider.h).
using BackendFactoryFunction = std::unique_ptr<Backend> (*)(const BackendOptions&);

// The backend registry (registry.cpp): "cpu" is always there; "cuda" is added the first
// time it is asked for, from its own library (provider.h). make_backend throws
// InputError for an unknown name, and CudaError naming what is missing for "cuda" when
// its library, the driver, cuDNN or cuBLAS cannot be had.
std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options);
bool backend_registered(const std::string& name);

}  // namespace lenet
