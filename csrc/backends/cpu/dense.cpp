// Dense layers on SGEMM (SGEMV for a single image): y = x W + b, W (in, out).
#include <cstring>

#include "blas.h"
#include "ops.h"

namespace lenet::cpu {
namespace {

class Dense : public Kernel {
public:
    explicit Dense(const Step& s) : s_(s), in_(int(s.in.size())), out_(s.out.c) {}

    void run(const float* x, float* y, int n) override {
        for (int b = 0; b < n; ++b) std::memcpy(y + size_t(b) * out_, s_.bias.data(), out_ * sizeof(float));
        if (n == 1)
            blas::sgemv_t(in_, out_, s_.weights.data(), x, 1.f, y);
        else
            blas::sgemm_nn(n, out_, in_, x, in_, s_.weights.data(), out_, 1.f, y, out_);
        apply_activation(s_.act, y, size_t(n) * out_);
    }

private:
    const Step& s_;
    const int in_, out_;
};

}  // namespace

std::unique_ptr<Kernel> make_dense(const Step& s) { return std::make_unique<Dense>(s); }

}  // namespace lenet::cpu
