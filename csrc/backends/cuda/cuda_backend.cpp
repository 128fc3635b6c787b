// The CUDA backend: NCHW float32 on one GPU. Convolution and pooling on cuDNN,
// dense layers on cuBLAS, bias + activation fused into one small kernel where
// cuDNN does not fuse them. Everything is planned before the first call: weights
// uploaded once per engine; descriptors, workspaces and buffers once per plan;
// each convolution's algorithm once per process and shape (cudnnFind, cached);
// the whole forward pass (input copy, layers, output copy) captured into a CUDA
// graph on the first call and replayed after.
//
// Every copy and fill runs on the engine's stream (never the legacy default
// stream, which is not ordered with it); host sources are staged through pinned
// memory.
//
// Concurrency: one cuDNN handle, one cuBLAS handle and one stream per engine; a
// mutex lets one call at a time use them (calls from several threads are
// serialized, and each gets its own answer).
#include "cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "../nchw/plan.h"
#include "elementwise.cuh"
#include "planner.h"
#include "resources.h"

namespace lenet::cuda {
namespace {

constexpr int kMaxBatch = 4096;
constexpr size_t kFindWorkspaceLimit = size_t(64) << 20;  // cudnnFind may try algorithms up to this
const float kOne = 1.f, kZero = 0.f;

// A convolution's algorithm and fusion, decided once per process and shape (see
// conv_choices()).
struct ConvChoice {
    cudnnConvolutionFwdAlgo_t algo{};
    cudnnMathType_t math{};
    size_t workspace = 0;
    bool deterministic = false;
    float find_ms = 0.f;
    bool fused = false;
    cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
    std::string fusion;  // what was decided, and why
};

// Engine-wide CUDA state. Members in order of creation; the destructor releases
// them in reverse, after the work queued on the stream has finished: the
// handles (which hold the stream and the cuBLAS workspace) before the workspace
// and the stream.
struct Context {
    bool allow_tf32 = false;
    bool graphs = true;
    bool capture_fault = false;  // tests: make every graph capture fail (LENET_CUDA_TEST_CAPTURE_FAULT)
    std::string device_name;
    int cc_major = 0;
    StreamHandle stream;
    DeviceMemory cublas_workspace;
    size_t cublas_workspace_bytes = 0;
    CudnnHandle cudnn;
    CublasHandle cublas;
    std::mutex mutex;

    ~Context() {
        if (stream) (void)cudaStreamSynchronize(stream.get());
        cublas.reset();
        cudnn.reset();
        cublas_workspace.reset();
        stream.reset();
    }
};

std::string error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

// Host vector to new device memory, through pinned staging on the engine's stream.
DeviceMemory upload(Context& ctx, const std::vector<float>& host) {
    const size_t bytes = host.size() * sizeof(float);
    DeviceMemory d = device_alloc(bytes);
    PinnedMemory staging = pinned_alloc(bytes);
    std::memcpy(staging.get(), host.data(), bytes);
    LENET_CHECK(cudaMemcpyAsync(d.get(), staging.get(), bytes, cudaMemcpyHostToDevice, ctx.stream.get()));
    LENET_CHECK(cudaStreamSynchronize(ctx.stream.get()));  // before the staging buffer goes
    return d;
}

float* f(const DeviceMemory& m) { return static_cast<float*>(m.get()); }

// The convolution choices of this process, shared by every engine (they all run
// on device 0): each shape is searched once, and every plan of it, in any engine,
// graph or eager, runs the same algorithm and gives the same bits.
struct ConvChoices {
    std::mutex mutex;
    std::map<ConvKey, ConvChoice> by_key;
};
ConvChoices& conv_choices() {
    static ConvChoices* choices = new ConvChoices;  // never destroyed: engines may outlive static destructors
    return *choices;
}

struct DeviceConstants : StepConstants {
    DeviceMemory weights, bias;
};

// The pre-padded copy of a kernel's input (see planner.h), filled once with the pad value.
struct Prepad {
    DeviceMemory buffer;
    void init(Context& ctx, const StepPlan& p) {
        if (!p.padding.prepadded()) return;
        const Step& s = *p.step;
        const size_t floats = size_t(p.n) * s.in.c * (s.in.h + p.padding.prepad.top + p.padding.prepad.bottom) *
                              (s.in.w + p.padding.prepad.left + p.padding.prepad.right);
        buffer = device_alloc(floats * sizeof(float));
        LENET_CHECK(cudnnSetTensor(ctx.cudnn.get(), p.padded.get(), buffer.get(), &p.pad_value));
    }
    // The tensor cuDNN should read: x itself, or its pre-padded copy.
    const float* apply(Context& ctx, const StepPlan& p, const float* x) {
        if (!p.padding.prepadded()) return x;
        LENET_CHECK(cudnnTransformTensor(ctx.cudnn.get(), &kOne, p.x.get(), x, &kZero, p.padded_view.get(),
                                         f(buffer) + p.padded_offset));
        return f(buffer);
    }
    cudnnTensorDescriptor_t desc(const StepPlan& p) const { return p.padding.prepadded() ? p.padded.get() : p.x.get(); }
};

class ConvKernel : public Kernel {
public:
    ConvKernel(Context& ctx, StepPlan plan, const DeviceConstants& k) : ctx_(ctx), p_(std::move(plan)), k_(k) {
        prepad_.init(ctx_, p_);
        ConvChoices& cache = conv_choices();
        std::lock_guard<std::mutex> lock(cache.mutex);
        const ConvKey key = conv_key(p_, ctx_.allow_tf32);
        auto it = cache.by_key.find(key);
        if (it == cache.by_key.end()) it = cache.by_key.emplace(key, choose()).first;
        choice_ = it->second;
        if (ctx_.allow_tf32) LENET_CHECK(cudnnSetConvolutionMathType(p_.conv.get(), choice_.math));
        if (choice_.fused && choice_.nan != CUDNN_PROPAGATE_NAN) p_.act = relu_desc(choice_.nan);
        workspace_ = device_alloc(choice_.workspace);
    }

