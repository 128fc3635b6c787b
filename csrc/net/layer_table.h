// The layer table: one row per layer kind. A row says how many inputs the layer
// takes, checks its options and input shapes and gives its output shape and the
// weights it expects (infer), and emits the Steps that compute it (lower). Rows
// lower naively (a conv, then its activation, then its batch norm as an affine
// step...); network.cpp's passes fold and fuse afterwards, the same way for
// every layer. Internal to net/.
#pragma once

#include <string>
#include <vector>

#include "../support/format.h"
#include "network.h"

namespace lenet {

// What a row sees of the layer it is asked about.
struct LayerContext {
    const LayerSpec& l;
    const std::vector<Shape>& in;  // the shapes of its inputs
    bool channels_first;           // the model's data format
    const std::string& source;

    [[noreturn]] void fail_file(const std::string& what) const;         // ModelFileError
    [[noreturn]] void fail_unsupported(const std::string& what) const;  // UnsupportedModelError
    // v in [lo, hi], else ModelFileError "<what> = v is out of range [lo, hi]".
    void check_range(const char* what, int64_t v, int64_t lo, int64_t hi) const;
    // The input of a spatial layer: rank 3 (an image), or rank 2 (steps, channels) for a
    // 1-D layer (kind "...1d"); else UnsupportedModelError.
    const Shape& image_input() const;
    bool one_d() const;
    // Whether the layer's kind starts with `prefix` ("max_pool", "crop", ...).
    bool is(const char* prefix) const;
    // A Shape of the model's format: rank 3 is (c, h, w) to Keras in a channels_first model.
    Shape make(int rank, Dims d) const;
    // A Keras axis (counted with the batch axis, negative from the end) of `s` as a
    // canonical axis 0 = h, 1 = w, 2 = c. `what` names it in errors.
    int canonical_axis(const Shape& s, int keras_axis, const char* what) const;
    // The weight called `name` (checked against the row's slots before lowering).
    const Tensor& weight(const char* name) const;
};

// Where a row emits its steps.
struct Lowering {
    std::vector<Step>& steps;
    std::vector<int> inputs;  // the values the layer reads: step indices, -1 the network input
    std::vector<Dims> dims;   // their canonical dims
    int result = -1;          // set by the row: the value of the layer's output

    // Appends `s`, reading `from` (default: the layer's first input); returns its value.
    int emit(Step s, int from);
    int emit(Step s) { return emit(std::move(s), inputs.at(0)); }
    // The canonical dims of a value.
    Dims dims_of(int value) const;
};

struct LayerRule {
    const char* kind;
    int min_inputs, max_inputs;
    Shape (*infer)(const LayerContext& c, std::vector<WeightSlot>& slots);
    void (*lower)(const LayerContext& c, const Shape& out, Lowering& low);
    // Layers whose data_format decides the model's (conv, pool, padding, ...).
    bool spatial;
};

// The row of `kind`, or null.
const LayerRule* find_layer_rule(const std::string& kind);
// Every kind, for messages and lenet._core.layer_kinds().
std::vector<std::string> layer_kinds();
// A relu/elu/... from a layer's activation fields; throws UnsupportedModelError
// for an unknown name. "softmax" is not an Act: callers handle it.
Activation activation_of(const LayerContext& c);

}  // namespace lenet
