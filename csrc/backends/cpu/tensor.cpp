// Steps that move values rather than compute them: reshape (a copy in NHWC),
// permute, concatenation, resizing.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "ops.h"

namespace lenet::cpu {
namespace {

// Canonical memory is already in the order a reshape reads and writes.
class Copy : public Kernel {
public:
    explicit Copy(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        std::memcpy(y, x[0], size_t(n) * s_.out.size() * sizeof(float));
    }

private:
    const Step& s_;
};

// Output axis i is input axis perm[i].
class Permute : public Kernel {
public:
    explicit Permute(const Step& s) : s_(s) {
        const Dims in = s.in;
        const size_t stride[3] = {size_t(in.w) * in.c, size_t(in.c), 1};
        for (int i = 0; i < 3; ++i) step_[i] = stride[s.perm[i]];
    }
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const Dims out = s_.out;
        for (int b = 0; b < n; ++b) {
            const float* src = x[0] + b * s_.in.size();
            float* dst = y + b * out.size();
            for (int i = 0; i < out.h; ++i)
                for (int j = 0; j < out.w; ++j) {
                    const float* p = src + i * step_[0] + j * step_[1];
                    for (int k = 0; k < out.c; ++k) *dst++ = p[k * step_[2]];
                }
        }
    }

private:
    const Step& s_;
    size_t step_[3];  // input floats between neighbours along each output axis
};

// Inputs side by side along one canonical axis: per image, each input is `outer`
// runs of `inner` floats, copied after the previous inputs' runs.
class Concat : public Kernel {
public:
    explicit Concat(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const Dims out = s_.out;
        const int outer = s_.axis == 0 ? 1 : s_.axis == 1 ? out.h : out.h * out.w;
        const size_t total = size_t(out.size()) / outer;
        for (int b = 0; b < n; ++b) {
            size_t offset = 0;
            for (size_t k = 0; k < s_.ins.size(); ++k) {
                const size_t inner = size_t(s_.ins[k].size()) / outer;
                const float* src = x[k] + b * s_.ins[k].size();
                float* dst = y + b * out.size() + offset;
                for (int o = 0; o < outer; ++o) std::memcpy(dst + o * total, src + o * inner, inner * sizeof(float));
                offset += inner;
            }
        }
    }

private:
    const Step& s_;
};

// Bilinear or nearest resizing with half-pixel centres, as tf.image.resize
// computes it (resize_bilinear / resize_nearest_neighbor, half_pixel_centers),
// over the crop window s.pad (crop_to_aspect_ratio).
class Resize : public Kernel {
public:
    explicit Resize(const Step& s) : s_(s) {
        const int ch = s.in.h - s.pad.top - s.pad.bottom, cw = s.in.w - s.pad.left - s.pad.right;
        axis(ch, s.out.h, s.pad.top, ys_);
        axis(cw, s.out.w, s.pad.left, xs_);
    }
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const Dims in = s_.in, out = s_.out;
        const int c = in.c;
        for (int b = 0; b < n; ++b) {
            const float* img = x[0] + b * in.size();
            float* dst = y + b * out.size();
            for (int oy = 0; oy < out.h; ++oy) {
                const Tap& ty = ys_[oy];
                const float* r0 = img + size_t(ty.lo) * in.w * c;
                const float* r1 = img + size_t(ty.hi) * in.w * c;
                for (int ox = 0; ox < out.w; ++ox, dst += c) {
                    const Tap& tx = xs_[ox];
                    if (s_.nearest) {
                        std::memcpy(dst, r0 + size_t(tx.lo) * c, c * sizeof(float));
                        continue;
                    }
                    const float *a = r0 + size_t(tx.lo) * c, *bb = r0 + size_t(tx.hi) * c;
                    const float *cc = r1 + size_t(tx.lo) * c, *d = r1 + size_t(tx.hi) * c;
                    for (int k = 0; k < c; ++k) {
                        const float top = a[k] + (bb[k] - a[k]) * tx.lerp;
                        const float bottom = cc[k] + (d[k] - cc[k]) * tx.lerp;
                        dst[k] = top + (bottom - top) * ty.lerp;
                    }
                }
            }
        }
    }

private:
    struct Tap {
        int lo, hi;
        float lerp;
    };
    // The source pixels of each output pixel along one axis of `in` pixels (from `first`).
    void axis(int in, int out, int first, std::vector<Tap>& taps) const {
        const float scale = float(in) / float(out);
        for (int i = 0; i < out; ++i) {
            if (s_.nearest) {
                const int at = std::max(0, std::min(int(std::floor((float(i) + 0.5f) * scale)), in - 1));
                taps.push_back({first + at, first + at, 0.f});
                continue;
            }
            const float v = (float(i) + 0.5f) * scale - 0.5f;
            const float f = std::floor(v);
            const int lo = std::max(int(f), 0), hi = std::min(int(std::ceil(v)), in - 1);
            taps.push_back({first + lo, first + hi, v - f});
        }
    }

    const Step& s_;
    std::vector<Tap> ys_, xs_;
};

}  // namespace

std::unique_ptr<Kernel> make_tensor_op(const Step& s) {
    switch (s.op) {
        case OpKind::reshape: return std::make_unique<Copy>(s);
        case OpKind::permute: return std::make_unique<Permute>(s);
        case OpKind::concat: return std::make_unique<Concat>(s);
        case OpKind::resize: return std::make_unique<Resize>(s);
        default: return nullptr;
    }
}

}  // namespace lenet::cpu
