// Convolutions on cuDNN.
//
// Once per process and shape (ConvKey), under the engine's lock, at plan time:
//  1. cudnnFind times every algorithm on scratch buffers;
//  2. the candidates the math mode allows (planner.h: rank_algorithms) run, best
//     first, on a probe input, and the first whose output agrees with
//     IMPLICIT_GEMM's (the plain algorithm, FMA math) is kept: a fast algorithm whose
//     numbers are not FP32's (reduced-precision transforms, tensor-core math where
//     none was allowed) is passed over, and describe() says by how much the kept one
//     differs;
//  3. for plain ReLU (planner.h: conv_fusion), cuDNN's fused conv + bias + ReLU is
//     tried and kept only if cuDNN runs it and it gives conv + bias + ReLU's numbers.
// Every plan of the shape, in any engine, graph or eager, then runs the same
// algorithm and gives the same bits. Nothing is decided at run time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>

#include "../../support/format.h"
#include "elementwise.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

constexpr size_t kFindWorkspaceLimit = size_t(64) << 20;  // cudnnFind may try algorithms up to this
constexpr int kProbeImages = 2;                          // images of the probe input (the rest zeros)
const float kOne = 1.f, kZero = 0.f;

struct ConvChoice {
    cudnnConvolutionFwdAlgo_t algo{};
    cudnnMathType_t math{};
    size_t workspace = 0;
    bool deterministic = false;
    float find_ms = 0.f;
    std::string checked;  // how the algorithm's numbers were checked
    bool fused = false;
    cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
    std::string fusion;  // what was decided, and why
};

// The convolution choices of this process, shared by every engine (they all run
// on device 0).
struct ConvChoices {
    std::mutex mutex;
    std::map<ConvKey, ConvChoice> by_key;
};
ConvChoices& conv_choices() {
    static ConvChoices* choices = new ConvChoices;  // never destroyed: engines may outlive static destructors
    return *choices;
}

// Algorithms whose sums of integer products below 2^24 are exact in FP32 math: the
// GEMM forms (no Winograd or FFT transforms).
bool sums_exactly(int algo) {
    return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
}

// Largest |a - b| over n values, and largest |b|.
std::pair<double, double> max_difference(const std::vector<float>& a, const std::vector<float>& b) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    return {diff, scale};
}

std::string status_text(cudnnStatus_t st) {
    char detail[256] = {0};
    lib::cudnnGetLastErrorString(detail, sizeof(detail));
    return std::string(lib::cudnnGetErrorString(st)) + (detail[0] ? std::string(" ") + detail : "");
}

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
        if (ctx_.allow_tf32) LENET_CHECK(lib::cudnnSetConvolutionMathType(p_.conv.get(), choice_.math));
        if (choice_.fused && choice_.nan != CUDNN_PROPAGATE_NAN) p_.act = relu_desc(choice_.nan);
        workspace_ = device_alloc(choice_.workspace);
    }

    void run(Inputs x, float* y, int, ThreadPool*) override {
        const float* src = prepad_.apply(ctx_, p_, x[0]);
        const Step& s = *p_.step;
        if (choice_.fused) {
            // y = relu(conv(x) + bias); z = y with alpha2 = 0 as cuDNN requires a z tensor.
            LENET_CHECK(lib::cudnnConvolutionBiasActivationForward(
                ctx_.cudnn.get(), &kOne, prepad_.desc(p_), src, p_.w.get(), f(k_.weights), p_.conv.get(), choice_.algo,
                workspace_.get(), choice_.workspace, &kZero, p_.y.get(), y, p_.bias.get(), f(k_.bias), p_.act.get(),
                p_.y.get(), y));
            return;
        }
        LENET_CHECK(lib::cudnnConvolutionForward(ctx_.cudnn.get(), &kOne, prepad_.desc(p_), src, p_.w.get(),
                                                 f(k_.weights), p_.conv.get(), choice_.algo, workspace_.get(),
                                                 choice_.workspace, &kZero, p_.y.get(), y));
        launch_bias_act(y, f(k_.bias), int64_t(p_.n) * s.out.size(), s.out.c, s.out.h * s.out.w, s.act,
                        ctx_.stream.get());
        LENET_CHECK(cudaGetLastError());
    }

    Facts facts() const override {
        const bool tensor =
            choice_.math == CUDNN_TENSOR_OP_MATH || choice_.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
        return {{"algorithm", std::string(algorithm_name(choice_.algo))},
                {"math", std::string(tensor ? "TF32" : "FP32")},
                {"deterministic", choice_.deterministic},
                {"workspace_bytes", int64_t(choice_.workspace)},
                {"checked", choice_.checked},
                {"fused", choice_.fused},
                {"fusion", choice_.fusion},
                {"prepadded", p_.padding.prepadded()}};
    }

