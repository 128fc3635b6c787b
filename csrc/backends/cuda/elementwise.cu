#include <algorithm>

#include "../nchw/elementwise.h"
#include "../quantize_math.h"
#include "completion.h"
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

// Each kernel applies one element function of nchw/elementwise.h, shared with the
// CPU backend's NCHW mode.
__global__ void bias_act(float* y, const float* bias, int64_t count, int channels, int inner, Activation act) {
    LENET_FOR_EACH(i, count) y[i] = nchw::bias_act(y[i], bias, i, channels, inner, act);
}

__global__ void activation(const float* x, float* y, int64_t count, Activation act) {
    LENET_FOR_EACH(i, count) y[i] = activate(act, x[i]);
}

__global__ void affine(const float* x, float* y, const float* scale, const float* shift, int64_t count, int channels,
                       int inner) {
    LENET_FOR_EACH(i, count) y[i] = nchw::affine(x, scale, shift, i, channels, inner);
}

__global__ void prelu(const float* x, float* y, const float* alpha, int64_t count, int64_t image) {
    LENET_FOR_EACH(i, count) y[i] = nchw::prelu(x, alpha, i, image);
}

__global__ void scale_planes(float* y, const float* factor, int64_t count, int plane) {
    LENET_FOR_EACH(i, count) y[i] *= factor[i % plane];
}

__global__ void pad(const float* x, float* y, int64_t count, Dims in, Dims out, int top, int left) {
    LENET_FOR_EACH(i, count) y[i] = nchw::pad(x, i, in, out, top, left);
}

__global__ void reshape(const float* x, float* y, int64_t count, Dims in, Dims out) {
    LENET_FOR_EACH(i, count) y[i] = x[nchw::reshape_source(i, in, out)];
}

__global__ void permute(const float* x, float* y, int64_t count, Dims in, Dims out, int p0, int p1, int p2) {
    LENET_FOR_EACH(i, count) y[i] = x[nchw::permute_source(i, in, out, p0, p1, p2)];
}

__global__ void concat(const float* x, float* y, int64_t count, Dims in, Dims out, int axis, int offset) {
    LENET_FOR_EACH(i, count) y[nchw::concat_target(i, in, out, axis, offset)] = x[i];
}

struct MergeInputs {
    const float* p[kMergeInputs];
};

__global__ void merge(MergeInputs in, int inputs, float* y, int64_t count, Merge op, bool accumulate, float divide) {
    LENET_FOR_EACH(i, count) y[i] = nchw::merge(in.p, inputs, i, accumulate ? y[i] : 0.f, accumulate, op, divide);
}

__global__ void layer_norm(const float* x, float* y, int64_t pixels, Dims d, const float* gamma, const float* beta,
                           float epsilon) {
    LENET_FOR_EACH(p, pixels) nchw::layer_norm(x, y, p, d, gamma, beta, epsilon);
}

// The range of a block's sample (every thread gets it), reduced in shared memory.
__device__ void sample_range(const float* in, int64_t size, float* lo, float* hi, float* out_lo, float* out_hi) {
    float l = INFINITY, h = -INFINITY;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) l = fminf(l, in[i]), h = fmaxf(h, in[i]);
    lo[threadIdx.x] = l, hi[threadIdx.x] = h;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (int(threadIdx.x) < half) {
            lo[threadIdx.x] = fminf(lo[threadIdx.x], lo[threadIdx.x + half]);
            hi[threadIdx.x] = fmaxf(hi[threadIdx.x], hi[threadIdx.x + half]);
        }
        __syncthreads();
    }
    *out_lo = lo[0], *out_hi = hi[0];
    __syncthreads();  // lo[0] and hi[0] are read before the next sample's reduction writes them
}

// Block b handles samples b, b + gridDim.x, ...; kThreads threads each.
__global__ void quantize(const float* x, float* y, int n, int64_t size, Quantization q, bool integers) {
    __shared__ float lo[kThreads], hi[kThreads];
    const bool dynamic = q.scale == 0.f;  // Quantization::dynamic(), which is host code
    for (int b = blockIdx.x; b < n; b += gridDim.x) {
        const float* in = x + b * size;
        Quantization here = q;
        if (dynamic) {
            float l, h;
            sample_range(in, size, lo, hi, &l, &h);
            here = dynamic_quantization(l, h);
        }
        for (int64_t i = threadIdx.x; i < size; i += blockDim.x) y[b * size + i] = quantize(in[i], here, integers);
    }
}

