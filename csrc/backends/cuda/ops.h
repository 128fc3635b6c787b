// What the CUDA backend's operations share: the engine's context (handles, stream,
// lock), a step's constants on the device, the pre-padded input copy, and one
// factory per kind of kernel, each in its own file (conv.cpp, pool.cpp, dense.cpp,
// pointwise.cpp, tensor.cpp; stream.cpp for the per-plan stream and graph).
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../../support/thread_pool.h"
#include "../backend.h"
#include "fused_program.h"
#include "planner.h"
#include "resources.h"
#include "transfer.h"

namespace lenet::cuda {

// Engine-wide CUDA state. Members in order of creation; the destructor releases
// them in reverse, after the work queued on the stream has finished: the
// handles (which hold the stream and the cuBLAS workspace) before the workspace
// and the stream.
struct Context {
    bool allow_tf32 = false;
    bool graphs = true;
    bool capture_fault = false;  // tests: make every graph capture fail (LENET_CUDA_TEST_CAPTURE_FAULT)
    // tests: the fast stream fills a call's answers with NaN before it launches
    // (LENET_CUDA_TEST_POISON_OUTPUT), so that a call returning before its own answers
    // are written fails the executor's finite check instead of passing on stale ones.
    bool poison_output = false;
    std::string path = "auto";   // BackendOptions::cuda_path
    std::string device_name;
    int cc_major = 0;
    int sm_count = 0;
    int shared_optin = 0;  // shared memory a block may ask for, bytes
    StreamHandle stream;
    DeviceMemory cublas_workspace;
    size_t cublas_workspace_bytes = 0;
    CudnnHandle cudnn;
    CublasHandle cublas;
    std::mutex mutex;  // one call (or one planning) at a time on the handles and the stream
    int host_threads = 1;  // BackendOptions::threads: the most the host's copies may use
    int device = 0;        // the GPU every handle, buffer and launch of this engine is on

    // The engine's GPU made current for a scope and the caller's restored after: another
    // library in the process may have made another device current (torch.cuda.set_device(1)),
    // which would send lenet's allocations and launches there; and lenet changes no global
    // state of its caller (issue 67).
    class OnDevice {
    public:
        // `may_throw` false (a destructor's): a device that cannot be made current is left as is.
        explicit OnDevice(int device, bool may_throw = true) : device_(device) {
            if (cudaGetDevice(&previous_) != cudaSuccess) {
                clear_last_error();
                previous_ = -1;
            }
            if (previous_ == device_) return;
            if (may_throw)
                LENET_CHECK(cudaSetDevice(device_));
            else
                ignore_failure(cudaSetDevice(device_));
        }
        ~OnDevice() {
            if (previous_ >= 0 && previous_ != device_) ignore_failure(cudaSetDevice(previous_));
        }
        OnDevice(const OnDevice&) = delete;
        OnDevice& operator=(const OnDevice&) = delete;

    private:
        int device_, previous_ = -1;
    };
    // One call (or one planning) on the engine's handles and stream: the mutex, then the device.
    class Use {
    public:
        explicit Use(Context& ctx) : lock_(ctx.mutex), on_(ctx.device) {}

    private:
        std::lock_guard<std::mutex> lock_;
        OnDevice on_;
    };

    // Threads for the host's copies of a large batch (transfer.h, chunked), made on first use.
    ThreadPool* copy_pool() {
        if (!copy_pool_ && host_threads > 1) copy_pool_ = std::make_unique<ThreadPool>(std::min(host_threads, 8) - 1);
        return copy_pool_.get();
    }

