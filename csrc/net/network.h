// The network: a graph of Keras layers (layer.h) checked by shape inference and
// lowered, once, to the Steps every backend executes. Nothing here knows about a
// device. This is the one place that knows what a layer computes and what shape
// it gives: the Python loader asks it (expected_weights) instead of computing
// shapes itself.
//
// Canonical layouts (what a Step's weights and tensors mean, whatever backend
// runs them): every tensor is Dims {h, w, c} stored H, W, C per image — a flat
// vector of n values is {1, 1, n}, a Keras (a, b) tensor is {1, a, b}. Conv
// kernels are HWIO (kh, kw, in / groups, out) as Keras stores them; dense kernels
// are (in, out) with the input rows in H, W, C order. A channels_first model's
// (c, h, w) tensors are held as {h, w, c} too: its input is transposed on the
// way in, and the layers whose meaning depends on memory order (Flatten,
// Reshape, Permute) get explicit permute steps, folded away where exact. A
// backend that wants another layout converts once, when it prepares a Step
// (layout.h).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "layer.h"

namespace lenet {

struct Dims {
    int h = 1, w = 1, c = 1;
    int64_t size() const { return int64_t(h) * w * c; }
    bool operator==(const Dims& o) const { return h == o.h && w == o.w && c == o.c; }
    bool operator!=(const Dims& o) const { return !(*this == o); }
};

struct Pads {
    int top = 0, bottom = 0, left = 0, right = 0;
    bool any() const { return top || bottom || left || right; }
};

// A tensor as Keras sees it, per sample: rank 1, 2 or 3, and its canonical Dims.
// `chw`: a rank-3 tensor of a channels_first model, which Keras sees as (c, h, w).
struct Shape {
    int rank = 3;
    Dims d;
    bool chw = false;
    std::vector<int64_t> keras() const;
    std::string str() const;  // Keras' view, e.g. "(28, 28, 1)"
};

// Element-wise activations (softmax is its own op). Parameters
// (LENET_ACTIVATION_PARAMS, layer.h): relu: alpha = negative slope, max_value,
// threshold (Keras' ReLU); elu: alpha; hard_sigmoid / hard_swish: clip(alpha * x +
// beta, 0, 1). The math is in backends/activation_math.h, shared by every backend.
//
// X(name, monotonic): every entry says whether it never decreases (then it commutes
// with max pooling: a fused conv + pool may pool first): yes, no, or alpha_nonneg
// (when its alpha >= 0). An entry without it does not compile.
// clang-format off: one table entry per line, as written
#define LENET_ACTIVATIONS(X) \
    X(linear, yes) X(relu, alpha_nonneg) X(elu, alpha_nonneg) X(selu, yes) X(gelu, no) X(gelu_tanh, no) X(tanh, yes) \
    X(sigmoid, yes) X(hard_sigmoid, alpha_nonneg) X(hard_swish, no) X(swish, no) X(softplus, yes) X(softsign, yes) \
    X(exponential, yes) X(mish, no)
// clang-format on

enum class Act {
#define LENET_ENUM_VALUE(n, monotonic) n,
    LENET_ACTIVATIONS(LENET_ENUM_VALUE)
#undef LENET_ENUM_VALUE
};
const char* to_string(Act a);

struct Activation {
    Act kind = Act::linear;
    // The parameters, the same fields as the layer record's (LENET_ACTIVATION_PARAMS).
#define LENET_DECLARE_PARAM(type, field, init, doc) type field = init;
    LENET_ACTIVATION_PARAMS(LENET_DECLARE_PARAM)
#undef LENET_DECLARE_PARAM
    bool linear() const { return kind == Act::linear; }
    // max(x, 0): the form kernels apply in registers (and cuDNN fuses).
    bool plain_relu() const {
        return kind == Act::relu && alpha == 0.f && threshold == 0.f &&
               max_value == std::numeric_limits<float>::infinity();
    }
    // Never decreasing: it commutes with max pooling (a fused conv + pool may pool
    // first). From the table's column: no default to fall back on.
    bool monotonic() const {
        const bool yes = true, no = false, alpha_nonneg = alpha >= 0.f;
        switch (kind) {
#define LENET_MONOTONIC(n, monotonic) \
    case Act::n: return monotonic;
            LENET_ACTIVATIONS(LENET_MONOTONIC)
#undef LENET_MONOTONIC
        }
        return no && yes;  // not reached: every kind is a case
    }
    std::string str() const;
};

enum class OpKind {
    conv2d,
    max_pool2d,
    avg_pool2d,
    pad2d,
    dense,
    affine,
    activation,
    prelu,
    softmax,
    resize,
    reshape,
    permute,
    merge,
    concat,
    layer_norm,
    quantize,
    dequantize
};
const char* to_string(OpKind k);

enum class Merge { add, subtract, multiply, average, maximum, minimum };

// ONNX's QuantizeLinear then DequantizeLinear, the values a quantized graph's integers
// stand for, in float32: x -> (clamp(round_half_even(x / scale) + zero_point, lo, hi) -
// zero_point) * scale (or, for Step::integers, the integers less the zero point alone).
// scale 0: each sample chooses its own, as DynamicQuantizeLinear does over the whole
// tensor it is given (its range widened to hold 0, over hi - lo steps; a graph exported
// for one image at a time). backends/quantize_math.h computes it.
struct Quantization {
    float scale = 0.f;
    int zero_point = 0, lo = 0, hi = 255;
    bool dynamic() const { return scale == 0.f; }
};

// One operation of the lowered network, reading the outputs of `inputs` (earlier
// steps; -1 is the network input). Pooling pads are "absent" pixels (max ignores
// them, average divides by the real pixels only); conv pads are zeros; pad2d's
// may be negative (a crop). For dense, `in` is the tensor as it arrives: right
// after a Flatten it is still spatial (h, w, c), which tells an NCHW backend how
// to permute the rows.
struct Step {
    OpKind op = OpKind::activation;
    std::vector<int> inputs;
    Dims in, out;                        // in: the first input
    std::vector<Dims> ins;               // every input (merge, concat)
    int kh = 1, kw = 1, sh = 1, sw = 1;  // conv / pool window and strides
    int dh = 1, dw = 1, groups = 1;      // conv dilation and groups
    Pads pad;
    Activation act;                      // conv, dense, activation
    std::vector<float> weights;          // conv HWIO (kh, kw, in / groups, out); dense (in, out), rows H, W, C
    std::vector<float> bias;             // conv, dense: one per output channel (zeros if none)
    std::vector<float> scale, shift;     // affine: y = x * scale[c] + shift[c]; prelu: scale = alpha, (h, w, c);
                                         // layer_norm: gamma, beta
    // quantize: its Quantization. dequantize: y = x * (s * scale[c]), s the scale a dynamic
    // quantization of its 2nd input chooses for each sample (as the quantize step did).
    Quantization quant;
    // quantize: gives q - zero_point (integers), not the values; conv2d / dense: integer
    // inputs and weights, summed exactly (no Winograd, FFT or TF32: LeNet's sums stay below
    // 2^24, exact in float32).
    bool integers = false;
    float epsilon = 0.f;  // layer_norm: each pixel's channels normalized, (x - mean) / sqrt(var + eps)
    Merge merge = Merge::add;
    int axis = 2;  // concat: 0 = h, 1 = w, 2 = c
    std::array<int, 3> perm{0, 1, 2};  // permute: output axis i is input axis perm[i] (0 h, 1 w, 2 c)
    bool nearest = false;  // resize: nearest instead of bilinear (pad: the crop, if any)
    bool log = false;  // softmax: its logarithm, x - max - log(sum(exp(x - max)))
    std::string layers;  // the Keras layers this step implements, for summary()
    bool depthwise() const { return op == OpKind::conv2d && groups > 1 && groups == in.c && out.c % groups == 0; }
};

// Shape of 'same' padding in TensorFlow: out = ceil(in / s), the extra pixel of an
// odd total goes after (bottom/right).
struct SamePadding {
    int out, before, after;
};
SamePadding same_padding(int in, int kernel, int stride);

// What the model's outputs are, for turning them into probabilities.
enum class OutputKind { softmax, log_softmax, sigmoid, scores };

// The image a model's input holds; channels 0: none.
struct ImageShape {
    int64_t height = 0, width = 0, channels = 0;
    bool channels_first = false;  // the input holds each channel's pixels as one run (c, h, w)
};

// A checked, lowered network. Immutable once built; shared by every plan.
class Network {
public:
    // Checks the graph and every shape (throws ModelFileError naming the layer and
    // `source`), rejects what the engine cannot run (UnsupportedModelError),
    // converts weights to canonical layouts, folds batch norms and fuses
    // activations into their producers. `input`: Keras' per-sample input shape.
    // The output is the last layer's.
    Network(std::vector<LayerSpec> layers, const std::vector<int64_t>& input, std::string source);

