// The element-wise activations of network.h, written once for every backend:
// host code for the CPU, __device__ code when nvcc compiles it for the GPU.
// Each follows the formula TensorFlow evaluates for the Keras activation of the
// same name (keras/src/activations, tf.nn), so that the engine agrees with Keras.
#pragma once

#include <math.h>

#include "../net/network.h"

#if defined(__CUDACC__)
#define LENET_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LENET_HOST_DEVICE inline
#endif

namespace lenet {

LENET_HOST_DEVICE float activate(const Activation& a, float x) {
    switch (a.kind) {
        case Act::linear: return x;
        case Act::relu: {
            // Keras' ReLU(negative_slope, max_value, threshold); NaN goes through.
            if (x != x) return x;
            if (x > a.threshold) return x < a.max_value ? x : a.max_value;
            return a.alpha * (x - a.threshold);
        }
        case Act::elu: return x > 0.f ? x : a.alpha * expm1f(x);
        case Act::selu: {
            const float alpha = 1.6732632423543772848170429916717f, scale = 1.0507009873554804934193349852946f;
            return scale * (x > 0.f ? x : alpha * expm1f(x));
        }
        case Act::gelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f));
        case Act::gelu_tanh: {
            const float k = 0.7978845608028654f;  // sqrt(2 / pi)
            return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
        }
        case Act::tanh: return tanhf(x);
        case Act::sigmoid: return 1.f / (1.f + expf(-x));
        case Act::hard_sigmoid: {
            const float y = a.alpha * x + a.beta;
            return y < 0.f ? 0.f : (y > 1.f ? 1.f : y);
        }
        case Act::hard_swish: {
            const float y = a.alpha * x + a.beta;
            return x * (y < 0.f ? 0.f : (y > 1.f ? 1.f : y));
        }
        case Act::swish: return x / (1.f + expf(-x));
        case Act::softplus: return fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)));
        case Act::softsign: return x / (1.f + fabsf(x));
        case Act::exponential: return expf(x);
        case Act::mish: return x * tanhf(fmaxf(x, 0.f) + log1pf(expf(-fabsf(x))));
    }
    return x;
}

}  // namespace lenet