    void run(Inputs x, float* y, int, ThreadPool*) override {
        const float* src = prepad_.apply(ctx_, p_, x[0]);
        const Step& s = *p_.step;
        if (choice_.fused) {
            // y = relu(conv(x) + bias); z = y with alpha2 = 0 as cuDNN requires a z tensor.
            LENET_CHECK(cudnnConvolutionBiasActivationForward(
                ctx_.cudnn.get(), &kOne, prepad_.desc(p_), src, p_.w.get(), f(k_.weights), p_.conv.get(),
                choice_.algo, workspace_.get(), choice_.workspace, &kZero, p_.y.get(), y, p_.bias.get(), f(k_.bias),
                p_.act.get(), p_.y.get(), y));
            return;
        }
        LENET_CHECK(cudnnConvolutionForward(ctx_.cudnn.get(), &kOne, prepad_.desc(p_), src, p_.w.get(), f(k_.weights),
                                            p_.conv.get(), choice_.algo, workspace_.get(), choice_.workspace, &kZero,
                                            p_.y.get(), y));
        launch_bias_act(y, f(k_.bias), int64_t(p_.n) * s.out.size(), s.out.c, s.out.h * s.out.w, s.act,
                        ctx_.stream.get());
        LENET_CHECK(cudaGetLastError());
    }

