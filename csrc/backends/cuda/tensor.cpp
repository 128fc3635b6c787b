// The steps that move values without arithmetic on them, or with the little of
// resizing: padding and cropping, reshape, permute, resize, concatenation. Each is
// one launch of elementwise.cu per input.
#include "elementwise.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

class TensorKernel : public Kernel {
public:
    TensorKernel(Context& ctx, StepPlan plan) : ctx_(ctx), p_(std::move(plan)) {}
    void run(Inputs x, float* y, int, ThreadPool*) override {
        const Step& s = *p_.step;
        const int n = p_.n;
        cudaStream_t stream = ctx_.stream.get();
        switch (s.op) {
            case OpKind::pad2d: launch_pad(x[0], y, n, s.in, s.out, s.pad.top, s.pad.left, stream); break;
            case OpKind::reshape: launch_reshape(x[0], y, n, s.in, s.out, stream); break;
            case OpKind::permute: launch_permute(x[0], y, n, s.in, s.out, s.perm, stream); break;
            case OpKind::resize: launch_resize(x[0], y, n, s.in, s.out, s.pad, s.nearest, stream); break;
            case OpKind::concat: {
                int offset = 0;
                for (size_t k = 0; k < s.ins.size(); ++k) {
                    launch_concat(x[k], y, n, s.ins[k], s.out, s.axis, offset, stream);
                    const Dims d = s.ins[k];
                    offset += s.axis == 0 ? d.h : s.axis == 1 ? d.w : d.c;
                }
                break;
            }
            default: throw CudaError(std::string("CUDA backend: no tensor kernel for ") + to_string(s.op));
        }
        LENET_CHECK(cudaGetLastError());
    }
    Facts facts() const override { return {{"algorithm", std::string("lenet kernel")}}; }

private:
    Context& ctx_;
    StepPlan p_;
};

}  // namespace

std::unique_ptr<Kernel> make_tensor_kernel(Context& ctx, StepPlan plan) {
    return std::make_unique<TensorKernel>(ctx, std::move(plan));
}

}  // namespace lenet::cuda
