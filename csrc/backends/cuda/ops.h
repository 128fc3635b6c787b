// What the CUDA backend's operations share: the engine's context (handles, stream,
// lock), a step's constants on the device, the pre-padded input copy, and one
// factory per kind of kernel, each in its own file (conv.cpp, pool.cpp, dense.cpp,
// pointwise.cpp, tensor.cpp; stream.cpp for the per-plan stream and graph).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../backend.h"
#include "planner.h"
#include "resources.h"

namespace lenet::cuda {

// Engine-wide CUDA state. Members in order of creation; the destructor releases
// them in reverse, after the work queued on the stream has finished: the
// handles (which hold the stream and the cuBLAS workspace) before the workspace
// and the stream.
struct Context {
    bool allow_tf32 = false;
    bool graphs = true;
    bool capture_fault = false;  // tests: make every graph capture fail (LENET_CUDA_TEST_CAPTURE_FAULT)
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

    ~Context() {
        if (stream) (void)cudaStreamSynchronize(stream.get());
        cublas.reset();
        cudnn.reset();
        cublas_workspace.reset();
        stream.reset();
    }
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

// Pinned staging, device input/output and the captured graph of one plan.
std::unique_ptr<Stream> make_graph_stream(Context& ctx, int capacity, int64_t input_size, int64_t output_size);

}  // namespace lenet::cuda
