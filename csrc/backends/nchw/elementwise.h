// The element functions of every kernel over NCHW tensors that cuDNN and cuBLAS
// do not provide, written once: the CUDA backend's grid-stride kernels
// (cuda/elementwise.cu) and the CPU backend in NCHW mode (cpu/nchw_kernels.cpp)
// both call them, so a CPU run in the GPU's layout checks the GPU's index
// arithmetic, op by op, without a GPU. Each computes one output value (or, for
// layer_norm and concat, one pixel or one input value) from flat indices.
#pragma once

#include <math.h>
#include <stdint.h>

#include "../activation_math.h"

namespace lenet::nchw {

// A flat NCHW index split into (image, channel, row, column).
struct Index {
    int64_t n;
    int c, y, x;
};

LENET_HOST_DEVICE Index split(int64_t i, Dims d) {
    Index p;
    p.x = int(i % d.w);
    i /= d.w;
    p.y = int(i % d.h);
    i /= d.h;
    p.c = int(i % d.c);
    p.n = i / d.c;
    return p;
}

LENET_HOST_DEVICE int64_t flat(int64_t n, int c, int y, int x, Dims d) {
    return ((n * d.c + c) * d.h + y) * int64_t(d.w) + x;
}

// Output i of a conv (inner = h*w) or dense (inner = 1) layer: act(v + bias[c]).
LENET_HOST_DEVICE float bias_act(float v, const float* bias, int64_t i, int channels, int inner,
                                 const Activation& act) {
    return activate(act, v + bias[(i / inner) % channels]);
}

// x * scale[c] + shift[c] (Rescaling, Normalization, batch norm).
LENET_HOST_DEVICE float affine(const float* x, const float* scale, const float* shift, int64_t i, int channels,
                               int inner) {
    const int c = int((i / inner) % channels);
    return x[i] * scale[c] + shift[c];
}

// alpha: one image's slopes in NCHW order, `image` values.
LENET_HOST_DEVICE float prelu(const float* x, const float* alpha, int64_t i, int64_t image) {
    return x[i] > 0.f ? x[i] : alpha[i % image] * x[i];
}

// Zero padding (top, left > 0) or cropping (< 0): output i reads x(c, oy - top, ox - left), or 0.
LENET_HOST_DEVICE float pad(const float* x, int64_t i, Dims in, Dims out, int top, int left) {
    const Index p = split(i, out);
    const int iy = p.y - top, ix = p.x - left;
    return iy >= 0 && iy < in.h && ix >= 0 && ix < in.w ? x[flat(p.n, p.c, iy, ix, in)] : 0.f;
}

// A reshape keeps the canonical (H, W, C order) sequence of values: output i's
// position in that sequence, read back in the input's dims.
LENET_HOST_DEVICE int64_t reshape_source(int64_t i, Dims in, Dims out) {
    const Index p = split(i, out);
    const int64_t q = (int64_t(p.y) * out.w + p.x) * out.c + p.c;
    const int c = int(q % in.c), x = int(q / in.c % in.w), y = int(q / (int64_t(in.c) * in.w));
    return flat(p.n, c, y, x, in);
}

// Output axis k is input axis perm[k] (0 h, 1 w, 2 c).
LENET_HOST_DEVICE int64_t permute_source(int64_t i, Dims in, Dims out, int p0, int p1, int p2) {
    const Index p = split(i, out);
    int at[3] = {0, 0, 0};  // input coordinates (h, w, c)
    at[p0] = p.y, at[p1] = p.x, at[p2] = p.c;
    return flat(p.n, at[2], at[0], at[1], in);
}

// Where value i of one concatenated input (dims `in`) goes in the output, the
// input placed at `offset` along `axis` (0 h, 1 w, 2 c).
LENET_HOST_DEVICE int64_t concat_target(int64_t i, Dims in, Dims out, int axis, int offset) {
    const Index p = split(i, in);
    return flat(p.n, p.c + (axis == 2 ? offset : 0), p.y + (axis == 0 ? offset : 0), p.x + (axis == 1 ? offset : 0),
                out);
}

// Element i of a merge of `inputs` tensors; with `accumulate`, `first` (the output
// so far) is the first operand, as when a merge of many inputs runs in several
// passes. `divide`: average's final division, 0 for none.
LENET_HOST_DEVICE float merge(const float* const* x, int inputs, int64_t i, float first, bool accumulate, Merge op,
                              float divide) {
    float v = accumulate ? first : x[0][i];
    for (int k = accumulate ? 0 : 1; k < inputs; ++k) {
        const float u = x[k][i];
        switch (op) {
            case Merge::add:
            case Merge::average: v += u; break;
            case Merge::subtract: v -= u; break;
            case Merge::multiply: v *= u; break;
            case Merge::maximum: v = fmaxf(v, u); break;
            case Merge::minimum: v = fminf(v, u); break;
        }
    }
    return divide != 0.f ? v / divide : v;
}

// Layer normalization of pixel p's channels (p counts pixels over the batch):
// (x - mean) * rsqrt(var + eps) * gamma[c] + beta[c], statistics in double.
LENET_HOST_DEVICE void layer_norm(const float* x, float* y, int64_t p, Dims d, const float* gamma, const float* beta,
                                  float epsilon) {
    const int64_t plane = int64_t(d.h) * d.w;
    const int64_t base = (p / plane) * d.c * plane + p % plane;  // channel 0 of this pixel
    double sum = 0, sq = 0;
    for (int c = 0; c < d.c; ++c) sum += x[base + c * plane];
    const double mean = sum / d.c;
    for (int c = 0; c < d.c; ++c) {
        const double e = x[base + c * plane] - mean;
        sq += e * e;
    }
    const float inv = float(1.0 / sqrt(sq / d.c + double(epsilon)));
    const float m = float(mean);
    for (int c = 0; c < d.c; ++c) {
        const float g = inv * gamma[c];
        y[base + c * plane] = x[base + c * plane] * g + (beta[c] - m * g);
    }
}

// tf.image.resize's source taps along one axis (half-pixel centres).
LENET_HOST_DEVICE void resize_taps(int i, int in, int first, float scale, bool nearest, int* lo, int* hi, float* lerp) {
    if (nearest) {
        int at = int(floorf((float(i) + 0.5f) * scale));
        at = at < 0 ? 0 : (at > in - 1 ? in - 1 : at);
        *lo = *hi = first + at;
        *lerp = 0.f;
        return;
    }
    const float v = (float(i) + 0.5f) * scale - 0.5f;
    const float f = floorf(v);
    const int below = int(f), above = int(ceilf(v));
    *lo = first + (below > 0 ? below : 0);
    *hi = first + (above < in - 1 ? above : in - 1);
    *lerp = v - f;
}

// Output i of a bilinear or nearest resize of the window `crop` leaves of the input.
LENET_HOST_DEVICE float resize(const float* x, int64_t i, Dims in, Dims out, Pads crop, bool nearest) {
    const int ch = in.h - crop.top - crop.bottom, cw = in.w - crop.left - crop.right;
    const float sy = float(ch) / float(out.h), sx = float(cw) / float(out.w);
    const Index p = split(i, out);
    int y0, y1, x0, x1;
    float ly, lx;
    resize_taps(p.y, ch, crop.top, sy, nearest, &y0, &y1, &ly);
    resize_taps(p.x, cw, crop.left, sx, nearest, &x0, &x1, &lx);
    const float a = x[flat(p.n, p.c, y0, x0, in)], b = x[flat(p.n, p.c, y0, x1, in)];
    const float c = x[flat(p.n, p.c, y1, x0, in)], d = x[flat(p.n, p.c, y1, x1, in)];
    const float top = a + (b - a) * lx, bottom = c + (d - c) * lx;
    return top + (bottom - top) * ly;
}

}  // namespace lenet::nchw
