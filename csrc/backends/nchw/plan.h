// What a backend holding activations in NCHW does to a Step before running it,
// decided once here for the CUDA backend and the CPU backend's NCHW mode alike:
// its constants in NCHW forms, and how padding is realised given convolution and
// pooling primitives that pad symmetrically only (cuDNN's).
//
// Padding: a conv whose pads are symmetric uses the primitive's own padding.
// Otherwise, and for every padded pooling, the input is copied into a pre-padded
// buffer (zeros for conv and average pooling, -inf for max pooling) and the
// primitive runs unpadded; average pooling then divides by the whole window, and
// a per-position factor (window size / real pixels) restores TensorFlow's
// average over the real pixels only.
#pragma once

#include <vector>

#include "../../net/network.h"

namespace lenet::nchw {

// A Step's constants as an NCHW backend uses them: conv kernels OIHW
// (out, in / groups, kh, kw); dense rows that follow a spatial input in C, H, W
// order; affine and layer norm: scale and shift; prelu: alpha in C, H, W order.
struct Constants {
    std::vector<float> weights, bias;
};
Constants constants(const Step& step);

struct PaddingChoice {
    int pad_h = 0, pad_w = 0;  // symmetric padding the primitive applies itself
    Pads prepad;               // padding copied in before the op (all zero: none)
    bool prepadded() const { return prepad.any(); }
};
PaddingChoice choose_padding(const Step& step);

// The value the pre-padded border holds: -inf for max pooling, else 0.
float pad_value(const Step& step);

// Dims of the pre-padded input.
Dims padded_dims(const Step& step, const PaddingChoice& padding);

// Average pooling over a pre-padded input: per output position (out.h * out.w),
// window size / real pixels in it. Empty when nothing is pre-padded.
std::vector<float> average_factors(const Step& step, const PaddingChoice& padding);

}  // namespace lenet::nchw