    Facts facts() const override {
        return {{"algorithm", std::string(algorithm_name(choice_.algo))},
                {"math", std::string(choice_.math == CUDNN_FMA_MATH || choice_.math == CUDNN_DEFAULT_MATH ? "FP32"
                                                                                                          : "TF32")},
                {"deterministic", choice_.deterministic},
                {"workspace_bytes", int64_t(choice_.workspace)},
                {"fused", choice_.fused},
                {"fusion", choice_.fusion},
                {"prepadded", p_.padding.prepadded()}};
    }

private:
    // cudnnFind measures every algorithm on scratch buffers; pick_algorithm takes the
    // fastest deterministic one that respects the math mode. Then, for ReLU, one
    // trial of the fused call per NaN mode decides whether cuDNN fuses this shape.
    // Runs once per process and shape (the caller caches it), under the engine's lock.
    ConvChoice choose() {
        const Step& s = *p_.step;
        cudaStream_t stream = ctx_.stream.get();
        const Dims in = p_.padding.prepadded() ? nchw::padded_dims(s, p_.padding) : s.in;
        const size_t in_bytes = size_t(p_.n) * in.size() * sizeof(float);
        const size_t out_bytes = size_t(p_.n) * s.out.size() * sizeof(float);
        DeviceMemory x = device_alloc(in_bytes), y = device_alloc(out_bytes);
        LENET_CHECK(cudaMemsetAsync(x.get(), 0, in_bytes, stream));
        DeviceMemory scratch = device_alloc(kFindWorkspaceLimit);
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int returned = 0;
        LENET_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            ctx_.cudnn.get(), prepad_.desc(p_), x.get(), p_.w.get(), k_.weights.get(), p_.conv.get(), p_.y.get(),
            y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, scratch.get(), kFindWorkspaceLimit));
        std::vector<AlgoCandidate> candidates;
        for (int i = 0; i < returned; ++i)
            candidates.push_back({int(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS, perf[i].time,
                                  perf[i].memory, perf[i].determinism == CUDNN_DETERMINISTIC,
                                  perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                                      perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION});
        const int best = pick_algorithm(candidates, ctx_.allow_tf32, kFindWorkspaceLimit);
        if (best < 0) throw CudaError("cuDNN found no usable convolution algorithm for '" + s.layers + "'");
        ConvChoice c;
        c.algo = perf[best].algo;
        c.math = perf[best].mathType;
        c.workspace = perf[best].memory;
        c.deterministic = candidates[best].deterministic;
        c.find_ms = perf[best].time;
        if (ctx_.allow_tf32) LENET_CHECK(cudnnSetConvolutionMathType(p_.conv.get(), c.math));

        if (!s.act.plain_relu()) {
            c.fusion = s.act.linear() ? "no activation: bias in its own kernel"
                                      : "activation " + s.act.str() + ": cuDNN fuses plain ReLU only; bias and "
                                        "activation in one kernel";
        } else {
            DeviceMemory workspace = device_alloc(c.workspace);
            std::string refused;
            for (const cudnnNanPropagation_t nan : {CUDNN_PROPAGATE_NAN, CUDNN_NOT_PROPAGATE_NAN}) {
                ActDesc act = relu_desc(nan);
                const cudnnStatus_t st = cudnnConvolutionBiasActivationForward(
                    ctx_.cudnn.get(), &kOne, prepad_.desc(p_), x.get(), p_.w.get(), f(k_.weights), p_.conv.get(),
                    c.algo, workspace.get(), c.workspace, &kZero, p_.y.get(), y.get(), p_.bias.get(), f(k_.bias),
                    act.get(), p_.y.get(), y.get());
                if (st == CUDNN_STATUS_SUCCESS) {
                    c.fused = true;
                    c.nan = nan;
                    c.fusion = nan == CUDNN_PROPAGATE_NAN
                                   ? "cudnnConvolutionBiasActivationForward, NaN propagating"
                                   : "cudnnConvolutionBiasActivationForward, NaN not propagated (ReLU(NaN) = 0; "
                                     "with NaN propagation cuDNN refused: " + refused + ")";
                    break;
                }
                char detail[256] = {0};
                cudnnGetLastErrorString(detail, sizeof(detail));
                refused = std::string(cudnnGetErrorString(st)) + (detail[0] ? std::string(" ") + detail : "");
            }
            if (!c.fused) c.fusion = "cuDNN refused the fused call (" + refused + "): bias and ReLU in one kernel";
        }
        LENET_CHECK(cudaStreamSynchronize(stream));
        return c;
    }

