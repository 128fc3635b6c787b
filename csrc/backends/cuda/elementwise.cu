#include "elementwise.cuh"

#include <algorithm>

namespace lenet::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned blocks(int64_t count) {
    // Grid-stride loops below: a bounded grid covers any count.
    return unsigned(std::min<int64_t>((count + kThreads - 1) / kThreads, 65535));
}

template <Act A>
__device__ inline float activate(float v) {
    if constexpr (A == Act::relu) return v > 0.f ? v : (v != v ? v : 0.f);  // NaN propagates
    if constexpr (A == Act::tanh) return tanhf(v);
    if constexpr (A == Act::sigmoid) return 1.f / (1.f + expf(-v));
    return v;
}

template <Act A>
__global__ void bias_act(float* y, const float* bias, int64_t count, int channels, int inner) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = activate<A>(y[i] + bias[(i / inner) % channels]);
}

__global__ void affine(const float* x, float* y, int64_t count, float scale, float offset) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = x[i] * scale + offset;
}

__global__ void scale_planes(float* y, const float* factor, int64_t count, int plane) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
        y[i] *= factor[i % plane];
}

}  // namespace

void launch_bias_act(float* y, const float* bias, int64_t count, int channels, int inner, Act act, cudaStream_t s) {
    if (count == 0) return;
    switch (act) {
        case Act::relu: bias_act<Act::relu><<<blocks(count), kThreads, 0, s>>>(y, bias, count, channels, inner); break;
        case Act::tanh: bias_act<Act::tanh><<<blocks(count), kThreads, 0, s>>>(y, bias, count, channels, inner); break;
        case Act::sigmoid:
            bias_act<Act::sigmoid><<<blocks(count), kThreads, 0, s>>>(y, bias, count, channels, inner);
            break;
        default: bias_act<Act::linear><<<blocks(count), kThreads, 0, s>>>(y, bias, count, channels, inner); break;
    }
}

void launch_affine(const float* x, float* y, int64_t count, float scale, float offset, cudaStream_t s) {
    if (count) affine<<<blocks(count), kThreads, 0, s>>>(x, y, count, scale, offset);
}

void launch_scale_planes(float* y, const float* factor, int64_t count, int plane, cudaStream_t s) {
    if (count) scale_planes<<<blocks(count), kThreads, 0, s>>>(y, factor, count, plane);
}

}  // namespace lenet::cuda
