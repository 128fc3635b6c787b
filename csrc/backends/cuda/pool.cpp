// Max and average pooling on cuDNN. Pads TensorFlow's way through the pre-padded
// input (planner.h); average pooling then rescales the border windows.
#include "elementwise.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

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
        const float one = 1.f, zero = 0.f;
        const float* src = prepad_.apply(ctx_, p_, x[0]);
        LENET_CHECK(lib::cudnnPoolingForward(ctx_.cudnn.get(), p_.pool.get(), &one, prepad_.desc(p_), src, &zero,
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

}  // namespace

std::unique_ptr<Kernel> make_pool_kernel(Context& ctx, StepPlan plan) {
    return std::make_unique<PoolKernel>(ctx, std::move(plan));
}

}  // namespace lenet::cuda
