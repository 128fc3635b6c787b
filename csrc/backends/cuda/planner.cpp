#include "planner.h"

#include <algorithm>
#include <limits>

namespace lenet::cuda {

namespace {

// For cuDNN's fused conv + bias + activation, which the backend tries for a plain ReLU only.
ActDesc activation_desc(const Activation& act) {
    auto d = create<ActDesc, cudnnCreateActivationDescriptor>();
    const cudnnActivationMode_t mode = act.plain_relu() ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY;
    // NaN propagates, as in TensorFlow.
    LENET_CHECK(cudnnSetActivationDescriptor(d.get(), mode, CUDNN_PROPAGATE_NAN, 0.0));
    return d;
}

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
        p.padded_view = create<TensorDesc, cudnnCreateTensorDescriptor>();
        LENET_CHECK(cudnnSetTensor4dDescriptorEx(p.padded_view.get(), CUDNN_DATA_FLOAT, n, s.in.c, s.in.h, s.in.w,
                                                 s.in.c * hp * wp, hp * wp, wp, 1));
        p.padded_offset = size_t(q.top) * wp + q.left;
        p.pad_value = nchw::pad_value(s);
    }
    // The tensor cuDNN reads: the input itself, or its pre-padded copy.
    cudnnTensorDescriptor_t in_desc = p.padding.prepadded() ? p.padded.get() : p.x.get();

    switch (s.op) {
        case OpKind::conv2d: {
            p.w = create<FilterDesc, cudnnCreateFilterDescriptor>();
            LENET_CHECK(cudnnSetFilter4dDescriptor(p.w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.out.c,
                                                   s.in.c / s.groups, s.kh, s.kw));
            p.conv = create<ConvDesc, cudnnCreateConvolutionDescriptor>();
            // Keras convolution is cross-correlation: no kernel flip.
            LENET_CHECK(cudnnSetConvolution2dDescriptor(p.conv.get(), p.padding.pad_h, p.padding.pad_w, s.sh, s.sw,
                                                        s.dh, s.dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
            if (s.groups > 1) LENET_CHECK(cudnnSetConvolutionGroupCount(p.conv.get(), s.groups));
            // FMA math forbids TF32 on Ampere and later; DEFAULT permits it.
            LENET_CHECK(cudnnSetConvolutionMathType(p.conv.get(), allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
            LENET_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv.get(), in_desc, p.w.get(), &p.cudnn_out[0],
                                                              &p.cudnn_out[1], &p.cudnn_out[2], &p.cudnn_out[3]));
            check_dims(s, p.cudnn_out, n);
            p.bias = tensor_desc(1, s.out.c, 1, 1);
            p.act = activation_desc(s.act);
            break;
        }
        case OpKind::max_pool2d:
        case OpKind::avg_pool2d: {
            p.pool = create<PoolDesc, cudnnCreatePoolingDescriptor>();
            // Over a pre-padded input cuDNN pads nothing, so INCLUDE_PADDING divides by the full
            // window; avg_factor corrects the windows that overlapped TensorFlow's padding.
            const cudnnPoolingMode_t mode = s.op == OpKind::max_pool2d ? CUDNN_POOLING_MAX
                                                                       : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
            LENET_CHECK(cudnnSetPooling2dDescriptor(p.pool.get(), mode, CUDNN_PROPAGATE_NAN, s.kh, s.kw, 0, 0, s.sh,
                                                    s.sw));
            LENET_CHECK(cudnnGetPooling2dForwardOutputDim(p.pool.get(), in_desc, &p.cudnn_out[0], &p.cudnn_out[1],
                                                          &p.cudnn_out[2], &p.cudnn_out[3]));
            check_dims(s, p.cudnn_out, n);
            p.avg_factor = nchw::average_factors(s, p.padding);
            break;
        }
        case OpKind::dense:
            p.bias = tensor_desc(1, s.out.c, 1, 1);
            break;
        default:  // the small kernels of elementwise.cu need no descriptor
            break;
    }
    return p;
}

}  // namespace lenet::cuda
