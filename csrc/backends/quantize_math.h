// network.h's Quantization, written once for every backend (host code for the CPU,
// __device__ code for the GPU), as ONNX Runtime computes it: x / scale divided (not
// multiplied by a reciprocal), rounded half to even, the zero point added, clamped.
// A dynamic quantization takes its scale from the sample's range widened to hold 0
// (1 when the range is empty, all zeros) and its zero point from where 0 falls.
//
// Why float32 suffices for the integer layers that read a dynamic quantization's
// integers: a quantized convolution's sums (ConvInteger) are integers below 2^24 for
// LeNet's sizes (a 5x5x16 window of 255 x 127 products: 10^7), exact as sums of
// integer-valued floats; the dequantize step then applies the scales as ONNX Runtime
// does. A dense layer's longer sums may pass 2^24 and then round as float32 does.
#pragma once

#include <math.h>

#include <vector>

#include "activation_math.h"

namespace lenet {

// The scale and zero point DynamicQuantizeLinear takes for values in [lo, hi] (uint8).
LENET_HOST_DEVICE Quantization dynamic_quantization(float lo, float hi) {
    lo = fminf(lo, 0.f);
    hi = fmaxf(hi, 0.f);
    Quantization q;
    q.scale = hi == lo ? 1.f : (hi - lo) / 255.f;
    const float zero = fminf(fmaxf(0.f - lo / q.scale, 0.f), 255.f);
    q.zero_point = int(rintf(zero));  // the rounding mode's default: half to even
    return q;
}

// v rounded half to even, for |v| < 2^22 (limits::kQuantized): 1.5 * 2^23 added leaves no
// fraction bits, the addition rounding as the FPU does (to nearest, ties to even), and taken
// away again exactly. rintf's own result, without the library call it is on a baseline x86
// build (no SSE4.1 roundss), so the loops below vectorize.
LENET_HOST_DEVICE float round_half_even(float v) {
    const float magic = 12582912.f;
    return (v + magic) - magic;
}

// x quantized (q.scale > 0): its integer less the zero point, or (integers false) the
// value that stands for. ONNX Runtime rounds x / scale, adds the zero point and clamps to
// [lo, hi]; clamping x / scale to [lo - zero, hi - zero] first gives the same integers
// (the bounds are integers) and keeps the rounding within its range. NaN stays NaN.
LENET_HOST_DEVICE float quantize(float x, const Quantization& q, bool integers) {
    const float z = float(q.zero_point), t = x / q.scale;
    const float lo = float(q.lo) - z, hi = float(q.hi) - z;
    const float v = round_half_even(t < lo ? lo : (t > hi ? hi : t));
    return integers ? v : v * q.scale;
}

// The quantization of one sample of `count` values: q itself, or a dynamic one's choice.
inline Quantization sample_quantization(const float* x, int64_t count, Quantization q) {
    if (!q.dynamic() || count == 0) return q;
    // Eight running minima and maxima: independent lanes the compiler vectorizes (one
    // running pair is a chain of dependent comparisons, a few cycles a value).
    constexpr int kLanes = 8;
    float lo[kLanes], hi[kLanes];
    for (int k = 0; k < kLanes; ++k) lo[k] = hi[k] = x[0];
    int64_t i = 0;
    for (; i + kLanes <= count; i += kLanes)
        for (int k = 0; k < kLanes; ++k) {
            const float v = x[i + k];
            lo[k] = v < lo[k] ? v : lo[k];
            hi[k] = v > hi[k] ? v : hi[k];
        }
    for (; i < count; ++i) lo[0] = x[i] < lo[0] ? x[i] : lo[0], hi[0] = x[i] > hi[0] ? x[i] : hi[0];
    for (int k = 1; k < kLanes; ++k) lo[0] = lo[k] < lo[0] ? lo[k] : lo[0], hi[0] = hi[k] > hi[0] ? hi[k] : hi[0];
    return dynamic_quantization(lo[0], hi[0]);
}

// A quantize step on n samples, in any layout (host code; the GPU reduces in a block).
inline void quantize_samples(const Step& s, const float* x, float* y, int n) {
    const int64_t size = s.out.size();
    for (int64_t b = 0; b < n; ++b) {
        const Quantization q = sample_quantization(x + b * size, size, s.quant);
        for (int64_t i = 0; i < size; ++i) y[b * size + i] = quantize(x[b * size + i], q, s.integers);
    }
}

// A dequantize step on n samples: sums x times the scale of the dynamic quantization of
// `source` (the step's 2nd input), times scale[c] of their channel c; NHWC (channels_last:
// the channel the fastest axis) or NCHW. The two scales are multiplied first, as ONNX
// Runtime's graph does (Mul of the scales, then Mul of the Cast sums).
inline void dequantize_samples(const Step& s, const float* x, const float* source, float* y, int n,
                               bool channels_last) {
    const int64_t c = s.out.c, plane = int64_t(s.out.h) * s.out.w, size = c * plane;
    const int64_t source_size = s.ins.at(1).size();
    std::vector<float> factor(static_cast<size_t>(c));
    for (int64_t b = 0; b < n; ++b) {
        const Quantization q = sample_quantization(source + b * source_size, source_size, Quantization{});
        for (int64_t k = 0; k < c; ++k) factor[k] = q.scale * s.scale[k];
        const float* in = x + b * size;
        float* out = y + b * size;
        for (int64_t p = 0; p < plane; ++p)
            for (int64_t k = 0; k < c; ++k) {
                const int64_t i = channels_last ? p * c + k : k * plane + p;
                out[i] = in[i] * factor[k];
            }
    }
}

}  // namespace lenet
