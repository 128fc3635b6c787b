// Max and average pooling over NHWC, one image at a time through the kernel
// table's pool (direct_kernels.cpp). Padding pixels are absent: the window is
// clipped to the image, so max ignores them and average divides by the number
// of real pixels (TensorFlow's 'same' pooling).
#include "ops.h"

namespace lenet::cpu {
namespace {

class Pool2d : public Kernel {
public:
    Pool2d(const Step& s, const KernelTable& table) : s_(s), table_(table), row_(size_t(s.in.w) * s.in.c) {}

    void run(Inputs xs, float* y, int n, ThreadPool*) override {
        const float* x = xs[0];
        const Dims in = s_.in, out = s_.out;
        PoolArgs a{nullptr,
                   in.h,
                   in.w,
                   in.c,
                   out.h,
                   out.w,
                   s_.kh,
                   s_.kw,
                   s_.sh,
                   s_.sw,
                   s_.pad.top,
                   s_.pad.left,
                   s_.op == OpKind::max_pool2d,
                   row_.data(),
                   nullptr};
        for (int b = 0; b < n; ++b) {
            a.x = x + b * in.size();
            a.y = y + b * out.size();
            table_.pool(a);
        }
    }

private:
    const Step& s_;
    const KernelTable& table_;
    AlignedFloats row_;
};

}  // namespace

std::unique_ptr<Kernel> make_pool2d(const Step& s, const KernelTable& table) {
    return std::make_unique<Pool2d>(s, table);
}

}  // namespace lenet::cpu