__global__ void dequantize(const float* x, const float* source, float* y, int n, Dims d, int64_t source_size,
                           const float* scale) {
    __shared__ float lo[kThreads], hi[kThreads];
    const int64_t plane = int64_t(d.h) * d.w, size = plane * d.c;
    for (int b = blockIdx.x; b < n; b += gridDim.x) {
        float l, h;
        sample_range(source + b * source_size, source_size, lo, hi, &l, &h);
        const float s = dynamic_quantization(l, h).scale;
        for (int c = 0; c < d.c; ++c) {  // channel by channel: no division per value
            const float factor = __fmul_rn(s, scale[c]);
            const int64_t at = b * size + c * plane;
            for (int64_t p = threadIdx.x; p < plane; p += blockDim.x) y[at + p] = x[at + p] * factor;
        }
    }
}

__global__ void scale_pixels(const uint8_t* x, float* y, int64_t count, float scale) {
    LENET_FOR_EACH(i, count) y[i] = __fmul_rn(float(x[i]), scale);  // never contracted: the host's product
}

__global__ void copy_values(const float* x, float* y, int64_t count) { LENET_FOR_EACH(i, count) y[i] = x[i]; }

__global__ void finish(const float* x, float* y, int64_t count, Completion done, const unsigned* request) {
    LENET_FOR_EACH(i, count) y[i] = x[i];
    signal_block_done(done, request);
}

__global__ void resize(const float* x, float* y, int64_t count, Dims in, Dims out, Pads crop, bool nearest) {
    LENET_FOR_EACH(i, count) y[i] = nchw::resize(x, i, in, out, crop, nearest);
}

}  // namespace

void launch_scale_pixels(const uint8_t* x, float* y, int64_t count, float scale, cudaStream_t s) {
    if (count) scale_pixels<<<blocks(count), kThreads, 0, s>>>(x, y, count, scale);
}

void launch_copy(const float* x, float* y, int64_t count, cudaStream_t s) {
    if (count) copy_values<<<blocks(count), kThreads, 0, s>>>(x, y, count);
}

void launch_finish(const float* x, float* y, int64_t count, const Completion& done, const unsigned* request,
                   cudaStream_t s) {
    finish<<<std::max(blocks(count), 1u), kThreads, 0, s>>>(x, y, count, done, request);
}

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

void launch_merge(const float* const* x, int inputs, float* y, int64_t count, Merge op, bool accumulate, float divide,
                  cudaStream_t s) {
    MergeInputs in{};
    for (int k = 0; k < inputs && k < kMergeInputs; ++k) in.p[k] = x[k];
    if (count)
        merge<<<blocks(count), kThreads, 0, s>>>(in, std::min(inputs, kMergeInputs), y, count, op, accumulate, divide);
}

void launch_layer_norm(const float* x, float* y, int n, Dims d, const float* gamma, const float* beta, float epsilon,
                       cudaStream_t s) {
    const int64_t pixels = int64_t(n) * d.h * d.w;
    if (pixels) layer_norm<<<blocks(pixels), kThreads, 0, s>>>(x, y, pixels, d, gamma, beta, epsilon);
}

void launch_quantize(const float* x, float* y, int n, int64_t size, const Quantization& q, bool integers,
                     cudaStream_t s) {
    if (n > 0 && size > 0) quantize<<<unsigned(std::min(n, 65535)), kThreads, 0, s>>>(x, y, n, size, q, integers);
}

void launch_dequantize(const float* x, const float* source, float* y, int n, Dims d, int64_t source_size,
                       const float* scale, cudaStream_t s) {
    if (n > 0 && d.size() > 0 && source_size > 0)
        dequantize<<<unsigned(std::min(n, 65535)), kThreads, 0, s>>>(x, source, y, n, d, source_size, scale);
}

void launch_resize(const float* x, float* y, int n, Dims in, Dims out, Pads crop, bool nearest, cudaStream_t s) {
    const int64_t count = n * out.size();
    if (count) resize<<<blocks(count), kThreads, 0, s>>>(x, y, count, in, out, crop, nearest);
}

}  // namespace lenet::cuda