private:
    // One convolution of the probe input with `algo`; the status, and the output of
    // the probe images on the host.
    cudnnStatus_t try_algorithm(cudnnConvolutionFwdAlgo_t algo, size_t workspace_bytes, const float* x, float* y,
                                std::vector<float>* out) {
        DeviceMemory workspace = device_alloc(workspace_bytes);
        const cudnnStatus_t st =
            lib::cudnnConvolutionForward(ctx_.cudnn.get(), &kOne, prepad_.desc(p_), x, p_.w.get(), f(k_.weights),
                                         p_.conv.get(), algo, workspace.get(), workspace_bytes, &kZero, p_.y.get(), y);
        if (st == CUDNN_STATUS_SUCCESS) *out = download(ctx_, y, probe_outputs());
        return st;
    }

    size_t probe_outputs() const { return size_t(std::min(p_.n, kProbeImages)) * p_.step->out.size(); }

    // Outputs of FP32 convolutions of `fan_in` products differ with the summation order
    // by ~sqrt(fan_in) units of roundoff of their scale; TF32 or a lossy transform by
    // a thousand times more.
    double tolerance(double scale) const {
        const Step& s = *p_.step;
        const double fan_in = double(s.in.c / s.groups) * s.kh * s.kw;
        const double fp32 = 4e-6 * std::max(5.0, std::sqrt(fan_in));
        return (ctx_.allow_tf32 ? 1e-2 : fp32) * std::max(1.0, scale);
    }

    ConvChoice choose() {
        const Step& s = *p_.step;
        const Dims in = p_.padding.prepadded() ? nchw::padded_dims(s, p_.padding) : s.in;
        const size_t in_floats = size_t(p_.n) * in.size();
        const size_t out_bytes = size_t(p_.n) * s.out.size() * sizeof(float);

        // The probe: the first images uniform in [-1, 1] from a fixed generator, the rest zeros.
        std::vector<float> probe(in_floats, 0.f);
        uint32_t state = 12345u;
        const size_t probed = std::min<size_t>(in_floats, size_t(kProbeImages) * in.size());
        for (size_t i = 0; i < probed; ++i) {
            state = state * 1664525u + 1013904223u;
            probe[i] = float(int32_t(state >> 8) - (1 << 23)) / float(1 << 23);
        }
        DeviceMemory x = upload(ctx_, probe);
        DeviceMemory y = device_alloc(out_bytes);
        DeviceMemory scratch = device_alloc(kFindWorkspaceLimit);
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        int returned = 0;
        LENET_CHECK(lib::cudnnFindConvolutionForwardAlgorithmEx(
            ctx_.cudnn.get(), prepad_.desc(p_), x.get(), p_.w.get(), f(k_.weights), p_.conv.get(), p_.y.get(), y.get(),
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, scratch.get(), kFindWorkspaceLimit));
        scratch.reset();
        std::vector<AlgoCandidate> candidates;
        for (int i = 0; i < returned; ++i)
            candidates.push_back({int(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS, perf[i].time,
                                  perf[i].memory, perf[i].determinism == CUDNN_DETERMINISTIC,
                                  perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                                      perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION});
        const std::vector<int> ranked = rank_algorithms(candidates, ctx_.allow_tf32, kFindWorkspaceLimit);
        if (ranked.empty()) throw CudaError("cuDNN found no usable convolution algorithm for '" + s.layers + "'");

        // The reference: IMPLICIT_GEMM in FMA math.
        std::vector<float> reference;
        std::string no_reference;
        size_t ref_workspace = 0;
        bool listed = false;
        for (int i = 0; i < returned; ++i)
            if (perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM && perf[i].status == CUDNN_STATUS_SUCCESS)
                listed = true, ref_workspace = perf[i].memory;
        if (!listed) {
            no_reference = "IMPLICIT_GEMM not available for this shape";
        } else {
            LENET_CHECK(lib::cudnnSetConvolutionMathType(p_.conv.get(), CUDNN_FMA_MATH));
            const cudnnStatus_t st =
                try_algorithm(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, ref_workspace, f(x), f(y), &reference);
            if (st != CUDNN_STATUS_SUCCESS) no_reference = "IMPLICIT_GEMM failed: " + status_text(st);
        }

        ConvChoice c;
        std::string passed_over;
        for (int i : ranked) {
            if (s.integers && !sums_exactly(perf[i].algo)) {
                passed_over += std::string("; ") + algorithm_name(perf[i].algo) + " does not sum integers exactly";
                continue;
            }
            LENET_CHECK(lib::cudnnSetConvolutionMathType(
                p_.conv.get(), ctx_.allow_tf32 && !s.integers ? perf[i].mathType : CUDNN_FMA_MATH));
            std::vector<float> out;
            const cudnnStatus_t st = try_algorithm(perf[i].algo, perf[i].memory, f(x), f(y), &out);
            const std::string name = algorithm_name(perf[i].algo);
            if (st != CUDNN_STATUS_SUCCESS) {
                passed_over += "; " + name + " failed: " + status_text(st);
                continue;
            }
            std::string checked = "not checked (" + no_reference + ")";
            if (no_reference.empty()) {
                const auto [diff, scale] = max_difference(out, reference);
                if (diff > tolerance(scale)) {
                    passed_over += "; " + name + " differs from IMPLICIT_GEMM by " + number_str(float(diff));
                    continue;
                }
                checked = "agrees with IMPLICIT_GEMM (max |diff| " + number_str(float(diff)) + ")";
            }
            c.algo = perf[i].algo;
            c.math = s.integers ? CUDNN_FMA_MATH : perf[i].mathType;
            c.workspace = perf[i].memory;
            c.deterministic = candidates[i].deterministic;
            c.find_ms = perf[i].time;
            c.checked = checked + passed_over;
            break;
        }
        if (c.checked.empty())
            throw CudaError("cuDNN: no convolution algorithm for '" + s.layers + "' gives FP32's numbers" +
                            passed_over);
        if (!ctx_.allow_tf32)
            LENET_CHECK(lib::cudnnSetConvolutionMathType(p_.conv.get(), CUDNN_FMA_MATH));
        else
            LENET_CHECK(lib::cudnnSetConvolutionMathType(p_.conv.get(), c.math));

        c.fusion = p_.fusion.why;
        if (p_.fusion.tried) decide_fusion(c, f(x), f(y));
        LENET_CHECK(cudaStreamSynchronize(ctx_.stream.get()));
        return c;
    }

    // Tries the fused call with the chosen algorithm, NaN propagating first; keeps it
    // only if it gives relu(conv + bias) for the probe images.
    void decide_fusion(ConvChoice& c, const float* x, float* y) {
        const Step& s = *p_.step;
        std::vector<float> conv;
        if (try_algorithm(c.algo, c.workspace, x, y, &conv) != CUDNN_STATUS_SUCCESS) {
            c.fusion = "the chosen algorithm failed on its second run: bias and ReLU in one kernel";
            return;
        }
        // relu(conv + bias) on the host: the numbers the unfused path gives.
        const int64_t plane = int64_t(s.out.h) * s.out.w;
        for (size_t i = 0; i < conv.size(); ++i)
            conv[i] = std::max(0.f, conv[i] + k_.host_bias[size_t(i / plane) % k_.host_bias.size()]);
        DeviceMemory workspace = device_alloc(c.workspace);
        std::string refused;
        for (const cudnnNanPropagation_t nan : {CUDNN_PROPAGATE_NAN, CUDNN_NOT_PROPAGATE_NAN}) {
            ActDesc act = relu_desc(nan);
            const cudnnStatus_t st = lib::cudnnConvolutionBiasActivationForward(
                ctx_.cudnn.get(), &kOne, prepad_.desc(p_), x, p_.w.get(), f(k_.weights), p_.conv.get(), c.algo,
                workspace.get(), c.workspace, &kZero, p_.y.get(), y, p_.bias.get(), f(k_.bias), act.get(), p_.y.get(),
                y);
            if (st != CUDNN_STATUS_SUCCESS) {
                refused += (refused.empty() ? "" : "; ") + status_text(st);
                continue;
            }
            const auto [diff, scale] = max_difference(download(ctx_, y, probe_outputs()), conv);
            if (diff > tolerance(scale)) {
                c.fusion = "cuDNN's fused call differs from conv + bias + ReLU by " + number_str(float(diff)) +
                           ": bias and ReLU in one kernel";
                return;
            }
            c.fused = true;
            c.nan = nan;
            c.fusion = nan == CUDNN_PROPAGATE_NAN
                           ? "cudnnConvolutionBiasActivationForward, NaN propagating"
                           : "cudnnConvolutionBiasActivationForward, NaN not propagated (ReLU(NaN) = 0; with NaN "
                             "propagation cuDNN refused: " +
                                 refused + ")";
            return;
        }
        c.fusion = "cuDNN refused the fused call (" + refused + "): bias and ReLU in one kernel";
    }

    Context& ctx_;
    StepPlan p_;
    const DeviceConstants& k_;
    Prepad prepad_;
    ConvChoice choice_;
    DeviceMemory workspace_;
};

}  // namespace

std::unique_ptr<Kernel> make_conv_kernel(Context& ctx, StepPlan plan, const DeviceConstants& k) {
    return std::make_unique<ConvKernel>(ctx, std::move(plan), k);
}

}  // namespace lenet::cuda
