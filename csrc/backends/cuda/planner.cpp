#include "planner.h"

#include <algorithm>
#include <limits>

namespace lenet::cuda {

ActDesc relu_desc(cudnnNanPropagation_t nan) {
    auto d = create<ActDesc, lib::cudnnCreateActivationDescriptor>();
    LENET_CHECK(lib::cudnnSetActivationDescriptor(d.get(), CUDNN_ACTIVATION_RELU, nan, 0.0));
    return d;
}

StepPlan::Fusion conv_fusion(const Activation& act) {
    if (act.plain_relu())
        return {true, "ReLU: cuDNN's fused conv + bias + ReLU, once checked against the unfused form"};
    if (act.linear()) return {false, "no activation: the bias in its own kernel"};
    return {false, "activation " + act.str() + ": cuDNN fuses plain ReLU only; bias and activation in one kernel"};
}

namespace {

void check_dims(const Step& s, const int got[4], int n) {
    if (got[0] != n || got[1] != s.out.c || got[2] != s.out.h || got[3] != s.out.w)
        throw CudaError("cuDNN planner: '" + s.layers + "' gives (" + std::to_string(got[0]) + ", " +
                        std::to_string(got[1]) + ", " + std::to_string(got[2]) + ", " + std::to_string(got[3]) +
                        "), the network expects (" + std::to_string(n) + ", " + std::to_string(s.out.c) + ", " +
                        std::to_string(s.out.h) + ", " + std::to_string(s.out.w) + ")");
}

}  // namespace

StepPlan plan_step(const Step& s, int n, bool allow_tf32) {
    StepPlan p;
    p.step = &s;
    p.n = n;
    p.padding = nchw::choose_padding(s);
    p.x = tensor_desc(n, s.in.c, s.in.h, s.in.w);
    p.y = tensor_desc(n, s.out.c, s.out.h, s.out.w);

    if (p.padding.prepadded()) {
        const Pads& q = p.padding.prepad;
        const Dims padded = nchw::padded_dims(s, p.padding);
        const int hp = padded.h, wp = padded.w;
        p.padded = tensor_desc(n, s.in.c, hp, wp);
        p.padded_view = create<TensorDesc, lib::cudnnCreateTensorDescriptor>();
        LENET_CHECK(lib::cudnnSetTensor4dDescriptorEx(p.padded_view.get(), CUDNN_DATA_FLOAT, n, s.in.c, s.in.h, s.in.w,
                                                      s.in.c * hp * wp, hp * wp, wp, 1));
        p.padded_offset = size_t(q.top) * wp + q.left;
        p.pad_value = nchw::pad_value(s);
    }
    // The tensor cuDNN reads: the input itself, or its pre-padded copy.
    cudnnTensorDescriptor_t in_desc = p.padding.prepadded() ? p.padded.get() : p.x.get();

    switch (s.op) {
        case OpKind::conv2d: {
            p.w = create<FilterDesc, lib::cudnnCreateFilterDescriptor>();
            LENET_CHECK(lib::cudnnSetFilter4dDescriptor(p.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.out.c,
                                                        s.in.c / s.groups, s.kh, s.kw));
            p.conv = create<ConvDesc, lib::cudnnCreateConvolutionDescriptor>();
            // Keras convolution is cross-correlation: no kernel flip.
            LENET_CHECK(lib::cudnnSetConvolution2dDescriptor(p.conv.get(), p.padding.pad_h, p.padding.pad_w, s.sh, s.sw,
                                                             s.dh, s.dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
            if (s.groups > 1) LENET_CHECK(lib::cudnnSetConvolutionGroupCount(p.conv.get(), s.groups));
            // FMA math forbids TF32 on Ampere and later; DEFAULT permits it.
            LENET_CHECK(
                lib::cudnnSetConvolutionMathType(p.conv.get(), allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
            LENET_CHECK(lib::cudnnGetConvolution2dForwardOutputDim(p.conv.get(), in_desc, p.w.get(), &p.cudnn_out[0],
                                                                   &p.cudnn_out[1], &p.cudnn_out[2], &p.cudnn_out[3]));
            check_dims(s, p.cudnn_out, n);
            p.bias = tensor_desc(1, s.out.c, 1, 1);
            // NaN propagates, as in TensorFlow; the backend falls back to not propagating
            // where cuDNN refuses to fuse with it (see conv.cpp).
            p.fusion = conv_fusion(s.act);
            if (p.fusion.tried) p.act = relu_desc(CUDNN_PROPAGATE_NAN);
            break;
        }
        case OpKind::max_pool2d:
        case OpKind::avg_pool2d: {
            p.pool = create<PoolDesc, lib::cudnnCreatePoolingDescriptor>();
            // Over a pre-padded input cuDNN pads nothing, so INCLUDE_PADDING divides by the full
            // window; avg_factor corrects the windows that overlapped TensorFlow's padding.
            const cudnnPoolingMode_t mode =
                s.op == OpKind::max_pool2d ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
            LENET_CHECK(lib::cudnnSetPooling2dDescriptor(p.pool.get(), mode, CUDNN_PROPAGATE_NAN, s.kh, s.kw, 0, 0,
                                                         s.sh, s.sw));
            LENET_CHECK(lib::cudnnGetPooling2dForwardOutputDim(p.pool.get(), in_desc, &p.cudnn_out[0], &p.cudnn_out[1],
                                                               &p.cudnn_out[2], &p.cudnn_out[3]));
            check_dims(s, p.cudnn_out, n);
            p.avg_factor = nchw::average_factors(s, p.padding);
            break;
        }
        case OpKind::dense: p.bias = tensor_desc(1, s.out.c, 1, 1); break;
        default:  // the small kernels of elementwise.cu need no descriptor
            break;
    }
    return p;
}

}  // namespace lenet::cuda

namespace lenet::cuda {

ConvKey conv_key(const StepPlan& p, bool allow_tf32) {
    const Step& s = *p.step;
    const Dims in = p.padding.prepadded() ? nchw::padded_dims(s, p.padding) : s.in;
    return {p.n,
            in.c,
            in.h,
            in.w,
            s.out.c,
            s.kh,
            s.kw,
            p.padding.pad_h,
            p.padding.pad_w,
            s.sh,
            s.sw,
            s.dh,
            s.dw,
            s.groups,
            allow_tf32 ? 1 : 0,
            p.fusion.tried ? 1 : 0,
            s.integers ? 1 : 0};
}

std::vector<int> rank_algorithms(const std::vector<AlgoCandidate>& c, bool allow_tf32, size_t workspace_limit) {
    std::vector<int> deterministic, other;  // cudnnFind lists the fastest first
    for (int i = 0; i < int(c.size()); ++i) {
        if (!c[i].ok || c[i].memory > workspace_limit || (c[i].tensor_math && !allow_tf32)) continue;
        (c[i].deterministic ? deterministic : other).push_back(i);
    }
    deterministic.insert(deterministic.end(), other.begin(), other.end());
    return deterministic;
}

int pick_algorithm(const std::vector<AlgoCandidate>& c, bool allow_tf32, size_t workspace_limit) {
    const std::vector<int> ranked = rank_algorithms(c, allow_tf32, workspace_limit);
    return ranked.empty() ? -1 : ranked.front();
}

const char* algorithm_name(int algo) {
    switch (algo) {
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
        case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
        case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
        case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
        case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
        case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
        default: return "unknown";
    }
}

size_t cublas_workspace_bytes(int major) { return (major >= 9 ? size_t(32) : size_t(4)) << 20; }

}  // namespace lenet::cuda
