// One layer as a model file describes it: the record the Python loader fills
// from a Keras file and the network checks, shapes and lowers (network.h).
//
// The record is generic: every layer kind reads the fields it needs (the layer
// table, layers.cpp, says which) and ignores the rest. Its fields are listed
// once, in LENET_LAYER_FIELDS; the Python binding and the type stub are made
// from that list (tests/core/test_core_api.py checks the stub against it).
//
// Shapes are Keras' per-sample shapes; weights are named and in Keras' layouts
// (a conv kernel (kh, kw, in/groups, filters), a dense kernel (in, units), ...).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace lenet {

using Int2 = std::array<int, 2>;
using Int4 = std::array<int, 4>;

// A float32 array in row-major order.
struct Tensor {
    std::vector<int64_t> shape;
    std::vector<float> data;
};

// The parameters of an activation, in the layer record and in network.h's
// Activation alike (one list: a new parameter is one line here, and the type stub,
// python/lenet/_core.pyi, which tests/core/test_core_api.py checks against the record).
// X(type, name, default, what it means). Infinity is a valid value only where the
// default is infinite.
// clang-format off: one table entry per line, as written
#define LENET_ACTIVATION_PARAMS(X)                                                                             \
    X(float, alpha, 0.f, "activation parameter: relu negative slope, elu alpha, hard sigmoid slope")             \
    X(float, beta, 0.f, "activation parameter: hard sigmoid offset")                                              \
    X(float, max_value, std::numeric_limits<float>::infinity(), "relu ceiling")                                   \
    X(float, threshold, 0.f, "relu threshold")
// clang-format on

// X(type, name, default, what it means)
// clang-format off: one table entry per line, as written
#define LENET_LAYER_FIELDS(X)                                                                                        \
    X(std::string, kind, "", "the layer table's name of the layer: conv2d, dense, batch_norm, ...")              \
    X(std::string, name, "", "the Keras layer name, for messages")                                                \
    X(std::string, keras_class, "", "the Keras class name, for messages")                                         \
    X(std::vector<int>, inputs, {}, "indices of the layers this one reads, in order; -1 is the model input")      \
    X(Int2, kernel, (Int2{1, 1}), "conv kernel_size or pool_size (h, w)")                                          \
    X(Int2, strides, (Int2{1, 1}), "conv or pool strides (h, w)")                                                  \
    X(Int2, dilation, (Int2{1, 1}), "conv dilation_rate (h, w)")                                                   \
    X(bool, same_padding, false, "padding='same' (TensorFlow's rule: the extra pixel after)")                     \
    X(int, filters, 0, "conv output channels")                                                                    \
    X(int, units, 0, "dense outputs")                                                                             \
    X(int, groups, 1, "conv groups")                                                                              \
    X(int, depth_multiplier, 1, "depthwise / separable conv channels per input channel")                         \
    X(bool, use_bias, true, "conv / dense: a bias weight is present")                                             \
    X(Int4, pad, (Int4{0, 0, 0, 0}), "zero padding or cropping; pooling: absent pixels (top, bottom, left, right)")                        \
    X(std::string, activation, "linear", "the activation: linear, relu, elu, gelu, ... (LENET_ACTIVATIONS, network.h)")         \
    LENET_ACTIVATION_PARAMS(X)                                                                                     \
    X(float, scale, 1.f, "rescaling: y = x * scale + offset")                                                      \
    X(float, offset, 0.f, "rescaling offset")                                                                     \
    X(float, epsilon, 1e-3f, "batch_norm / layer_norm / normalization epsilon")                                   \
    X(bool, bn_center, true, "batch_norm / layer_norm: a beta weight is present")                                 \
    X(bool, bn_scale, true, "batch_norm / layer_norm: a gamma weight is present")                                 \
    X(std::vector<int>, axes, {}, "Keras axes (batch axis 0): softmax, concatenate, batch_norm, normalization; " \
                                  "prelu shared_axes; permute dims")                                              \
    X(std::vector<int>, target_shape, {}, "reshape: the per-sample shape (-1 for one inferred dimension)")        \
    X(Int2, size, (Int2{0, 0}), "resizing: output (height, width)")                                               \
    X(std::string, interpolation, "bilinear", "resizing: bilinear or nearest")                                    \
    X(bool, crop_to_aspect_ratio, false, "resizing: crop to the output's aspect ratio first")                    \
    X(bool, antialias, false, "resizing: antialiased downscaling")                                                \
    X(bool, keepdims, false, "global pooling: keep the 1x1 spatial dimensions")                                   \
    X(float, quant_scale, 0.f, "quantize: the step between its integers; 0: each sample's own, from its range")    \
    X(int, zero_point, 0, "quantize: the integer that stands for 0")                                              \
    X(Int2, quant_range, (Int2{0, 255}), "quantize: the smallest and largest integer (uint8: 0, 255; int8: -128, 127)") \
    X(bool, integers, false, "quantize: q - zero_point, not its value; conv2d / dense: integer inputs, weights, summed exactly") \
    X(std::string, data_format, "", "the layer's data_format: channels_last, channels_first, or empty")
// clang-format on

struct LayerSpec {
#define LENET_DECLARE_FIELD(type, field, init, doc) type field = init;
    LENET_LAYER_FIELDS(LENET_DECLARE_FIELD)
#undef LENET_DECLARE_FIELD
    // Named weights, in Keras layout, in the order they were set.
    std::vector<std::pair<std::string, Tensor>> weights;

    const Tensor* weight(const std::string& n) const {
        for (const auto& w : weights)
            if (w.first == n) return &w.second;
        return nullptr;
    }
    void set_weight(const std::string& n, Tensor t) {
        for (auto& w : weights)
            if (w.first == n) {
                w.second = std::move(t);
                return;
            }
        weights.emplace_back(n, std::move(t));
    }
};

// A weight a layer expects, as the layer table computes it from the layer's
// options and input shape. `count_only`: any shape holding that many values is
// accepted (Keras stores some per-channel vectors with broadcast dimensions).
struct WeightSlot {
    std::string name;
    std::vector<int64_t> shape;
    bool count_only = false;
    bool ignored = false;  // present in files, unused at inference (Normalization's count)
};

}  // namespace lenet
