// The cuDNN planner: for one Step and batch size, every descriptor the kernel
// needs and how padding is realised. It makes no device call (cuDNN's
// descriptor and shape functions run without a GPU), so CI checks it.
//
// How padding is realised is nchw/plan.h's choice, shared with the CPU
// backend's NCHW mode.
#pragma once

#include <vector>

#include "../../net/network.h"
#include "../nchw/plan.h"
#include "resources.h"

namespace lenet::cuda {

using nchw::PaddingChoice;

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
