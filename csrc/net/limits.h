// The bounds of what the engine accepts, defined here and nowhere else: the
// network checks every layer against them (naming the layer), and Python reads
// them through lenet._core.limits(). They keep a hostile or broken file from
// asking for absurd memory or time; LeNet-sized models sit orders of magnitude
// below every one of them.
#pragma once

#include <cstdint>

namespace lenet::limits {

constexpr int kLayers = 1000;                 // layers in a model
constexpr int kInputs = 64;                   // inputs of one merge layer
constexpr int kKernel = 256;                  // conv kernel / pool window, per spatial dimension
constexpr int kStride = 256;                  // per spatial dimension
constexpr int kDilation = 256;                // per spatial dimension
constexpr int kPad = 1024;                    // padding or cropping, per side
constexpr int kDim = 8192;                    // any height or width, the input's included
constexpr int kChannels = 65536;              // channels of any tensor; conv filters
constexpr int kUnits = 1 << 20;               // Dense units; length of a flat tensor
constexpr int64_t kParams = 100'000'000;      // weights in the whole model (400 MB of float32)
constexpr int64_t kActivation = int64_t(1) << 27;  // floats per image in one tensor
constexpr int kQuantized = 1 << 22;           // |an integer of a quantized graph| (quantize_math.h)

}  // namespace lenet::limits
