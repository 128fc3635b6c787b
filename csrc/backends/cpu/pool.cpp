// Max and average pooling over NHWC. Padding pixels are absent: the window is
// clipped to the image, so max ignores them and average divides by the number
// of real pixels (TensorFlow's 'same' pooling).
#include <algorithm>
#include <limits>
#include <vector>

#include "ops.h"

namespace lenet::cpu {
namespace {

class Pool2d : public Kernel {
public:
    explicit Pool2d(const Step& s) : s_(s), max_(s.op == OpKind::max_pool2d) {}

    void run(const float* x, float* y, int n) override {
        const Dims in = s_.in, out = s_.out;
        const int c = in.c;
        for (int b = 0; b < n; ++b) {
            const float* image = x + b * in.size();
            for (int oy = 0; oy < out.h; ++oy) {
                const int y0 = std::max(oy * s_.sh - s_.pad.top, 0);
                const int y1 = std::min(oy * s_.sh - s_.pad.top + s_.kh, in.h);
                for (int ox = 0; ox < out.w; ++ox) {
                    const int x0 = std::max(ox * s_.sw - s_.pad.left, 0);
                    const int x1 = std::min(ox * s_.sw - s_.pad.left + s_.kw, in.w);
                    float* dst = y + ((size_t(b) * out.h + oy) * out.w + ox) * c;
                    std::fill(dst, dst + c, max_ ? -std::numeric_limits<float>::infinity() : 0.f);
                    for (int iy = y0; iy < y1; ++iy)
                        for (int ix = x0; ix < x1; ++ix) {
                            const float* src = image + (size_t(iy) * in.w + ix) * c;
                            if (max_)
                                for (int k = 0; k < c; ++k) dst[k] = std::max(dst[k], src[k]);
                            else
                                for (int k = 0; k < c; ++k) dst[k] += src[k];
                        }
                    if (!max_) {
                        const float inv = 1.f / float((y1 - y0) * (x1 - x0));
                        for (int k = 0; k < c; ++k) dst[k] *= inv;
                    }
                }
            }
        }
    }

private:
    const Step& s_;
    const bool max_;
};

}  // namespace

std::unique_ptr<Kernel> make_pool2d(const Step& s) { return std::make_unique<Pool2d>(s); }

}  // namespace lenet::cpu
