// The small kernels cuDNN and cuBLAS do not provide (or do not fuse), over NCHW
// float32. Each is one grid-stride launch; activations use the same
// activate() as the CPU backend (backends/activation_math.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../../net/network.h"
#include "completion.h"

namespace lenet::cuda {

// y[i] = act(y[i] + bias[(i / inner) % channels]) over `count` values: NCHW conv
// output (inner = h*w) or a dense output (inner = 1). One launch instead of
// cuDNN's AddTensor + ActivationForward.
void launch_bias_act(float* y, const float* bias, int64_t count, int channels, int inner, const Activation& act,
                     cudaStream_t s);
// y[i] = float(x[i]) * scale: uint8 pixels uploaded as bytes, scaled on the device
// into the float32 values the host's float(p) * scale gives.
void launch_scale_pixels(const uint8_t* x, float* y, int64_t count, float scale, cudaStream_t s);
// y[i] = x[i]: a call's input read in from mapped pinned memory (transfer.h, mapped).
void launch_copy(const float* x, float* y, int64_t count, cudaStream_t s);
// y[i] = x[i] into mapped pinned memory, then the completion flag of `done` raised with
// the number the host wrote at `request` (a graph's arguments cannot change per call).
void launch_finish(const float* x, float* y, int64_t count, const Completion& done, const unsigned* request,
                   cudaStream_t s);
// y[i] = act(x[i]).
void launch_activation(const float* x, float* y, int64_t count, const Activation& act, cudaStream_t s);
// y[i] = x[i] * scale[c] + shift[c], c = (i / inner) % channels (Rescaling, Normalization, batch norm).
void launch_affine(const float* x, float* y, const float* scale, const float* shift, int64_t count, int channels,
                   int inner, cudaStream_t s);
// y[i] = x[i] > 0 ? x[i] : alpha[i % image] * x[i], alpha in NCHW per image.
void launch_prelu(const float* x, float* y, const float* alpha, int64_t count, int64_t image, cudaStream_t s);
// y[i] *= factor[i % plane] (average pooling over a pre-padded input).
void launch_scale_planes(float* y, const float* factor, int64_t count, int plane, cudaStream_t s);
// Zero padding (pad > 0) or cropping (pad < 0) of n images: y(c, oy, ox) = x(c, oy - top, ox - left) or 0.
void launch_pad(const float* x, float* y, int n, Dims in, Dims out, int top, int left, cudaStream_t s);
// A reshape of the canonical (H, W, C order) values between NCHW tensors of dims in and out.
void launch_reshape(const float* x, float* y, int n, Dims in, Dims out, cudaStream_t s);
// A permute step (Step::perm) between NCHW tensors.
void launch_permute(const float* x, float* y, int n, Dims in, Dims out, const std::array<int, 3>& perm, cudaStream_t s);
// One input of a concatenation along canonical axis `axis` (0 h, 1 w, 2 c), placed at `offset` along it.
void launch_concat(const float* x, float* y, int n, Dims in, Dims out, int axis, int offset, cudaStream_t s);
// y = op(x[0], x[1], ...) element-wise over up to kMergeInputs inputs; with `accumulate`, y is the
// first operand (a merge of more inputs runs in several launches). `divide`: average's final division.
constexpr int kMergeInputs = 8;
void launch_merge(const float* const* x, int inputs, float* y, int64_t count, Merge op, bool accumulate, float divide,
                  cudaStream_t s);
// Layer normalization of each pixel's channels of n NCHW images of dims d: (x - mean) *
// rsqrt(var + eps) * gamma[c] + beta[c]; one thread per pixel.
void launch_layer_norm(const float* x, float* y, int n, Dims d, const float* gamma, const float* beta, float epsilon,
                       cudaStream_t s);
// A quantize step (network.h) on n samples of `size` values each (any layout): one block
// per sample, which reduces its range first when the quantization is dynamic.
void launch_quantize(const float* x, float* y, int n, int64_t size, const Quantization& q, bool integers,
                     cudaStream_t s);
// A dequantize step on n NCHW samples of dims d: y = x * (the dynamic scale of `source`'s
// sample, of source_size values) * scale[c]; one block per sample.
void launch_dequantize(const float* x, const float* source, float* y, int n, Dims d, int64_t source_size,
                       const float* scale, cudaStream_t s);
// Bilinear or nearest resizing with half-pixel centres (tf.image.resize) of the crop window pad.
void launch_resize(const float* x, float* y, int n, Dims in, Dims out, Pads crop, bool nearest, cudaStream_t s);

}  // namespace lenet::cuda
