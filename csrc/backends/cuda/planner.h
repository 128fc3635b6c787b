// The cuDNN planner: for one Step and batch size, every descriptor the kernel
// needs and how padding is realised. It makes no device call (cuDNN's
// descriptor and shape functions run without a GPU), so CI checks it.
//
// Padding: cuDNN pads symmetrically only. A conv whose pads are symmetric uses
// cuDNN's own padding. Otherwise, and for every padded pooling, the input is
// copied into a pre-padded buffer (zeros for conv and average pooling, -inf for
// max pooling) and cuDNN runs with no padding; average pooling then divides by
// the window size, and a per-position factor (window size / real pixels)
// restores TensorFlow's average over real pixels only.
#pragma once

#include <vector>

#include "../../net/network.h"
#include "resources.h"

namespace lenet::cuda {

struct PaddingChoice {
    int pad_h = 0, pad_w = 0;  // symmetric padding given to cuDNN
    Pads prepad;               // padding copied in before the op (all zero: none)
    bool prepadded() const { return prepad.top || prepad.bottom || prepad.left || prepad.right; }
};
PaddingChoice choose_padding(const Step& step);

struct StepPlan {
    const Step* step = nullptr;
    int n = 0;
    PaddingChoice padding;
    TensorDesc x;            // the input as it arrives, (n, c, h, w) packed
    TensorDesc padded;       // the pre-padded input, packed (when prepadded)
    TensorDesc padded_view;  // the unpadded interior of `padded`, strided (when prepadded)
    size_t padded_offset = 0;  // floats from the start of `padded` to the interior
    float pad_value = 0.f;
    TensorDesc y;            // the output, (n, c, h, w) packed
    TensorDesc bias;         // (1, c, 1, 1)
    FilterDesc w;
    ConvDesc conv;
    PoolDesc pool;
    ActDesc act;
    std::vector<float> avg_factor;  // (out.h * out.w), average pooling over pre-padded input
    int cudnn_out[4] = {0, 0, 0, 0};  // n, c, h, w as cuDNN computes them (conv and pooling)
};

// Builds the descriptors and checks cuDNN's output shape against the Step's
// (throws CudaError on a mismatch). `allow_tf32` sets the conv math type.
StepPlan plan_step(const Step& step, int n, bool allow_tf32);

}  // namespace lenet::cuda
