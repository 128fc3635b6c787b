#include <algorithm>

#include "../activation_math.h"
#include "elementwise.cuh"

namespace lenet::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks(int64_t count) {
    // Grid-stride loops below: a bounded grid covers any count.
    return unsigned(std::min<int64_t>((count + kThreads - 1) / kThreads, 65535));
}

#define LENET_FOR_EACH(i, count) \
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (count); i += int64_t(gridDim.x) * blockDim.x)

__global__ void bias_act(float* y, const float* bias, int64_t count, int channels, int inner, Activation act) {
    LENET_FOR_EACH(i, count) y[i] = activate(act, y[i] + bias[(i / inner) % channels]);
}

__global__ void activation(const float* x, float* y, int64_t count, Activation act) {
    LENET_FOR_EACH(i, count) y[i] = activate(act, x[i]);
}

__global__ void affine(const float* x, float* y, const float* scale, const float* shift, int64_t count, int channels,
                       int inner) {
    LENET_FOR_EACH(i, count) {
        const int c = int((i / inner) % channels);
        y[i] = x[i] * scale[c] + shift[c];
    }
}

__global__ void prelu(const float* x, float* y, const float* alpha, int64_t count, int64_t image) {
    LENET_FOR_EACH(i, count) y[i] = x[i] > 0.f ? x[i] : alpha[i % image] * x[i];
}

__global__ void scale_planes(float* y, const float* factor, int64_t count, int plane) {
    LENET_FOR_EACH(i, count) y[i] *= factor[i % plane];
}

// Decomposes an NCHW index into (image, c, y, x).
struct Nchw {
    int64_t n;
    int c, y, x;
};
__device__ inline Nchw split(int64_t i, Dims d) {
    Nchw p;
    p.x = int(i % d.w);
    i /= d.w;
    p.y = int(i % d.h);
    i /= d.h;
    p.c = int(i % d.c);
    p.n = i / d.c;
    return p;
}
__device__ inline int64_t nchw(int64_t n, int c, int y, int x, Dims d) {
    return ((n * d.c + c) * d.h + y) * int64_t(d.w) + x;
}

__global__ void pad(const float* x, float* y, int64_t count, Dims in, Dims out, int top, int left) {
    LENET_FOR_EACH(i, count) {
        const Nchw p = split(i, out);
        const int iy = p.y - top, ix = p.x - left;
        y[i] = iy >= 0 && iy < in.h && ix >= 0 && ix < in.w ? x[nchw(p.n, p.c, iy, ix, in)] : 0.f;
    }
}

// The canonical (H, W, C order) flat index of an output element, read back in the input's dims.
__global__ void reshape(const float* x, float* y, int64_t count, Dims in, Dims out) {
    LENET_FOR_EACH(i, count) {
        const Nchw p = split(i, out);
        const int64_t q = (int64_t(p.y) * out.w + p.x) * out.c + p.c;
        const int c = int(q % in.c), xx = int(q / in.c % in.w), yy = int(q / (int64_t(in.c) * in.w));
        y[i] = x[nchw(p.n, c, yy, xx, in)];
    }
}

__global__ void permute(const float* x, float* y, int64_t count, Dims in, Dims out, int p0, int p1, int p2) {
    LENET_FOR_EACH(i, count) {
        const Nchw p = split(i, out);
        int at[3] = {0, 0, 0};  // input coordinates (h, w, c)
        at[p0] = p.y, at[p1] = p.x, at[p2] = p.c;
        y[i] = x[nchw(p.n, at[2], at[0], at[1], in)];
    }
}

__global__ void concat(const float* x, float* y, int64_t count, Dims in, Dims out, int axis, int offset) {
    LENET_FOR_EACH(i, count) {
        const Nchw p = split(i, in);
        y[nchw(p.n, p.c + (axis == 2 ? offset : 0), p.y + (axis == 0 ? offset : 0), p.x + (axis == 1 ? offset : 0),
               out)] = x[i];
    }
}

struct MergeInputs {
    const float* p[kMergeInputs];
};

__global__ void merge(MergeInputs in, int inputs, float* y, int64_t count, Merge op, bool accumulate, float divide) {
    LENET_FOR_EACH(i, count) {
        float v = accumulate ? y[i] : in.p[0][i];
        for (int k = accumulate ? 0 : 1; k < inputs; ++k) {
            const float u = in.p[k][i];
            switch (op) {
                case Merge::add:
                case Merge::average: v += u; break;
                case Merge::subtract: v -= u; break;
                case Merge::multiply: v *= u; break;
                case Merge::maximum: v = fmaxf(v, u); break;
                case Merge::minimum: v = fminf(v, u); break;
            }
        }
        y[i] = divide != 0.f ? v / divide : v;
    }
}