    Context& ctx_;
    StepPlan p_;
    const DeviceConstants& k_;
    Prepad prepad_;
    ConvChoice choice_;
    DeviceMemory workspace_;
};

class PoolKernel : public Kernel {
public:
    PoolKernel(Context& ctx, StepPlan plan) : ctx_(ctx), p_(std::move(plan)) {
        prepad_.init(ctx_, p_);
        if (!p_.avg_factor.empty()) factor_ = upload(ctx_, p_.avg_factor);
    }
    Facts facts() const override {
        return {{"algorithm", std::string("cudnnPoolingForward")}, {"prepadded", p_.padding.prepadded()}};
    }
    void run(Inputs x, float* y, int, ThreadPool*) override {
        const float* src = prepad_.apply(ctx_, p_, x[0]);
        LENET_CHECK(cudnnPoolingForward(ctx_.cudnn.get(), p_.pool.get(), &kOne, prepad_.desc(p_), src, &kZero,
                                        p_.y.get(), y));
        if (factor_) {
            const Step& s = *p_.step;
            launch_scale_planes(y, f(factor_), int64_t(p_.n) * s.out.size(), s.out.h * s.out.w, ctx_.stream.get());
            LENET_CHECK(cudaGetLastError());
        }
    }

private:
    Context& ctx_;
    StepPlan p_;
    Prepad prepad_;
    DeviceMemory factor_;
};

// y (n, out) = x (n, in) W (in, out) + b, row-major. cuBLAS is column-major, where
// these buffers read as y^T = W^T x^T: m = out, n = batch, k = in, no transposes.
class DenseKernel : public Kernel {
public:
    DenseKernel(Context& ctx, StepPlan plan, const DeviceConstants& k) : ctx_(ctx), p_(std::move(plan)), k_(k) {}
    void run(Inputs x, float* y, int, ThreadPool*) override {
        const Step& s = *p_.step;
        const int in = int(s.in.size()), out = s.out.c;
        LENET_CHECK(cublasSgemm(ctx_.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, out, p_.n, in, &kOne, f(k_.weights), out,
                                x[0], in, &kZero, y, out));
        launch_bias_act(y, f(k_.bias), int64_t(p_.n) * out, out, 1, s.act, ctx_.stream.get());
        LENET_CHECK(cudaGetLastError());
    }
    Facts facts() const override {
        return {{"algorithm", std::string("cublasSgemm")},
                {"workspace_bytes", int64_t(ctx_.cublas_workspace_bytes)},
                {"fused", false},
                {"fusion", std::string("bias and activation in one kernel after the GEMM")}};
    }

private:
    Context& ctx_;
    StepPlan p_;
    const DeviceConstants& k_;
};

// Everything that is not a convolution, a pooling or a dense layer: cuDNN's softmax,
// and the small kernels of elementwise.cu.
class SimpleKernel : public Kernel {
public:
    SimpleKernel(Context& ctx, StepPlan plan, const DeviceConstants& k) : ctx_(ctx), p_(std::move(plan)), k_(k) {}
    void run(Inputs x, float* y, int, ThreadPool*) override {
        const Step& s = *p_.step;
        const int n = p_.n;
        const int64_t count = int64_t(n) * s.out.size();
        cudaStream_t stream = ctx_.stream.get();
        switch (s.op) {
            case OpKind::activation: launch_activation(x[0], y, count, s.act, stream); break;
            case OpKind::softmax:
                // Over the channel axis of each pixel: Keras' last axis in NHWC.
                LENET_CHECK(cudnnSoftmaxForward(ctx_.cudnn.get(), s.log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                                CUDNN_SOFTMAX_MODE_CHANNEL, &kOne, p_.x.get(), x[0], &kZero,
                                                p_.y.get(), y));
                break;
            case OpKind::affine:
                launch_affine(x[0], y, f(k_.weights), f(k_.bias), count, s.out.c, s.out.h * s.out.w, stream);
                break;
            case OpKind::prelu: launch_prelu(x[0], y, f(k_.weights), count, s.out.size(), stream); break;
            case OpKind::pad2d: launch_pad(x[0], y, n, s.in, s.out, s.pad.top, s.pad.left, stream); break;
            case OpKind::reshape: launch_reshape(x[0], y, n, s.in, s.out, stream); break;
            case OpKind::permute: launch_permute(x[0], y, n, s.in, s.out, s.perm, stream); break;
            case OpKind::resize: launch_resize(x[0], y, n, s.in, s.out, s.pad, s.nearest, stream); break;
            case OpKind::layer_norm:
                launch_layer_norm(x[0], y, n, s.out, f(k_.weights), f(k_.bias), s.epsilon, stream);
                break;
            case OpKind::concat: {
                int offset = 0;
                for (size_t k = 0; k < s.ins.size(); ++k) {
                    launch_concat(x[k], y, n, s.ins[k], s.out, s.axis, offset, stream);
                    const Dims d = s.ins[k];
                    offset += s.axis == 0 ? d.h : s.axis == 1 ? d.w : d.c;
                }
                break;
            }
            case OpKind::merge: {
                const int inputs = int(s.inputs.size());
                for (int k = 0; k < inputs; k += kMergeInputs) {
                    const int here = std::min(kMergeInputs, inputs - k);
                    const bool last = k + here == inputs;
                    const float divide = last && s.merge == Merge::average ? float(inputs) : 0.f;
                    launch_merge(x + k, here, y, count, s.merge, k > 0, divide, stream);
                }
                break;
            }
            default: throw CudaError(std::string("CUDA backend: no kernel for ") + to_string(s.op));
        }
        LENET_CHECK(cudaGetLastError());
    }
    Facts facts() const override {
        return {{"algorithm", std::string(p_.step->op == OpKind::softmax ? "cudnnSoftmaxForward" : "lenet kernel")}};
    }

private:
    Context& ctx_;
    StepPlan p_;
    const DeviceConstants& k_;
};

// Pinned staging, device input/output and the captured graph of one plan.
class GraphStream : public Stream {
public:
    GraphStream(Context& ctx, int capacity, int64_t input_size, int64_t output_size)
        : ctx_(ctx),
          capacity_(capacity),
          in_bytes_(size_t(input_size) * sizeof(float)),
          out_bytes_(size_t(output_size) * sizeof(float)),
          pinned_in_(pinned_alloc(in_bytes_ * capacity)),
          pinned_out_(pinned_alloc(out_bytes_ * capacity)),
          dev_in_(device_alloc(in_bytes_ * capacity)),
          dev_out_(device_alloc(out_bytes_ * capacity)),
          graphs_(ctx.graphs),
          why_(ctx.graphs ? "not run yet" : "CUDA graphs turned off (cuda_graphs=False)") {
        // Rows past a call's n are computed too: keep them finite.
        std::memset(pinned_in_.get(), 0, in_bytes_ * capacity);
    }

