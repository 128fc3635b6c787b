// The CUDA backend: NCHW float32 on one GPU. Convolution and pooling on cuDNN,
// dense layers on cuBLAS, bias + activation fused into one small kernel where
// cuDNN does not fuse them; one file per kind of operation (ops.h). Everything is
// planned before the first call: weights uploaded once per engine; descriptors,
// workspaces and buffers once per plan; each convolution's algorithm once per
// process and shape (conv.cpp); the whole forward pass captured into a CUDA graph
// on the first call and replayed after (stream.cpp). A LeNet-sized chain runs
// instead as one kernel of ours (fused_kernel.cpp), cuDNN and cuBLAS being the
// general path it falls back to.
//
// Concurrency: one cuDNN handle, one cuBLAS handle and one stream per engine; a
// mutex lets one call at a time use them (calls from several threads are
// serialized, and each gets its own answer).
#include "cuda_backend.h"

#include <cstdlib>

#include "../nchw/plan.h"
#include "ops.h"

namespace lenet::cuda {
namespace {

constexpr int kMaxBatch = 4096;

class CudaBackend : public Backend {
public:
    explicit CudaBackend(const BackendOptions& options) {
        if (!libraries_loaded()) throw CudaError("the CUDA backend's cuDNN and cuBLAS are not loaded");
        std::string why;
        if (device_count(&why) == 0) throw CudaError("no usable CUDA device: " + why);
        ctx_.device = 0;
        const Context::OnDevice on(ctx_.device);
        cudaDeviceProp prop{};
        LENET_CHECK(cudaGetDeviceProperties(&prop, ctx_.device));
        ctx_.device_name = prop.name;
        ctx_.cc_major = prop.major;
        ctx_.sm_count = prop.multiProcessorCount;
        ctx_.shared_optin = int(prop.sharedMemPerBlockOptin);
        ctx_.path = options.cuda_path;
        ctx_.allow_tf32 = options.allow_tf32;
        ctx_.graphs = options.cuda_graphs;
        ctx_.host_threads = options.threads;
        const char* fault = std::getenv("LENET_CUDA_TEST_CAPTURE_FAULT");
        ctx_.capture_fault = fault && *fault && std::string(fault) != "0";
        const char* poison = std::getenv("LENET_CUDA_TEST_POISON_OUTPUT");
        ctx_.poison_output = poison && *poison && std::string(poison) != "0";
        cudaStream_t stream = nullptr;
        LENET_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        ctx_.stream.reset(stream);
        ctx_.cublas_workspace_bytes = cublas_workspace_bytes(prop.major);
        ctx_.cublas_workspace = device_alloc(ctx_.cublas_workspace_bytes);
        ctx_.cudnn = create<CudnnHandle, lib::cudnnCreate>();
        ctx_.cublas = create<CublasHandle, lib::cublasCreate_v2>();
        LENET_CHECK(lib::cudnnSetStream(ctx_.cudnn.get(), stream));
        LENET_CHECK(lib::cublasSetStream(ctx_.cublas.get(), stream));
        // After cublasSetStream, which resets the workspace to cuBLAS' own pool.
        LENET_CHECK(
            lib::cublasSetWorkspace(ctx_.cublas.get(), ctx_.cublas_workspace.get(), ctx_.cublas_workspace_bytes));
        // CUBLAS_DEFAULT_MATH keeps SGEMM at FP32 or better (TF32 has fewer mantissa
        // bits, so it is never used); TF32 tensor cores only when asked. Read back, so
        // that describe()'s "FP32" is what cuBLAS holds.
        const cublasMath_t math = options.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
        LENET_CHECK(lib::cublasSetMathMode(ctx_.cublas.get(), math));
        cublasMath_t held{};
        LENET_CHECK(lib::cublasGetMathMode(ctx_.cublas.get(), &held));
        if (held != math) throw CudaError("cuBLAS did not take the math mode " + std::to_string(int(math)));
    }

