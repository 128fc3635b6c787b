// The steps computed value by value (or pixel by pixel, or sample by sample):
// activations, affine (batch norm, rescaling, normalization), PReLU, layer
// normalization, quantization, merges, on the small kernels of elementwise.cu;
// softmax on cuDNN.
#include <algorithm>

#include "elementwise.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

class PointwiseKernel : public Kernel {
public:
    PointwiseKernel(Context& ctx, StepPlan plan, const DeviceConstants& k) : ctx_(ctx), p_(std::move(plan)), k_(k) {}
    void run(Inputs x, float* y, int, ThreadPool*) override {
        const Step& s = *p_.step;
        const int n = p_.n;
        const int64_t count = int64_t(n) * s.out.size();
        cudaStream_t stream = ctx_.stream.get();
        switch (s.op) {
            case OpKind::activation: launch_activation(x[0], y, count, s.act, stream); break;
            case OpKind::softmax: {
                // Over the channel axis of each pixel: Keras' last axis in NHWC.
                const float one = 1.f, zero = 0.f;
                LENET_CHECK(
                    lib::cudnnSoftmaxForward(ctx_.cudnn.get(), s.log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                             CUDNN_SOFTMAX_MODE_CHANNEL, &one, p_.x.get(), x[0], &zero, p_.y.get(), y));
                break;
            }
            case OpKind::affine:
                launch_affine(x[0], y, f(k_.weights), f(k_.bias), count, s.out.c, s.out.h * s.out.w, stream);
                break;
            case OpKind::prelu: launch_prelu(x[0], y, f(k_.weights), count, s.out.size(), stream); break;
            case OpKind::layer_norm:
                launch_layer_norm(x[0], y, n, s.out, f(k_.weights), f(k_.bias), s.epsilon, stream);
                break;
            case OpKind::quantize: launch_quantize(x[0], y, n, s.out.size(), s.quant, s.integers, stream); break;
            case OpKind::dequantize:
                launch_dequantize(x[0], x[1], y, n, s.out, s.ins.at(1).size(), f(k_.weights), stream);
                break;
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
            default: throw CudaError(std::string("CUDA backend: no pointwise kernel for ") + to_string(s.op));
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

}  // namespace

bool is_pointwise(OpKind op) {
    switch (op) {
        case OpKind::activation:
        case OpKind::softmax:
        case OpKind::affine:
        case OpKind::prelu:
        case OpKind::layer_norm:
        case OpKind::quantize:
        case OpKind::dequantize:
        case OpKind::merge: return true;
        default: return false;
    }
}

std::unique_ptr<Kernel> make_pointwise_kernel(Context& ctx, StepPlan plan, const DeviceConstants& k) {
    return std::make_unique<PointwiseKernel>(ctx, std::move(plan), k);
}

}  // namespace lenet::cuda