    void forward(const float* x, float* y, int n, const LayerWalk& layers) override {
        std::lock_guard<std::mutex> lock(ctx_.mutex);
        std::memcpy(pinned_in_.get(), x, in_bytes_ * n);
        cudaStream_t s = ctx_.stream.get();
        if (!exec_ && graphs_) {
            enqueue(layers);  // warm-up: first-touch costs stay out of the graph
            LENET_CHECK(cudaStreamSynchronize(s));
            capture(layers);
        }
        if (exec_)
            LENET_CHECK(cudaGraphLaunch(exec_.get(), s));
        else
            enqueue(layers);
        LENET_CHECK(cudaStreamSynchronize(s));
        std::memcpy(y, pinned_out_.get(), out_bytes_ * n);
    }

    Facts facts() const override {
        return {{"execution", std::string(exec_ ? "graph" : graphs_ ? "pending" : "eager")}, {"why", why_}};
    }

private:
    void enqueue(const LayerWalk& layers) {
        cudaStream_t s = ctx_.stream.get();
        LENET_CHECK(cudaMemcpyAsync(dev_in_.get(), pinned_in_.get(), in_bytes_ * capacity_, cudaMemcpyHostToDevice, s));
        layers(f(dev_in_), f(dev_out_), capacity_);
        LENET_CHECK(cudaMemcpyAsync(pinned_out_.get(), dev_out_.get(), out_bytes_ * capacity_, cudaMemcpyDeviceToHost, s));
    }

    // Records the forward pass into a graph. If this CUDA/cuDNN cannot capture it
    // (an uncapturable call, a driver that refuses), the plan runs eagerly from
    // then on, this call included, and facts() says why.
    void capture(const LayerWalk& layers) {
        cudaStream_t s = ctx_.stream.get();
        std::string failed;
        cudaGraph_t graph = nullptr;
        if (const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
            failed = "cudaStreamBeginCapture: " + error_text(e);
        } else {
            try {
                if (ctx_.capture_fault) LENET_CHECK(cudaStreamSynchronize(s));  // not allowed while capturing
                enqueue(layers);
            } catch (const CudaError& e) {
                failed = e.what();
            }
            // Always ends the capture, so that the stream leaves capture mode.
            const cudaError_t end = cudaStreamEndCapture(s, &graph);
            if (failed.empty() && end != cudaSuccess) failed = "cudaStreamEndCapture: " + error_text(end);
        }
        GraphHandle owned(graph);
        if (failed.empty()) {
            cudaGraphExec_t exec = nullptr;
            if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
                failed = "cudaGraphInstantiate: " + error_text(e);
            else
                exec_.reset(exec);
        }
        if (!failed.empty()) {
            (void)cudaGetLastError();
            graphs_ = false;
            why_ = "graph capture failed, running eagerly: " + failed;
        } else {
            why_ = "captured on the first call, replayed since";
        }
    }

