// The CPU backend in NCHW (cpu_kernels="nchw"): the CUDA backend's layout and
// decisions, run on the host, so that CI checks the GPU path without a GPU.
// Steps are prepared as the CUDA backend prepares them (nchw::constants), padding
// is realised as its planner realises it (nchw::choose_padding: symmetric
// padding inside the convolution, otherwise a pre-padded copy), and the small
// kernels apply the element functions CUDA's kernels apply (nchw/elementwise.h).
// Convolution, pooling, dense and softmax follow the definitions of the cuDNN
// and cuBLAS calls they stand for: OIHW cross-correlation with symmetric
// padding, pooling of a pre-padded input dividing by the whole window, the
// column-major SGEMM of the CUDA dense kernel argument for argument, softmax
// over each pixel's channels. Plain loops and SGEMM: a test mode, not a fast one.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../../support/errors.h"
#include "../nchw/elementwise.h"
#include "../nchw/plan.h"
#include "../quantize_math.h"
#include "blas.h"
#include "ops.h"

namespace lenet::cpu {
namespace {

// The pre-padded copy of a kernel's input, as the CUDA backend's Prepad makes it:
// the border holds the pad value, the interior a copy of each call's input.
class Prepad {
public:
    Prepad(const Step& s, const nchw::PaddingChoice& padding, int capacity)
        : s_(s), padding_(padding), dims_(nchw::padded_dims(s, padding)) {
        if (padding_.prepadded()) buffer_.assign(size_t(capacity) * dims_.size(), nchw::pad_value(s));
    }
    // The tensor the op reads: x itself, or its pre-padded copy.
    const float* apply(const float* x, int n) {
        if (!padding_.prepadded()) return x;
        const Dims in = s_.in;
        for (int64_t b = 0; b < n; ++b)
            for (int c = 0; c < in.c; ++c)
                for (int y = 0; y < in.h; ++y)
                    std::copy_n(
                        x + nchw::flat(b, c, y, 0, in), in.w,
                        buffer_.data() + nchw::flat(b, c, y + padding_.prepad.top, padding_.prepad.left, dims_));
        return buffer_.data();
    }
    Dims dims() const { return dims_; }

private:
    const Step& s_;
    nchw::PaddingChoice padding_;
    Dims dims_;
    std::vector<float> buffer_;
};

struct NchwConstants : StepConstants {
    nchw::Constants k;
};

// Cross-correlation of OIHW weights with symmetric padding, stride, dilation and
// groups: im2col of each image and group, times the group's (out, in*kh*kw) rows.
class Conv : public Kernel {
public:
    Conv(const Step& s, const nchw::Constants& k, int capacity)
        : s_(s), k_(k), padding_(nchw::choose_padding(s)), prepad_(s, padding_, capacity) {
        const int cig = s.in.c / s.groups;
        cols_.resize(size_t(cig) * s.kh * s.kw * s.out.h * s.out.w);
    }

    void run(Inputs xs, float* y, int n, ThreadPool*) override {
        const float* x = prepad_.apply(xs[0], n);
        const Dims in = prepad_.dims(), out = s_.out;
        const int cig = in.c / s_.groups, cog = out.c / s_.groups, plane = out.h * out.w;
        const int depth = cig * s_.kh * s_.kw;
        for (int64_t b = 0; b < n; ++b)
            for (int g = 0; g < s_.groups; ++g) {
                float* col = cols_.data();
                for (int c = 0; c < cig; ++c)
                    for (int ky = 0; ky < s_.kh; ++ky)
                        for (int kx = 0; kx < s_.kw; ++kx)
                            for (int oy = 0; oy < out.h; ++oy)
                                for (int ox = 0; ox < out.w; ++ox) {
                                    const int iy = oy * s_.sh - padding_.pad_h + ky * s_.dh;
                                    const int ix = ox * s_.sw - padding_.pad_w + kx * s_.dw;
                                    *col++ = iy >= 0 && iy < in.h && ix >= 0 && ix < in.w
                                                 ? x[nchw::flat(b, g * cig + c, iy, ix, in)]
                                                 : 0.f;
                                }
                blas::sgemm_nn(cog, plane, depth, k_.weights.data() + size_t(g) * cog * depth, depth, cols_.data(),
                               plane, 0.f, y + nchw::flat(b, g * cog, 0, 0, out), plane);
            }
        const int64_t count = n * out.size();
        for (int64_t i = 0; i < count; ++i) y[i] = nchw::bias_act(y[i], k_.bias.data(), i, out.c, plane, s_.act);
    }

private:
    const Step& s_;
    const nchw::Constants& k_;
    nchw::PaddingChoice padding_;
    Prepad prepad_;
    std::vector<float> cols_;
};

// cuDNN's pooling of the (pre-padded) input with no padding of its own: max, or
// the window's sum over its full size; then the average factors of nchw::plan.
class Pool : public Kernel {
public:
    Pool(const Step& s, int capacity)
        : s_(s),
          padding_(nchw::choose_padding(s)),
          prepad_(s, padding_, capacity),
          factor_(nchw::average_factors(s, padding_)) {}

