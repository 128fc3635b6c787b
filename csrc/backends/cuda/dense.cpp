// Dense layers on cuBLAS, then bias + activation in one kernel of ours.
//
// y (n, out) = x (n, in) W (in, out) + b, row-major. cuBLAS is column-major, where
// these buffers read as y^T = W^T x^T: m = out, n = batch, k = in, no transposes.
// The handle's math mode is CUBLAS_DEFAULT_MATH unless TF32 is allowed: for SGEMM
// that computes in FP32 or better, never TF32 (cuda_backend.cpp checks it back).
#include "elementwise.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

class DenseKernel : public Kernel {
public:
    DenseKernel(Context& ctx, StepPlan plan, const DeviceConstants& k) : ctx_(ctx), p_(std::move(plan)), k_(k) {}
    void run(Inputs x, float* y, int, ThreadPool*) override {
        const Step& s = *p_.step;
        const int in = int(s.in.size()), out = s.out.c;
        const float one = 1.f, zero = 0.f;
        LENET_CHECK(lib::cublasSgemm(ctx_.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, out, p_.n, in, &one, f(k_.weights),
                                     out, x[0], in, &zero, y, out));
        launch_bias_act(y, f(k_.bias), int64_t(p_.n) * out, out, 1, s.act, ctx_.stream.get());
        LENET_CHECK(cudaGetLastError());
    }
    Facts facts() const override {
        return {{"algorithm", std::string("cublasSgemm")},
                {"math", std::string(ctx_.allow_tf32 ? "TF32" : "FP32")},
                {"workspace_bytes", int64_t(ctx_.cublas_workspace_bytes)},
                {"fused", false},
                {"fusion", std::string("bias and activation in one kernel after the GEMM")}};
    }

private:
    Context& ctx_;
    StepPlan p_;
    const DeviceConstants& k_;
};

}  // namespace

std::unique_ptr<Kernel> make_dense_kernel(Context& ctx, StepPlan plan, const DeviceConstants& k) {
    return std::make_unique<DenseKernel>(ctx, std::move(plan), k);
}

}  // namespace lenet::cuda
