// Activations, softmax, per-channel affine (Rescaling, Normalization, batch
// norm), layer normalization, PReLU, merges (Add, Multiply, ...), quantization and
// zero padding / cropping over NHWC.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../activation_math.h"
#include "../quantize_math.h"
#include "ops.h"

namespace lenet::cpu {

void apply_activation(const Activation& act, float* y, size_t n) {
    if (act.linear()) return;
    if (act.plain_relu()) {  // the common case, vectorized
        for (size_t i = 0; i < n; ++i) y[i] = y[i] < 0.f ? 0.f : y[i];  // NaN stays NaN, as in TensorFlow
        return;
    }
    for (size_t i = 0; i < n; ++i) y[i] = activate(act, y[i]);
}

namespace {

class ActivationKernel : public Kernel {
public:
    explicit ActivationKernel(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const size_t count = size_t(n) * s_.in.size();
        std::memcpy(y, x[0], count * sizeof(float));
        apply_activation(s_.act, y, count);
    }

private:
    const Step& s_;
};

// Softmax over the channel axis of every pixel (the last axis, as Keras does).
class Softmax : public Kernel {
public:
    explicit Softmax(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const int c = s_.in.c;
        const size_t vectors = size_t(n) * s_.in.h * s_.in.w;
        for (size_t v = 0; v < vectors; ++v) {
            const float* src = x[0] + v * c;
            float* dst = y + v * c;
            const float top = *std::max_element(src, src + c);
            float sum = 0.f;
            for (int k = 0; k < c; ++k) sum += dst[k] = std::exp(src[k] - top);
            if (s_.log) {
                const float log_sum = std::log(sum);
                for (int k = 0; k < c; ++k) dst[k] = src[k] - top - log_sum;
                continue;
            }
            const float inv = 1.f / sum;
            for (int k = 0; k < c; ++k) dst[k] *= inv;
        }
    }

private:
    const Step& s_;
};

// y = x * scale[c] + shift[c] (affine); y = x > 0 ? x : alpha[h, w, c] * x (prelu).
class PerElement : public Kernel {
public:
    explicit PerElement(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const size_t size = size_t(s_.in.size()), c = size_t(s_.in.c);
        const float* scale = s_.scale.data();
        const float* shift = s_.shift.data();
        for (int b = 0; b < n; ++b) {
            const float* src = x[0] + b * size;
            float* dst = y + b * size;
            if (s_.op == OpKind::prelu) {
                for (size_t i = 0; i < size; ++i) dst[i] = src[i] > 0.f ? src[i] : scale[i] * src[i];
                continue;
            }
            for (size_t p = 0; p < size; p += c)
                for (size_t k = 0; k < c; ++k) dst[p + k] = src[p + k] * scale[k] + shift[k];
        }
    }

private:
    const Step& s_;
};

// Add, Subtract, Multiply, Average, Maximum, Minimum of equally shaped inputs,
// left to right as Keras folds them.
class MergeKernel : public Kernel {
public:
    explicit MergeKernel(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const size_t count = size_t(n) * s_.out.size();
        const size_t inputs = s_.inputs.size();
        std::memcpy(y, x[0], count * sizeof(float));
        for (size_t k = 1; k < inputs; ++k) {
            const float* v = x[k];
            switch (s_.merge) {
                case Merge::add:
                case Merge::average:
                    for (size_t i = 0; i < count; ++i) y[i] += v[i];
                    break;
                case Merge::subtract:
                    for (size_t i = 0; i < count; ++i) y[i] -= v[i];
                    break;
                case Merge::multiply:
                    for (size_t i = 0; i < count; ++i) y[i] *= v[i];
                    break;
                case Merge::maximum:
                    for (size_t i = 0; i < count; ++i) y[i] = std::max(y[i], v[i]);
                    break;
                case Merge::minimum:
                    for (size_t i = 0; i < count; ++i) y[i] = std::min(y[i], v[i]);
                    break;
            }
        }
        if (s_.merge == Merge::average)
            for (size_t i = 0; i < count; ++i) y[i] /= float(inputs);
    }

private:
    const Step& s_;
};

// Each pixel's channels normalized: (x - mean) * rsqrt(var + eps) * gamma + beta, the
// moments accumulated in double (TensorFlow's float32 reductions agree to ~1e-7).
class LayerNorm : public Kernel {
public:
    explicit LayerNorm(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const int c = s_.in.c;
        const size_t vectors = size_t(n) * s_.in.h * s_.in.w;
        for (size_t v = 0; v < vectors; ++v) {
            const float* src = x[0] + v * c;
            float* dst = y + v * c;
            double sum = 0, sq = 0;
            for (int k = 0; k < c; ++k) sum += src[k];
            const double mean = sum / c;
            for (int k = 0; k < c; ++k) sq += (src[k] - mean) * (src[k] - mean);
            const float inv = float(1.0 / std::sqrt(sq / c + double(s_.epsilon)));
            const float m = float(mean);
            for (int k = 0; k < c; ++k) {
                const float g = inv * s_.scale[k];
                dst[k] = src[k] * g + (s_.shift[k] - m * g);
            }
        }
    }

private:
    const Step& s_;
};

// ONNX's quantization and its dequantization, each sample on its own (quantize_math.h).
class QuantizeKernel : public Kernel {
public:
    explicit QuantizeKernel(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        if (s_.op == OpKind::quantize) return quantize_samples(s_, x[0], y, n);
        dequantize_samples(s_, x[0], x[1], y, n, true);
    }

private:
    const Step& s_;
};

// Zero padding (pads > 0) and cropping (pads < 0): output pixel (oy, ox) is input
// pixel (oy - top, ox - left), zero where that is outside the input.
class Pad2d : public Kernel {
public:
    explicit Pad2d(const Step& s) : s_(s) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const Dims in = s_.in, out = s_.out;
        const int x0 = std::max(0, s_.pad.left), sx0 = std::max(0, -s_.pad.left);
        const int cols = std::min(out.w - x0, in.w - sx0);
        const size_t run = size_t(cols) * in.c;
        const bool padding = s_.pad.top > 0 || s_.pad.bottom > 0 || s_.pad.left > 0 || s_.pad.right > 0;
        if (padding) std::memset(y, 0, size_t(n) * out.size() * sizeof(float));
        for (int b = 0; b < n; ++b)
            for (int oy = 0; oy < out.h; ++oy) {
                const int iy = oy - s_.pad.top;
                if (iy < 0 || iy >= in.h || cols <= 0) continue;
                std::memcpy(y + b * out.size() + (size_t(oy) * out.w + x0) * in.c,
                            x[0] + b * in.size() + (size_t(iy) * in.w + sx0) * in.c, run * sizeof(float));
            }
    }

private:
    const Step& s_;
};

}  // namespace

std::unique_ptr<Kernel> make_elementwise(const Step& s) {
    switch (s.op) {
        case OpKind::activation: return std::make_unique<ActivationKernel>(s);
        case OpKind::softmax: return std::make_unique<Softmax>(s);
        case OpKind::affine:
        case OpKind::prelu: return std::make_unique<PerElement>(s);
        case OpKind::merge: return std::make_unique<MergeKernel>(s);
        case OpKind::layer_norm: return std::make_unique<LayerNorm>(s);
        case OpKind::quantize:
        case OpKind::dequantize: return std::make_unique<QuantizeKernel>(s);
        case OpKind::pad2d: return std::make_unique<Pad2d>(s);
        default: return nullptr;
    }
}

}  // namespace lenet::cpu