    void run(Inputs xs, float* y, int n, ThreadPool*) override {
        const float* x = prepad_.apply(xs[0], n);
        const Dims in = prepad_.dims(), out = s_.out;
        const bool max = s_.op == OpKind::max_pool2d;
        const int64_t count = n * out.size(), plane = int64_t(out.h) * out.w;
        for (int64_t i = 0; i < count; ++i) {
            const nchw::Index p = nchw::split(i, out);
            float acc = max ? -INFINITY : 0.f;
            for (int ky = 0; ky < s_.kh; ++ky)
                for (int kx = 0; kx < s_.kw; ++kx) {
                    const float v = x[nchw::flat(p.n, p.c, p.y * s_.sh + ky, p.x * s_.sw + kx, in)];
                    acc = max ? std::max(acc, v) : acc + v;
                }
            y[i] = max ? acc : acc / float(s_.kh * s_.kw);
            if (!factor_.empty()) y[i] *= factor_[i % plane];
        }
    }

private:
    const Step& s_;
    nchw::PaddingChoice padding_;
    Prepad prepad_;
    std::vector<float> factor_;
};

// The CUDA dense kernel's cublasSgemm, argument for argument: column-major, where
// the row-major buffers read y^T (out, n) = W^T (out, in) x^T (in, n).
class Dense : public Kernel {
public:
    Dense(const Step& s, const nchw::Constants& k) : s_(s), k_(k) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const int in = int(s_.in.size()), out = s_.out.c;
        blas::sgemm_nn_col_major(out, n, in, k_.weights.data(), out, x[0], in, 0.f, y, out);
        const int64_t count = int64_t(n) * out;
        for (int64_t i = 0; i < count; ++i) y[i] = nchw::bias_act(y[i], k_.bias.data(), i, out, 1, s_.act);
    }

private:
    const Step& s_;
    const nchw::Constants& k_;
};

// Everything else, as the CUDA backend's SimpleKernel dispatches it.
class Simple : public Kernel {
public:
    Simple(const Step& s, const nchw::Constants& k) : s_(s), k_(k) {}
    void run(Inputs x, float* y, int n, ThreadPool*) override {
        const Step& s = s_;
        const int64_t count = int64_t(n) * s.out.size();
        const int plane = s.out.h * s.out.w;
        switch (s.op) {
            case OpKind::activation:
                for (int64_t i = 0; i < count; ++i) y[i] = activate(s.act, x[0][i]);
                break;
            case OpKind::softmax: softmax_channels(x[0], y, n); break;
            case OpKind::affine:
                for (int64_t i = 0; i < count; ++i)
                    y[i] = nchw::affine(x[0], k_.weights.data(), k_.bias.data(), i, s.out.c, plane);
                break;
            case OpKind::prelu:
                for (int64_t i = 0; i < count; ++i) y[i] = nchw::prelu(x[0], k_.weights.data(), i, s.out.size());
                break;
            case OpKind::pad2d:
                for (int64_t i = 0; i < count; ++i) y[i] = nchw::pad(x[0], i, s.in, s.out, s.pad.top, s.pad.left);
                break;
            case OpKind::reshape:
                for (int64_t i = 0; i < count; ++i) y[i] = x[0][nchw::reshape_source(i, s.in, s.out)];
                break;
            case OpKind::permute:
                for (int64_t i = 0; i < count; ++i)
                    y[i] = x[0][nchw::permute_source(i, s.in, s.out, s.perm[0], s.perm[1], s.perm[2])];
                break;
            case OpKind::resize:
                for (int64_t i = 0; i < count; ++i) y[i] = nchw::resize(x[0], i, s.in, s.out, s.pad, s.nearest);
                break;
            case OpKind::layer_norm: {
                const int64_t pixels = int64_t(n) * plane;
                for (int64_t p = 0; p < pixels; ++p)
                    nchw::layer_norm(x[0], y, p, s.out, k_.weights.data(), k_.bias.data(), s.epsilon);
                break;
            }
            case OpKind::quantize: quantize_samples(s, x[0], y, n); break;  // whatever the layout
            case OpKind::dequantize: dequantize_samples(s, x[0], x[1], y, n, false); break;
            case OpKind::concat: {
                int offset = 0;
                for (size_t k = 0; k < s.ins.size(); ++k) {
                    const Dims d = s.ins[k];
                    const int64_t here = int64_t(n) * d.size();
                    for (int64_t i = 0; i < here; ++i) y[nchw::concat_target(i, d, s.out, s.axis, offset)] = x[k][i];
                    offset += s.axis == 0 ? d.h : s.axis == 1 ? d.w : d.c;
                }
                break;
            }
            case OpKind::merge: {
                const int inputs = int(s.inputs.size());
                const float divide = s.merge == Merge::average ? float(inputs) : 0.f;
                for (int64_t i = 0; i < count; ++i) y[i] = nchw::merge(x, inputs, i, 0.f, false, s.merge, divide);
                break;
            }
            default: throw InputError(std::string("CPU NCHW kernels: no kernel for ") + to_string(s.op));
        }
    }

private:
    // cuDNN's CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_CHANNEL: over each pixel's channels.
    void softmax_channels(const float* x, float* y, int n) const {
        const Dims d = s_.out;
        const int64_t plane = int64_t(d.h) * d.w;
        for (int64_t b = 0; b < n; ++b)
            for (int64_t p = 0; p < plane; ++p) {
                const int64_t base = b * d.c * plane + p;
                float top = -INFINITY;
                for (int c = 0; c < d.c; ++c) top = std::max(top, x[base + c * plane]);
                float sum = 0.f;
                for (int c = 0; c < d.c; ++c) sum += y[base + c * plane] = std::exp(x[base + c * plane] - top);
                if (s_.log) {  // CUDNN_SOFTMAX_LOG
                    const float log_sum = std::log(sum);
                    for (int c = 0; c < d.c; ++c) y[base + c * plane] = x[base + c * plane] - top - log_sum;
                    continue;
                }
                for (int c = 0; c < d.c; ++c) y[base + c * plane] /= sum;
            }
    }

    const Step& s_;
    const nchw::Constants& k_;
};

}  // namespace

std::shared_ptr<const StepConstants> prepare_nchw(const Step& step) {
    auto c = std::make_shared<NchwConstants>();
    c->k = nchw::constants(step);
    return c;
}

std::unique_ptr<Kernel> make_nchw_kernel(const Step& s, const StepConstants* constants, int capacity) {
    const nchw::Constants& k = static_cast<const NchwConstants*>(constants)->k;
    switch (s.op) {
        case OpKind::conv2d: return std::make_unique<Conv>(s, k, capacity);
        case OpKind::max_pool2d:
        case OpKind::avg_pool2d: return std::make_unique<Pool>(s, capacity);
        case OpKind::dense: return std::make_unique<Dense>(s, k);
        default: return std::make_unique<Simple>(s, k);
    }
}

}  // namespace lenet::cpu
