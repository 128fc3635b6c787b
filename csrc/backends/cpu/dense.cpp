// Dense layers, y = x W + b with W (in, out). Direct kernels: a dense layer is a
// 1x1 convolution over n "pixels" on weights packed once (KernelTable::dense); for every shape of
// these networks, at every batch a plan runs (<= 64), it beat OpenBLAS SGEMM,
// which repacks its operands on every call (PERFORMANCE.md).
// cpu_kernels="blas": SGEMV for one image, SGEMM otherwise.
#include <cstring>

#include "blas.h"
#include "ops.h"

namespace lenet::cpu {
namespace {

class Dense : public Kernel {
public:
    Dense(const Step& s, const KernelTable* table, const PackedWeights* packed)
        : s_(s), in_(int(s.in.size())), out_(s.out.c), table_(table), packed_(packed) {}

    void run(Inputs xs, float* y, int n, ThreadPool* spare) override {
        const float* x = xs[0];
        if (table_ && packed_) {
            // A dense layer as a 1x1 convolution over a row of n pixels of in_ channels.
            ConvArgs a{};
            a.x = x, a.ih = 1, a.iw = n, a.ci = in_, a.oh = 1, a.ow = n;
            a.kh = a.kw = a.sh = a.sw = 1;
            a.w = packed_->w.data(), a.hwio = s_.weights.data(), a.bias = packed_->bias.data(), a.co = out_;
            a.relu = s_.act.plain_relu(), a.y = y, a.ldy = out_, a.row_begin = 0, a.row_end = 1, a.pool = false;
            conv_split(table_->dense, a, spare);
            if (!s_.act.plain_relu()) apply_activation(s_.act, y, size_t(n) * out_);
            return;
        }
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
    const KernelTable* table_;
    const PackedWeights* packed_;
};

}  // namespace

std::unique_ptr<Kernel> make_dense(const Step& s, const KernelTable* table, const PackedWeights* packed) {
    return std::make_unique<Dense>(s, table, packed);
}

}  // namespace lenet::cpu
