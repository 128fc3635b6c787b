// The network: a chain of Keras layers checked by shape inference and lowered,
// once, to the Steps every backend executes. Nothing here knows about a device.
//
// Canonical layouts (what a Step's weights and tensors mean, whatever backend
// runs them): activations are NHWC per image; conv kernels are HWIO
// (kh, kw, in, out) as Keras stores them; dense kernels are (in, out) with the
// input rows in H,W,C order. A backend that wants another layout converts
// once, when it prepares a Step (see layout.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace lenet {

enum class LayerKind { conv2d, max_pool2d, avg_pool2d, zero_pad2d, flatten, dense, activation, rescaling };
enum class Act { linear, relu, tanh, sigmoid, softmax };
enum class FlattenOrder { hwc, chw };
enum class DataFormat { channels_last, channels_first };

const char* to_string(LayerKind k);
const char* to_string(Act a);

// One Keras layer as the file loader describes it (python/lenet/spec.py holds
// the same fields). Weights are in Keras layout.
struct LayerSpec {
    LayerKind kind = LayerKind::activation;
    std::string name;
    std::string keras_class;
    std::array<int, 2> kernel{1, 1};   // conv kernel_size or pool_size (h, w)
    std::array<int, 2> strides{1, 1};
    bool same_padding = false;         // Keras padding='same' (TensorFlow's asymmetric rule)
    int filters = 0;
    int units = 0;
    Act activation = Act::linear;
    std::array<int, 4> pad{0, 0, 0, 0};  // zero_pad2d: top, bottom, left, right
    float scale = 1.f, offset = 0.f;     // rescaling
    FlattenOrder flatten_order = FlattenOrder::hwc;
    std::vector<float> weights;
    std::vector<int64_t> weights_shape;
    std::vector<float> bias;           // empty when the layer has no bias
    std::vector<int64_t> bias_shape;
};

struct Dims {
    int h = 1, w = 1, c = 1;
    int64_t size() const { return int64_t(h) * w * c; }
    bool operator==(const Dims& o) const { return h == o.h && w == o.w && c == o.c; }
};

struct Pads {
    int top = 0, bottom = 0, left = 0, right = 0;
};

enum class OpKind { conv2d, max_pool2d, avg_pool2d, pad2d, dense, affine, activation, softmax };
const char* to_string(OpKind k);

// One operation of the lowered network. Pooling pads are "absent" pixels (max
// ignores them, average divides by the real pixels only); conv and pad2d pads are
// zeros. For dense, `in` is the tensor as it arrives: right after a Flatten it is
// still spatial (h, w, c), which tells an NCHW backend how to permute the rows.
struct Step {
    OpKind op = OpKind::activation;
    Dims in, out;
    int kh = 1, kw = 1, sh = 1, sw = 1;  // conv / pool window and strides
    Pads pad;
    Act act = Act::linear;               // conv, dense, activation (never softmax: that is its own op)
    float scale = 1.f, offset = 0.f;     // affine
    std::vector<float> weights;          // conv HWIO; dense (in, out), rows in H,W,C order
    std::vector<float> bias;             // conv, dense: one per output channel (zeros if none)
    std::string layers;                  // the Keras layers this step implements, for summary()
};

// Shape of 'same' padding in TensorFlow: out = ceil(in / s), the extra pixel of an
// odd total goes after (bottom/right).
struct SamePadding {
    int out, before, after;
};
SamePadding same_padding(int in, int kernel, int stride);

// A checked, lowered network. Immutable once built; shared by every plan.
class Network {
public:
    // Checks every shape (throws ModelFileError naming the layer and `source`),
    // rejects what the engine cannot run (UnsupportedModelError), converts
    // weights to canonical layouts and fuses activations into their producers.
    // `classifier`: the output must be a vector of class scores, and a softmax is
    // appended to logits. Off, the network outputs whatever its last layer gives
    // (tests run single ops that way).
    Network(const std::vector<LayerSpec>& layers, Dims input, DataFormat format, std::string source,
            bool classifier = true);

    const std::vector<Step>& steps() const { return steps_; }
    Dims input() const { return input_; }
    DataFormat input_format() const { return format_; }
    // Values per image in the output: the number of classes for a classifier.
    int classes() const { return classes_; }
    const std::string& source() const { return source_; }
    // True when the file's model ends in logits and the engine appended the softmax.
    bool softmax_appended() const { return softmax_appended_; }

    struct LayerSummary {
        std::string name, keras_class;
        Dims out;
        bool flat;
        int64_t params;
    };
    // One row per Keras layer of the file, with its output shape and parameter count.
    const std::vector<LayerSummary>& summary() const { return summary_; }
    int64_t params() const;
    // Multiply-adds per image in the convolutions and dense layers: the arithmetic
    // that bounds the speed of any engine (lenet-bench's FMA floor).
    int64_t macs() const;

private:
    std::vector<Step> steps_;
    std::vector<LayerSummary> summary_;
    Dims input_;
    DataFormat format_;
    int classes_ = 0;
    std::string source_;
    bool softmax_appended_ = false;
};

}  // namespace lenet
