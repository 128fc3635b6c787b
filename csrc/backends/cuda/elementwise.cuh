// The few element-wise kernels cuDNN and cuBLAS do not fuse for us.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../../net/network.h"

namespace lenet::cuda {

// y[i] = act(y[i] + bias[(i / inner) % channels]) over `count` values: NCHW conv
// output (inner = h*w) or a dense output (inner = 1). One launch instead of
// cuDNN's AddTensor + ActivationForward.
void launch_bias_act(float* y, const float* bias, int64_t count, int channels, int inner, Act act, cudaStream_t s);
// y[i] = x[i] * scale + offset (Rescaling).
void launch_affine(const float* x, float* y, int64_t count, float scale, float offset, cudaStream_t s);
// y[i] *= factor[i % plane] (average pooling over a pre-padded input).
void launch_scale_planes(float* y, const float* factor, int64_t count, int plane, cudaStream_t s);

}  // namespace lenet::cuda