    ~Context() {
        const OnDevice on(device, false);  // a destructor, perhaps of a backend whose GPU never came up
        if (stream) ignore_failure(cudaStreamSynchronize(stream.get()));
        copy_pool_.reset();
        cublas.reset();
        cudnn.reset();
        cublas_workspace.reset();
        stream.reset();
    }

private:
    std::unique_ptr<ThreadPool> copy_pool_;
};

// A step's constants on the device (nchw::constants' forms), and the bias on the host
// for the plan-time checks of conv.cpp.
struct DeviceConstants : StepConstants {
    DeviceMemory weights, bias;
    std::vector<float> host_bias;
};

inline float* f(const DeviceMemory& m) { return static_cast<float*>(m.get()); }

std::string error_text(cudaError_t e);

// Host values to new device memory, through pinned staging on the engine's stream.
DeviceMemory upload(Context& ctx, const std::vector<float>& host);
// n floats of device memory to the host (synchronizes the engine's stream).
std::vector<float> download(Context& ctx, const float* device, size_t n);

// The completion flag of one stream's launches (completion.h): the host spins on it
// instead of synchronizing the stream (transfer.h's wait_for_flag).
class CompletionFlag {
public:
    explicit CompletionFlag(Context& ctx);
    // The next call's completion. Its number is also written to request(), where a
    // kernel captured in a graph reads it (a graph's arguments are fixed).
    Completion next();
    const unsigned* request() const { return device_words_ + 1; }
    // The current call's completion (the number next() gave).
    Completion signal() const { return {static_cast<unsigned*>(arrived_.get()), device_words_, seq_}; }
    // Until the flag reads the last next()'s number; asks `s` now and then whether it
    // failed (CudaError with the stream's error then).
    void wait(cudaStream_t s) const;

private:
    DeviceMemory arrived_;
    PinnedMemory words_;  // mapped: [0] the flag, [1] the request
    unsigned* device_words_ = nullptr;
    unsigned seq_ = 0;
};

// The pre-padded copy of a kernel's input (see planner.h), filled once with the pad value.
struct Prepad {
    DeviceMemory buffer;
    void init(Context& ctx, const StepPlan& p);
    // The tensor cuDNN should read: x itself, or its pre-padded copy.
    const float* apply(Context& ctx, const StepPlan& p, const float* x);
    cudnnTensorDescriptor_t desc(const StepPlan& p) const { return p.padding.prepadded() ? p.padded.get() : p.x.get(); }
};

std::unique_ptr<Kernel> make_conv_kernel(Context& ctx, StepPlan plan, const DeviceConstants& k);
std::unique_ptr<Kernel> make_pool_kernel(Context& ctx, StepPlan plan);
std::unique_ptr<Kernel> make_dense_kernel(Context& ctx, StepPlan plan, const DeviceConstants& k);
// Activation, affine (batch norm, rescaling), PReLU, softmax, layer norm, merges.
std::unique_ptr<Kernel> make_pointwise_kernel(Context& ctx, StepPlan plan, const DeviceConstants& k);
// Padding and cropping, reshape, permute, resize, concatenation.
std::unique_ptr<Kernel> make_tensor_kernel(Context& ctx, StepPlan plan);
bool is_pointwise(OpKind op);

// The fused whole-network kernel (fused_program.h) for `steps`, or null with *why.
std::unique_ptr<Kernel> make_network_kernel(Context& ctx, const std::vector<Step>& steps,
                                            const std::vector<const StepConstants*>& constants, int capacity,
                                            std::string* why);

// What launching the fused kernel of a plan takes (fused.cuh), or nothing when `k` is
// not the fused kernel.
struct FusedLaunch {
    const fused::Op* ops = nullptr;  // device memory
    int op_count = 0;
    fused::Tile tile;
    int threads = 0, shared_bytes = 0;
};
std::optional<FusedLaunch> fused_launch_of(const Kernel& k);

// A plan of layers' stream: its input's transfer (transfer.h: staged, or mapped on
// cuda_path='fast' where small), device input/output and the captured graph.
std::unique_ptr<Stream> make_graph_stream(Context& ctx, int capacity, int64_t input_size, int64_t output_size);
// The fused kernel's stream on cuda_path='fast': it launches the kernel itself, with
// the transfer transfer.h chooses per kind of input (parameter, mapped or chunked).
std::unique_ptr<Stream> make_direct_stream(Context& ctx, const FusedLaunch& fused, int capacity, int64_t input_size,
                                           int64_t output_size);

}  // namespace lenet::cuda