    Context& ctx_;
    const int capacity_;
    const size_t in_bytes_, out_bytes_;
    PinnedMemory pinned_in_, pinned_out_;
    DeviceMemory dev_in_, dev_out_;
    GraphExec exec_;
    bool graphs_;  // still to try, or in use; false after a failed capture
    std::string why_;
};

class CudaBackend : public Backend {
public:
    explicit CudaBackend(const BackendOptions& options) {
        std::string why;
        if (device_count(&why) == 0) throw CudaError("no usable CUDA device: " + why);
        cudaDeviceProp prop{};
        LENET_CHECK(cudaGetDeviceProperties(&prop, 0));
        ctx_.device_name = prop.name;
        ctx_.cc_major = prop.major;
        ctx_.allow_tf32 = options.allow_tf32;
        ctx_.graphs = options.cuda_graphs;
        const char* fault = std::getenv("LENET_CUDA_TEST_CAPTURE_FAULT");
        ctx_.capture_fault = fault && *fault && std::string(fault) != "0";
        cudaStream_t stream = nullptr;
        LENET_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        ctx_.stream.reset(stream);
        ctx_.cublas_workspace_bytes = cublas_workspace_bytes(prop.major);
        ctx_.cublas_workspace = device_alloc(ctx_.cublas_workspace_bytes);
        ctx_.cudnn = create<CudnnHandle, cudnnCreate>();
        ctx_.cublas = create<CublasHandle, cublasCreate>();
        LENET_CHECK(cudnnSetStream(ctx_.cudnn.get(), stream));
        LENET_CHECK(cublasSetStream(ctx_.cublas.get(), stream));
        // After cublasSetStream, which resets the workspace to cuBLAS' own pool.
        LENET_CHECK(cublasSetWorkspace(ctx_.cublas.get(), ctx_.cublas_workspace.get(), ctx_.cublas_workspace_bytes));
        // Default math keeps FP32 GEMMs in FP32; TF32 tensor cores only when asked.
        LENET_CHECK(cublasSetMathMode(ctx_.cublas.get(),
                                      options.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    }

    std::string name() const override { return "cuda"; }
    std::string description() const override {
        return "CUDA, " + ctx_.device_name + " (sm_" + std::to_string(ctx_.cc_major) + "x), cuDNN " +
               std::to_string(cudnnGetVersion()) + (ctx_.allow_tf32 ? ", TF32 allowed" : ", FP32") +
               (ctx_.graphs ? ", CUDA graphs" : ", no graphs") + ", cuBLAS workspace " +
               std::to_string(ctx_.cublas_workspace_bytes >> 20) + " MiB";
    }
    Layout layout() const override { return Layout::nchw; }
    int max_batch() const override { return kMaxBatch; }
    // Descriptors and graphs are fixed per capacity: rows past n are computed and
    // dropped, so that a handful of plans (and graphs) serve every batch size.
    int plan_capacity(int n) const override { return pow2_capacity(n, kMaxBatch); }
    int parallelism() const override { return 1; }

    std::shared_ptr<const StepConstants> prepare(const Step& s) override {
        const nchw::Constants host = nchw::constants(s);
        auto k = std::make_shared<DeviceConstants>();
        std::lock_guard<std::mutex> lock(ctx_.mutex);
        if (!host.weights.empty()) k->weights = upload(ctx_, host.weights);
        if (!host.bias.empty()) k->bias = upload(ctx_, host.bias);
        return k;
    }

    std::unique_ptr<Kernel> kernel(const Step& s, const StepConstants* constants, int capacity) override {
        // Planning uses the engine's handles and stream: not while a call runs on them.
        std::lock_guard<std::mutex> lock(ctx_.mutex);
        StepPlan p = plan_step(s, capacity, ctx_.allow_tf32);
        const auto& k = *static_cast<const DeviceConstants*>(constants);
        switch (s.op) {
            case OpKind::conv2d: return std::make_unique<ConvKernel>(ctx_, std::move(p), k);
            case OpKind::dense: return std::make_unique<DenseKernel>(ctx_, std::move(p), k);
            case OpKind::max_pool2d:
            case OpKind::avg_pool2d: return std::make_unique<PoolKernel>(ctx_, std::move(p));
            default: return std::make_unique<SimpleKernel>(ctx_, std::move(p), k);
        }
    }

    Buffer alloc(size_t floats) override {
        DeviceMemory m = device_alloc(floats * sizeof(float));
        return Buffer(static_cast<float*>(m.release()), [](float* q) { device_free(q); });
    }

    std::unique_ptr<Stream> stream(int capacity, int64_t input_size, int64_t output_size) override {
        return std::make_unique<GraphStream>(ctx_, capacity, input_size, output_size);
    }

private:
    Context ctx_;
};

}  // namespace

int device_count(std::string* why) {
    int n = 0;
    const cudaError_t s = cudaGetDeviceCount(&n);
    if (s != cudaSuccess) {
        if (why) *why = std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s);
        cudaGetLastError();
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA device found";
    return n;
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options) {
    return std::make_unique<CudaBackend>(options);
}

}  // namespace lenet::cuda