__global__ void layer_norm(const float* x, float* y, int64_t pixels, Dims d, const float* gamma, const float* beta,
                           float epsilon) {
    const int64_t plane = int64_t(d.h) * d.w;
    LENET_FOR_EACH(p, pixels) {
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
}

// tf.image.resize's source taps along one axis (half-pixel centres), as the CPU's.
__device__ inline void taps(int i, int in, int first, float scale, bool nearest, int* lo, int* hi, float* lerp) {
    if (nearest) {
        const int at = max(0, min(int(floorf((float(i) + 0.5f) * scale)), in - 1));
        *lo = *hi = first + at;
        *lerp = 0.f;
        return;
    }
    const float v = (float(i) + 0.5f) * scale - 0.5f;
    const float f = floorf(v);
    *lo = first + max(int(f), 0);
    *hi = first + min(int(ceilf(v)), in - 1);
    *lerp = v - f;
}

__global__ void resize(const float* x, float* y, int64_t count, Dims in, Dims out, Pads crop, bool nearest) {
    const int ch = in.h - crop.top - crop.bottom, cw = in.w - crop.left - crop.right;
    const float sy = float(ch) / float(out.h), sx = float(cw) / float(out.w);
    LENET_FOR_EACH(i, count) {
        const Nchw p = split(i, out);
        int y0, y1, x0, x1;
        float ly, lx;
        taps(p.y, ch, crop.top, sy, nearest, &y0, &y1, &ly);
        taps(p.x, cw, crop.left, sx, nearest, &x0, &x1, &lx);
        const float a = x[nchw(p.n, p.c, y0, x0, in)], b = x[nchw(p.n, p.c, y0, x1, in)];
        const float c = x[nchw(p.n, p.c, y1, x0, in)], d = x[nchw(p.n, p.c, y1, x1, in)];
        const float top = a + (b - a) * lx, bottom = c + (d - c) * lx;
        y[i] = top + (bottom - top) * ly;
    }
}

}  // namespace

void launch_bias_act(float* y, const float* bias, int64_t count, int channels, int inner, const Activation& act,
                     cudaStream_t s) {
    if (count) bias_act<<<blocks(count), kThreads, 0, s>>>(y, bias, count, channels, inner, act);
}

void launch_activation(const float* x, float* y, int64_t count, const Activation& act, cudaStream_t s) {
    if (count) activation<<<blocks(count), kThreads, 0, s>>>(x, y, count, act);
}

void launch_affine(const float* x, float* y, const float* scale, const float* shift, int64_t count, int channels,
                   int inner, cudaStream_t s) {
    if (count) affine<<<blocks(count), kThreads, 0, s>>>(x, y, scale, shift, count, channels, inner);
}

void launch_prelu(const float* x, float* y, const float* alpha, int64_t count, int64_t image, cudaStream_t s) {
    if (count) prelu<<<blocks(count), kThreads, 0, s>>>(x, y, alpha, count, image);
}

void launch_scale_planes(float* y, const float* factor, int64_t count, int plane, cudaStream_t s) {
    if (count) scale_planes<<<blocks(count), kThreads, 0, s>>>(y, factor, count, plane);
}

void launch_pad(const float* x, float* y, int n, Dims in, Dims out, int top, int left, cudaStream_t s) {
    const int64_t count = n * out.size();
    if (count) pad<<<blocks(count), kThreads, 0, s>>>(x, y, count, in, out, top, left);
}

void launch_reshape(const float* x, float* y, int n, Dims in, Dims out, cudaStream_t s) {
    const int64_t count = n * out.size();
    if (count) reshape<<<blocks(count), kThreads, 0, s>>>(x, y, count, in, out);
}

void launch_permute(const float* x, float* y, int n, Dims in, Dims out, const std::array<int, 3>& perm,
                    cudaStream_t s) {
    const int64_t count = n * out.size();
    if (count) permute<<<blocks(count), kThreads, 0, s>>>(x, y, count, in, out, perm[0], perm[1], perm[2]);
}

void launch_concat(const float* x, float* y, int n, Dims in, Dims out, int axis, int offset, cudaStream_t s) {
    const int64_t count = n * in.size();
    if (count) concat<<<blocks(count), kThreads, 0, s>>>(x, y, count, in, out, axis, offset);
}

void launch_merge(const float* const* x, int inputs, float* y, int64_t count, Merge op, bool accumulate,
                  float divide, cudaStream_t s) {
    MergeInputs in{};
    for (int k = 0; k < inputs && k < kMergeInputs; ++k) in.p[k] = x[k];
    if (count) merge<<<blocks(count), kThreads, 0, s>>>(in, std::min(inputs, kMergeInputs), y, count, op, accumulate,
                                                        divide);
}

void launch_layer_norm(const float* x, float* y, int n, Dims d, const float* gamma, const float* beta, float epsilon,
                       cudaStream_t s) {
    const int64_t pixels = int64_t(n) * d.h * d.w;
    if (pixels) layer_norm<<<blocks(pixels), kThreads, 0, s>>>(x, y, pixels, d, gamma, beta, epsilon);
}

void launch_resize(const float* x, float* y, int n, Dims in, Dims out, Pads crop, bool nearest, cudaStream_t s) {
    const int64_t count = n * out.size();
    if (count) resize<<<blocks(count), kThreads, 0, s>>>(x, y, count, in, out, crop, nearest);
}

}  // namespace lenet::cuda
