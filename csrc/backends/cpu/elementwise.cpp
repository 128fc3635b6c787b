// Activations, softmax, Rescaling (affine) and zero padding over NHWC.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops.h"

namespace lenet::cpu {

void apply_activation(Act act, float* y, size_t n) {
    switch (act) {
        case Act::linear:
        case Act::softmax:  // never fused: softmax is its own step
            return;
        case Act::relu:
            for (size_t i = 0; i < n; ++i) y[i] = std::max(y[i], 0.f);
            return;
        case Act::tanh:
            for (size_t i = 0; i < n; ++i) y[i] = std::tanh(y[i]);
            return;
        case Act::sigmoid:
            for (size_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-y[i]));
            return;
    }
}

namespace {

class Activation : public Kernel {
public:
    explicit Activation(const Step& s) : s_(s) {}
    void run(const float* x, float* y, int n, ThreadPool*) override {
        const size_t count = size_t(n) * s_.in.size();
        std::memcpy(y, x, count * sizeof(float));
        apply_activation(s_.act, y, count);
    }

private:
    const Step& s_;
};

// Softmax over the channel axis of every pixel (the last axis, as Keras does).
class Softmax : public Kernel {
public:
    explicit Softmax(const Step& s) : s_(s) {}
    void run(const float* x, float* y, int n, ThreadPool*) override {
        const int c = s_.in.c;
        const size_t vectors = size_t(n) * s_.in.h * s_.in.w;
        for (size_t v = 0; v < vectors; ++v) {
            const float* src = x + v * c;
            float* dst = y + v * c;
            const float top = *std::max_element(src, src + c);
            float sum = 0.f;
            for (int k = 0; k < c; ++k) sum += dst[k] = std::exp(src[k] - top);
            const float inv = 1.f / sum;
            for (int k = 0; k < c; ++k) dst[k] *= inv;
        }
    }

private:
    const Step& s_;
};

class Affine : public Kernel {
public:
    explicit Affine(const Step& s) : s_(s) {}
    void run(const float* x, float* y, int n, ThreadPool*) override {
        const size_t count = size_t(n) * s_.in.size();
        const float scale = s_.scale, offset = s_.offset;
        for (size_t i = 0; i < count; ++i) y[i] = x[i] * scale + offset;
    }

private:
    const Step& s_;
};

class Pad2d : public Kernel {
public:
    explicit Pad2d(const Step& s) : s_(s) {}
    void run(const float* x, float* y, int n, ThreadPool*) override {
        const Dims in = s_.in, out = s_.out;
        const size_t row = size_t(in.w) * in.c;
        std::memset(y, 0, size_t(n) * out.size() * sizeof(float));
        for (int b = 0; b < n; ++b)
            for (int iy = 0; iy < in.h; ++iy)
                std::memcpy(y + b * out.size() + ((size_t(iy) + s_.pad.top) * out.w + s_.pad.left) * in.c,
                            x + b * in.size() + iy * row, row * sizeof(float));
    }

private:
    const Step& s_;
};

}  // namespace

std::unique_ptr<Kernel> make_elementwise(const Step& s) {
    switch (s.op) {
        case OpKind::activation: return std::make_unique<Activation>(s);
        case OpKind::softmax: return std::make_unique<Softmax>(s);
        case OpKind::affine: return std::make_unique<Affine>(s);
        case OpKind::pad2d: return std::make_unique<Pad2d>(s);
        default: return nullptr;
    }
}

}  // namespace lenet::cpu