    std::string name() const override { return "cuda"; }
    std::string description() const override {
        return "CUDA, " + ctx_.device_name + " (sm_" + std::to_string(ctx_.cc_major) + "x), cuDNN " +
               std::to_string(lib::cudnnGetVersion()) + (ctx_.allow_tf32 ? ", TF32 allowed" : ", FP32") +
               (ctx_.graphs ? ", CUDA graphs" : ", no graphs") + ", path " + ctx_.path + ", cuBLAS workspace " +
               std::to_string(ctx_.cublas_workspace_bytes >> 20) + " MiB";
    }
    Layout layout() const override { return Layout::nchw; }
    int max_batch() const override { return kMaxBatch; }
    // Descriptors and graphs are fixed per capacity: rows past n are computed and
    // dropped, so that a handful of plans (and graphs) serve every batch size.
    int plan_capacity(int n) const override { return pow2_capacity(n, kMaxBatch); }
    int parallelism() const override { return 1; }

    std::shared_ptr<const StepConstants> prepare(const Step& s) override {
        nchw::Constants host = nchw::constants(s);
        auto k = std::make_shared<DeviceConstants>();
        const Context::Use use(ctx_);
        if (!host.weights.empty()) k->weights = upload(ctx_, host.weights);
        if (!host.bias.empty()) k->bias = upload(ctx_, host.bias);
        if (s.op == OpKind::conv2d) k->host_bias = std::move(host.bias);
        return k;
    }

    std::unique_ptr<Kernel> kernel(const Step& s, const StepConstants* constants, int capacity) override {
        // Planning uses the engine's handles and stream: not while a call runs on them.
        const Context::Use use(ctx_);
        StepPlan p = plan_step(s, capacity, ctx_.allow_tf32);
        const auto& k = *static_cast<const DeviceConstants*>(constants);
        switch (s.op) {
            case OpKind::conv2d: return make_conv_kernel(ctx_, std::move(p), k);
            case OpKind::dense: return make_dense_kernel(ctx_, std::move(p), k);
            case OpKind::max_pool2d:
            case OpKind::avg_pool2d: return make_pool_kernel(ctx_, std::move(p));
            case OpKind::pad2d:
            case OpKind::reshape:
            case OpKind::permute:
            case OpKind::resize:
            case OpKind::concat: return make_tensor_kernel(ctx_, std::move(p));
            default:
                if (is_pointwise(s.op)) return make_pointwise_kernel(ctx_, std::move(p), k);
                throw CudaError(std::string("CUDA backend: no kernel for ") + to_string(s.op));
        }
    }

    std::unique_ptr<Kernel> network_kernel(const std::vector<Step>& steps,
                                           const std::vector<const StepConstants*>& constants, int capacity,
                                           std::string* why) override {
        const Context::Use use(ctx_);
        return make_network_kernel(ctx_, steps, constants, capacity, why);
    }
    bool takes_pixels() const override { return true; }
    // "auto": the fused kernel only where it is measured faster than cuDNN + cuBLAS
    // ("fast" takes it wherever auto's size rule does: its transfers are built for it).
    bool time_paths() const override { return ctx_.path == "auto"; }

    Buffer alloc(size_t floats) override {
        const Context::OnDevice on(ctx_.device);
        const Allocation a = device_alloc(floats * sizeof(float)).release_ownership();
        return Buffer(static_cast<float*>(a.p), [a](float*) { release(a); });
    }

    std::unique_ptr<Stream> stream(int capacity, int64_t input_size, int64_t output_size) override {
        const Context::Use use(ctx_);
        return make_graph_stream(ctx_, capacity, input_size, output_size);
    }

    std::unique_ptr<Stream> network_stream(Kernel& whole, int capacity, int64_t input_size,
                                           int64_t output_size) override {
        if (ctx_.path == "fast")
            if (const auto launch = fused_launch_of(whole)) {
                const Context::Use use(ctx_);
                return make_direct_stream(ctx_, *launch, capacity, input_size, output_size);
            }
        return stream(capacity, input_size, output_size);
    }

    std::shared_ptr<void> host_buffer(size_t bytes) override {
        const Context::OnDevice on(ctx_.device);  // mapped memory is mapped for the current device's context
        return cuda::host_buffer(bytes);
    }

private:
    Context ctx_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
    return std::make_unique<CudaBackend>(options);
}

}  // namespace lenet::cuda
