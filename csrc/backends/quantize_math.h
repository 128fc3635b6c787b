// network.h's Quantization, written once for every backend (host code for the CPU,
// __device__ code for the GPU), as ONNX Runtime computes it: x / scale divided (not
// multiplied by a reciprocal), rounded half to even, the zero point added, clamped.
// A dynamic quantization takes its scale from the sample's range widened to hold 0
// (1 when the range is empty, all zeros) and its zero point from where 0 falls.
//
// Why float32 suffices for the integer layers that read these values: a quantized
// convolution's sums (ConvInteger) are integers below 2^24 for LeNet's sizes (a 5x5x16
// window of 255 x 127 products: 10^7), so the same products of integer-valued floats
// are exact up to the one rounding of each value times its scale; a dense layer's
// longer sums carry float32's usual rounding, as its float model does.
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

// x quantized (q.scale > 0): its integer less the zero point, or (integers false) the
// value that stands for.
LENET_HOST_DEVICE float quantize(float x, const Quantization& q, bool integers) {
    const float z = float(q.zero_point);
    const float v = fminf(fmaxf(rintf(x / q.scale) + z, float(q.lo)), float(q.hi)) - z;
    return integers ? v : v * q.scale;
}

// The quantization of one sample of `count` values: q itself, or a dynamic one's choice.
inline Quantization sample_quantization(const float* x, int64_t count, Quantization q) {
    if (!q.dynamic() || count == 0) return q;
    float lo = x[0], hi = x[0];
    for (int64_t i = 1; i < count; ++i) lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]);
    return dynamic_quantization(lo, hi);
}

// A quantize step on n samples, in any layout (host code; the GPU reduces in a block).
inline void quantize_samples(const Step& s, const float* x, float* y, int n) {
    const int64_t size = s.out.size();
    for (int64_t b = 0; b < n; ++b) {
        const Quantization q = sample_quantization(x + b * size, size, s.quant);
        for (int64_t i = 0; i < size; ++i) y[b * size + i] = quantize(x[b * size + i], q, s.integers);
    }
}

// A dequantize step on n samples: sums x (channel c of value i: channel(i)) times the
// scale of the dynamic quantization of `source` (the step's 2nd input), times scale[c].
// The two scales are multiplied first, as ONNX Runtime's graph does (Mul of the scales,
// then Mul of the Cast sums).
template <class Channel>
void dequantize_samples(const Step& s, const float* x, const float* source, float* y, int n, Channel channel) {
    const int64_t size = s.out.size(), source_size = s.ins.at(1).size();
    std::vector<float> factor(s.scale.size());
    for (int64_t b = 0; b < n; ++b) {
        const Quantization q = sample_quantization(source + b * source_size, source_size, Quantization{});
        for (size_t c = 0; c < factor.size(); ++c) factor[c] = q.scale * s.scale[c];
        for (int64_t i = 0; i < size; ++i) y[b * size + i] = x[b * size + i] * factor[channel(i)];
    }
}

}  // namespace lenet