    // The weights each layer expects (name, Keras shape), without building
    // anything: what the loader reads from the file.
    static std::vector<std::vector<WeightSlot>> expected_weights(const std::vector<LayerSpec>& layers,
                                                                 const std::vector<int64_t>& input,
                                                                 const std::string& source);

    const std::vector<Step>& steps() const { return steps_; }
    const Shape& input() const { return input_; }
    const Shape& output() const { return output_; }
    // Keras' per-sample input and output shapes (input().keras(), kept: asked on every call).
    const std::vector<int64_t>& input_shape() const { return input_shape_; }
    const std::vector<int64_t>& output_shape() const { return output_shape_; }
    // Values per image in the output.
    int64_t output_size() const { return output_.d.size(); }
    OutputKind output_kind() const { return output_kind_; }
    // The model's data format: its convolutions' and poolings' (channels_last without any).
    bool channels_first() const { return channels_first_; }
    // The image the input holds: an image input as it is, a 2-D input (h, w) as one
    // channel, a flat input as the image its first layer reshapes it into, else as a
    // square of one channel; channels 0 when its length is no square. What Python's
    // infer draws images at, and the C++ API's pixel calls take.
    const ImageShape& image() const { return image_; }
    const std::string& source() const { return source_; }

    struct LayerSummary {
        std::string name, keras_class;
        Shape out;
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
    Shape input_, output_;
    std::vector<int64_t> input_shape_, output_shape_;
    OutputKind output_kind_ = OutputKind::scores;
    bool channels_first_ = false;
    ImageShape image_;
    std::string source_;
};

}  // namespace lenet
