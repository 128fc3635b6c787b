// Building a Network: check the graph, infer every shape and check every weight
// through the layer table (layers.cpp), lower each layer to Steps, then fold and
// fuse the steps where the result is exact.
#include "network.h"

#include <algorithm>
#include <cmath>

#include "../support/errors.h"
#include "layer_table.h"
#include "layout.h"
#include "limits.h"

namespace lenet {

std::vector<int64_t> Shape::keras() const {
    if (rank == 1) return {d.c};
    if (rank == 2) return {d.w, d.c};
    if (chw) return {d.c, d.h, d.w};
    return {d.h, d.w, d.c};
}

std::string Shape::str() const { return tuple_str(keras()); }

const char* to_string(Act a) {
    switch (a) {
#define LENET_CASE(n, monotonic) \
    case Act::n: return #n;
        LENET_ACTIVATIONS(LENET_CASE)
#undef LENET_CASE
    }
    return "?";
}

std::string Activation::str() const {
    std::string s = to_string(kind);
    if (kind == Act::relu && !plain_relu())
        s += "(slope " + number_str(alpha) + ", max " + number_str(max_value) + ", threshold " + number_str(threshold) +
             ")";
    if (kind == Act::elu && alpha != 1.f) s += "(" + number_str(alpha) + ")";
    if (kind == Act::hard_sigmoid || kind == Act::hard_swish)
        s += "(" + number_str(alpha) + " x + " + number_str(beta) + ")";
    return s;
}

const char* to_string(OpKind k) {
    switch (k) {
        case OpKind::conv2d: return "conv2d";
        case OpKind::max_pool2d: return "max_pool2d";
        case OpKind::avg_pool2d: return "avg_pool2d";
        case OpKind::pad2d: return "pad2d";
        case OpKind::dense: return "dense";
        case OpKind::affine: return "affine";
        case OpKind::activation: return "activation";
        case OpKind::prelu: return "prelu";
        case OpKind::softmax: return "softmax";
        case OpKind::resize: return "resize";
        case OpKind::reshape: return "reshape";
        case OpKind::permute: return "permute";
        case OpKind::merge: return "merge";
        case OpKind::concat: return "concat";
        case OpKind::layer_norm: return "layer_norm";
        case OpKind::quantize: return "quantize";
        case OpKind::dequantize: return "dequantize";
    }
    return "?";
}

SamePadding same_padding(int in, int kernel, int stride) {
    const int out = (in + stride - 1) / stride;
    const int total = std::max((out - 1) * stride + kernel - in, 0);
    return {out, total / 2, total - total / 2};
}

namespace {

// ------------------------------------------------------------------ analysis

struct Analysis {
    bool channels_first = false;
    Shape input;
    std::vector<Shape> shapes;                   // each layer's output
    std::vector<std::vector<WeightSlot>> slots;  // each layer's weights
    std::vector<int64_t> params;                 // each layer's weight values
};

[[noreturn]] void fail_layer(const std::string& source, const LayerSpec& l, const std::string& what, bool file) {
    const std::string msg = source + ": layer '" + l.name + "' (" + l.keras_class + "): " + what;
    if (file) throw ModelFileError(msg);
    throw UnsupportedModelError(msg);
}

void check_output(const LayerContext& c, const Shape& s) {
    const Dims d = s.d;
    if (d.h < 1 || d.w < 1 || d.c < 1) c.fail_file("output shape " + s.str() + " is empty");
    if (d.size() > limits::kActivation)
        c.fail_file("output shape " + s.str() + " has more than " + std::to_string(limits::kActivation) + " values");
    if (s.rank == 3 && (d.h > limits::kDim || d.w > limits::kDim || d.c > limits::kChannels))
        c.fail_file("output shape " + s.str() + " exceeds the limits (" + std::to_string(limits::kDim) + " pixels, " +
                    std::to_string(limits::kChannels) + " channels)");
}

void check_weights(const LayerContext& c, const std::vector<WeightSlot>& slots) {
    const LayerSpec& l = c.l;
    for (const auto& w : l.weights) {
        const auto it =
            std::find_if(slots.begin(), slots.end(), [&](const WeightSlot& s) { return s.name == w.first; });
        if (it == slots.end()) c.fail_file("has a weight '" + w.first + "' that a " + l.kind + " layer does not take");
    }
    for (const WeightSlot& s : slots) {
        const Tensor* t = l.weight(s.name);
        if (!t) {
            if (s.ignored) continue;
            c.fail_file("weight '" + s.name + "' is missing (expected shape " + tuple_str(s.shape) + ")");
        }
        int64_t want = 1, have = 1;
        for (auto v : s.shape) want *= v;
        for (auto v : t->shape) have *= v;
        // count_only: any shape of that many values, or one value for all (broadcast).
        if (s.count_only ? have != want && have != 1 : t->shape != s.shape)
            c.fail_file("weight '" + s.name + "' has shape " + tuple_str(t->shape) + ", expected " +
                        tuple_str(s.shape));
        if (int64_t(t->data.size()) != have)
            c.fail_file("weight '" + s.name + "' holds " + std::to_string(t->data.size()) + " values for shape " +
                        tuple_str(t->shape));
        if (!s.ignored)
            for (float v : t->data)
                if (!std::isfinite(v)) c.fail_file("weight '" + s.name + "' contains NaN or infinite values");
    }
}

Analysis analyze(const std::vector<LayerSpec>& layers, const std::vector<int64_t>& input, const std::string& source,
                 bool with_weights) {
    Analysis a;
    if (layers.empty()) throw UnsupportedModelError(source + ": the model has no layers");
    if (int(layers.size()) > limits::kLayers)
        throw ModelFileError(source + ": " + std::to_string(layers.size()) + " layers (at most " +
                             std::to_string(limits::kLayers) + ")");

    // One data format for the model: its spatial layers' (mixed formats are refused).
    const LayerSpec* format_layer = nullptr;
    for (const LayerSpec& l : layers) {
        const LayerRule* r = find_layer_rule(l.kind);
        if (!r || !r->spatial || l.data_format.empty()) continue;
        if (l.data_format != "channels_last" && l.data_format != "channels_first")
            fail_layer(source, l, "unknown data_format '" + l.data_format + "'", true);
        if (!format_layer) {
            format_layer = &l;
            a.channels_first = l.data_format == "channels_first";
        } else if (l.data_format != format_layer->data_format) {
            fail_layer(source, l,
                       "data_format '" + l.data_format + "' differs from '" + format_layer->data_format +
                           "' of layer '" + format_layer->name + "'; mixed data formats are not supported",
                       false);
        }
    }

    // The input, as Keras declares it per sample.
    std::vector<int64_t> k = input;
    if (k.empty() || k.size() > 3)
        throw UnsupportedModelError(source + ": input shape " + tuple_str(k) +
                                    " is not supported (a vector, a (height, width) array or an image)");
    int64_t total = 1;
    for (auto v : k) {
        if (v < 1 || v > limits::kActivation)
            throw ModelFileError(source + ": input shape " + tuple_str(k) + " is out of range");
        total *= v;
    }
    if (total > limits::kActivation)
        throw ModelFileError(source + ": input shape " + tuple_str(k) + " has more than " +
                             std::to_string(limits::kActivation) + " values");
    Dims d;
    if (k.size() == 1) d = {1, 1, int(k[0])};
    if (k.size() == 2) d = {1, int(k[0]), int(k[1])};
    if (k.size() == 3)
        d = a.channels_first ? Dims{int(k[1]), int(k[2]), int(k[0])} : Dims{int(k[0]), int(k[1]), int(k[2])};
    a.input = Shape{int(k.size()), d, k.size() == 3 && a.channels_first};
    if (a.input.rank == 3 && (d.h > limits::kDim || d.w > limits::kDim || d.c > limits::kChannels))
        throw ModelFileError(source + ": input shape " + a.input.str() + " exceeds the limits (" +
                             std::to_string(limits::kDim) + " pixels, " + std::to_string(limits::kChannels) +
                             " channels)");

    std::vector<int> uses(layers.size(), 0);
    int64_t params = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        const LayerSpec& l = layers[i];
        const LayerRule* rule = find_layer_rule(l.kind);
        if (!rule) fail_layer(source, l, "layer kind '" + l.kind + "' is not supported", false);
        const int n = int(l.inputs.size());
        if (n < rule->min_inputs || n > rule->max_inputs)
            fail_layer(source, l,
                       "takes " +
                           (rule->min_inputs == rule->max_inputs
                                ? std::to_string(rule->min_inputs)
                                : std::to_string(rule->min_inputs) + " to " + std::to_string(rule->max_inputs)) +
                           (rule->max_inputs == 1 ? " input" : " inputs") + ", got " + std::to_string(n),
                       true);
        std::vector<Shape> in;
        for (int j : l.inputs) {
            if (j < -1 || j >= int(i))
                fail_layer(source, l, "reads layer #" + std::to_string(j) + ", which does not come before it", true);
            in.push_back(j < 0 ? a.input : a.shapes[j]);
            if (j >= 0) ++uses[j];
        }
        const LayerContext c{l, in, a.channels_first, source};
        std::vector<WeightSlot> slots;
        const Shape out = rule->infer(c, slots);
        check_output(c, out);
        int64_t p = 0;
        if (with_weights) {
            check_weights(c, slots);
            for (const auto& w : l.weights) p += int64_t(w.second.data.size());
        } else {
            for (const auto& s : slots) {
                int64_t v = 1;
                for (auto e : s.shape) v *= e;
                p += v;
            }
        }
        params += p;
        if (params > limits::kParams)
            fail_layer(source, l, "the model has more than " + std::to_string(limits::kParams) + " parameters", true);
        a.shapes.push_back(out);
        a.slots.push_back(std::move(slots));
        a.params.push_back(p);
    }
    for (size_t i = 0; i + 1 < layers.size(); ++i)
        if (!uses[i])
            fail_layer(source, layers[i],
                       "its output is not used by the last layer; only models with one output are supported", false);
    return a;
}

// ------------------------------------------------------------------ passes over the steps

// The lowered steps as a graph that passes rewrite: a dead step is skipped, its
// readers redirected to another value.
struct StepGraph {
    std::vector<Step>& steps;
    std::vector<char> dead;
    int output;

    StepGraph(std::vector<Step>& s, int out) : steps(s), dead(s.size(), 0), output(out) {}

    // Live steps reading v, and whether v is the network's output.
    std::vector<int> readers(int v) const {
        std::vector<int> r;
        for (size_t i = 0; i < steps.size(); ++i)
            if (!dead[i] && std::count(steps[i].inputs.begin(), steps[i].inputs.end(), v)) r.push_back(int(i));
        return r;
    }
    // The one step that reads v, when v has one reader and is not the output; else -1.
    int sole_reader(int v) const {
        if (v < 0 || v == output) return -1;
        const auto r = readers(v);
        return r.size() == 1 && std::count(steps[r[0]].inputs.begin(), steps[r[0]].inputs.end(), v) == 1 ? r[0] : -1;
    }
    void replace(int from, int to) {
        for (size_t i = 0; i < steps.size(); ++i)
            if (!dead[i])
                for (int& v : steps[i].inputs)
                    if (v == from) v = to;
        if (output == from) output = to;
        dead[from] = 1;
    }
    int producer(int i) const { return steps[i].inputs.empty() ? -1 : steps[i].inputs[0]; }
    // Step i done by the step it reads (which now ends where i ended).
    void into_producer(int i) {
        Step& p = steps[producer(i)];
        const std::string &n = p.layers, &add = steps[i].layers;
        // An activation of the same Keras layer (Dense(activation=...)) adds no name.
        if (!(n.size() >= add.size() && n.compare(n.size() - add.size(), add.size(), add) == 0)) p.layers += "+" + add;
        replace(i, producer(i));
    }
    // Step i done by its one reader r (which now starts where i started).
    void into_reader(int i, int r) {
        steps[r].in = steps[i].in;
        steps[r].layers = steps[i].layers + "+" + steps[r].layers;
        replace(i, producer(i));
    }
    // Step i's producer done by step i (which now starts where the producer started).
    void absorb_producer(int i) {
        Step& s = steps[i];
        const Step& p = steps[producer(i)];
        const int gone = producer(i);
        s.in = p.in;
        s.inputs = p.inputs;
        s.layers = p.layers + "+" + s.layers;
        replace(gone, s.inputs[0]);
    }
    // The producer of step i when i is its only reader and it is `op`; else -1.
    int sole_producer(int i, OpKind op) const {
        const int p = producer(i);
        return p >= 0 && steps[p].op == op && sole_reader(p) == i ? p : -1;
    }
};

bool weighted(const Step& s) { return s.op == OpKind::conv2d || s.op == OpKind::dense; }

bool all_zero(const std::vector<float>& v) {
    return std::all_of(v.begin(), v.end(), [](float x) { return x == 0.f; });
}

// The rewrites: each looks at step i and either rewrites the graph around it
// (returning true) or leaves it. Each is exact: the same function of the input.

// ZeroPadding2D before a convolution: zeros either way, the conv pads itself.
bool pad_into_conv(StepGraph& g, int i) {
    const Step& s = g.steps[i];
    if (s.op != OpKind::pad2d || s.pad.top < 0 || s.pad.bottom < 0 || s.pad.left < 0 || s.pad.right < 0) return false;
    const int r = g.sole_reader(i);
    if (r < 0 || g.steps[r].op != OpKind::conv2d) return false;
    Pads& p = g.steps[r].pad;
    p.top += s.pad.top, p.bottom += s.pad.bottom, p.left += s.pad.left, p.right += s.pad.right;
    g.into_reader(i, r);
    return true;
}

// The largest |shift| of an affine (y = x * scale + shift) folded into the conv or
// dense after it. A batch norm's x is near its mean, so x * scale is about -shift =
// mean * gamma / sqrt(var + eps), and a trained batch norm's shift reaches the hundreds
// (tests/models/keras_zoo.py bn_trained). Folded, the conv sums those large terms against the
// bias sum(w * shift), and float32 loses |shift| times what the affine step loses
// unfolded (whose outputs are small). Rescaling and Normalization of pixels stay near 1.
constexpr float kMaxFoldedShift = 1.f;

bool large_shift(const Step& a) {
    return std::any_of(a.shift.begin(), a.shift.end(), [](float v) { return std::abs(v) > kMaxFoldedShift; });
}

// A batch norm (any per-channel affine) after a linear conv or dense: into its
// weights. Per output channel: w[..][o] *= scale[o]; bias[o] = bias[o] * scale[o] + shift[o].
bool affine_into_producer(StepGraph& g, int i) {
    const Step& a = g.steps[i];
    const int p = g.producer(i);
    if (a.op != OpKind::affine || p < 0 || !weighted(g.steps[p]) || !g.steps[p].act.linear() || g.sole_reader(p) != i ||
        g.steps[p].integers)
        return false;
    Step& s = g.steps[p];
    const size_t co = size_t(s.out.c);
    for (size_t k = 0; k < s.weights.size(); ++k) s.weights[k] *= a.scale[k % co];
    // In double: bias * scale and shift nearly cancel when the running mean is large.
    for (size_t o = 0; o < co; ++o) s.bias[o] = float(double(s.bias[o]) * a.scale[o] + a.shift[o]);
    g.into_producer(i);
    return true;
}

// Two affine steps in a row: one.
bool affine_into_affine(StepGraph& g, int i) {
    const Step& s = g.steps[i];
    const int p = s.op == OpKind::affine ? g.sole_producer(i, OpKind::affine) : -1;
    if (p < 0) return false;
    Step& a = g.steps[p];
    for (size_t c = 0; c < s.scale.size(); ++c) {
        a.shift[c] = a.shift[c] * s.scale[c] + s.shift[c];
        a.scale[c] *= s.scale[c];
    }
    g.into_producer(i);
    return true;
}

// An activation after a linear conv or dense: applied by that step.
bool activation_into_producer(StepGraph& g, int i) {
    const Step& s = g.steps[i];
    const int p = g.producer(i);
    if (s.op != OpKind::activation || p < 0 || !weighted(g.steps[p]) || !g.steps[p].act.linear() ||
        g.sole_reader(p) != i)
        return false;
    g.steps[p].act = s.act;
    g.into_producer(i);
    return true;
}

// A Flatten before a dense layer: the dense step reads the spatial tensor (which tells
// an NCHW backend how to order its rows).
bool flatten_into_dense(StepGraph& g, int i) {
    const Step& s = g.steps[i];
    if (s.op != OpKind::dense || s.in.h != 1 || s.in.w != 1 || g.sole_producer(i, OpKind::reshape) < 0) return false;
    g.absorb_producer(i);
    return true;
}

// The permute that puts a tensor in the order Keras flattened it, before a dense
// layer that reads it spatially: the dense rows are reordered once instead.
bool permute_into_dense(StepGraph& g, int i) {
    Step& s = g.steps[i];
    const int p = s.op == OpKind::dense ? g.sole_producer(i, OpKind::permute) : -1;
    if (p < 0 || s.in != g.steps[p].out) return false;
    s.weights = dense_rows_unpermute(s.weights, g.steps[p].in, g.steps[p].perm, s.out.c);
    g.absorb_producer(i);
    return true;
}

// A per-channel affine (Rescaling, Normalization, a batch norm) right before a conv
// or dense: into its weights, where exact (a padded conv would see the shifted value
// of its zero padding) and as precise (kMaxFoldedShift). Per input channel:
// w *= scale, bias += sum(w * shift).
bool affine_into_reader(StepGraph& g, int i) {
    const Step& a = g.steps[i];
    const int r = a.op == OpKind::affine ? g.sole_reader(i) : -1;
    if (r < 0 || g.steps[r].inputs.size() != 1 || g.steps[r].integers) return false;
    Step& s = g.steps[r];
    const bool exact =
        s.op == OpKind::dense || (s.op == OpKind::conv2d && s.groups == 1 && (!s.pad.any() || all_zero(a.shift)));
    if (!exact || s.in != a.out) return false;
    if (large_shift(a)) return false;
    const size_t co = size_t(s.out.c), ci = size_t(a.out.c), rows = s.weights.size() / co;
    std::vector<double> bias(s.bias.begin(), s.bias.end());
    for (size_t k = 0; k < rows; ++k)
        for (size_t o = 0; o < co; ++o) {
            float& w = s.weights[k * co + o];
            bias[o] += double(w) * a.shift[k % ci];
            w *= a.scale[k % ci];
        }
    for (size_t o = 0; o < co; ++o) s.bias[o] = float(bias[o]);
    g.into_reader(i, r);
    return true;
}

// A reshape that changes nothing, or one right after another.
bool merge_reshapes(StepGraph& g, int i) {
    const Step& s = g.steps[i];
    if (s.op != OpKind::reshape) return false;
    if (s.in == s.out) {
        g.replace(i, g.producer(i));
        return true;
    }
    if (g.sole_producer(i, OpKind::reshape) < 0) return false;
    g.absorb_producer(i);
    return true;
}

constexpr bool (*kRewrites[])(StepGraph&, int) = {
    pad_into_conv,      affine_into_producer, affine_into_affine, activation_into_producer,
    flatten_into_dense, permute_into_dense,   affine_into_reader, merge_reshapes,
};

// One round of every rewrite over the live steps; returns whether anything changed.
bool rewrite(StepGraph& g) {
    bool changed = false;
    for (int i = 0; i < int(g.steps.size()); ++i)
        for (auto rule : kRewrites)
            if (!g.dead[i] && rule(g, i)) {
                changed = true;
                break;
            }
    return changed;
}

}  // namespace

std::vector<std::vector<WeightSlot>> Network::expected_weights(const std::vector<LayerSpec>& layers,
                                                               const std::vector<int64_t>& input,
                                                               const std::string& source) {
    return analyze(layers, input, source, false).slots;
}

namespace {

ImageShape image_of(const std::vector<LayerSpec>& layers, const std::vector<int64_t>& shape, bool channels_first) {
    if (shape.size() == 3)
        return channels_first ? ImageShape{shape[1], shape[2], shape[0], true}
                              : ImageShape{shape[0], shape[1], shape[2]};
    if (shape.size() == 2) return {shape[0], shape[1], 1};
    if (shape.size() != 1) return {};
    // A flat input its first layer reshapes into an image (a Keras Reshape of a flat MNIST vector).
    for (const LayerSpec& l : layers) {
        if (l.inputs != std::vector<int>{-1}) continue;
        const auto& t = l.target_shape;
        const bool image =
            l.kind == "reshape" && (t.size() == 2 || t.size() == 3) && std::find(t.begin(), t.end(), -1) == t.end();
        if (image && t.size() == 2) return {t[0], t[1], 1};
        if (image) return channels_first ? ImageShape{t[1], t[2], t[0], true} : ImageShape{t[0], t[1], t[2]};
        break;
    }
    const auto side = int64_t(std::lround(std::sqrt(double(shape[0]))));
    if (side * side == shape[0]) return {side, side, 1};
    return {};
}

}  // namespace

Network::Network(std::vector<LayerSpec> layers, const std::vector<int64_t>& input, std::string source)
    : source_(std::move(source)) {
    const Analysis a = analyze(layers, input, source_, true);
    input_ = a.input;
    output_ = a.shapes.back();
    input_shape_ = input_.keras();
    output_shape_ = output_.keras();
    channels_first_ = a.channels_first;
    image_ = image_of(layers, input_shape_, channels_first_);

    // Lower every layer; value_of[i]: the step whose output is layer i's.
    std::vector<int> value_of(layers.size(), -1);
    for (size_t i = 0; i < layers.size(); ++i) {
        const LayerSpec& l = layers[i];
        std::vector<Shape> in;
        Lowering low{steps_, {}, {}};
        for (int j : l.inputs) {
            in.push_back(j < 0 ? a.input : a.shapes[j]);
            low.inputs.push_back(j < 0 ? -1 : value_of[j]);
            low.dims.push_back(in.back().d);
        }
        const LayerContext c{l, in, a.channels_first, source_};
        find_layer_rule(l.kind)->lower(c, a.shapes[i], low);
        value_of[i] = low.result;
        summary_.push_back({l.name, l.keras_class, a.shapes[i], a.params[i]});
    }
    // The weights now live in the steps.
    layers.clear();

    StepGraph g(steps_, value_of.back());
    while (rewrite(g)) {}
    if (g.output < 0) throw UnsupportedModelError(source_ + ": the model computes nothing (its output is its input)");

    // Drop the dead steps, renumbering the inputs.
    std::vector<int> index(steps_.size(), -1);
    std::vector<Step> live;
    for (size_t i = 0; i < steps_.size(); ++i) {
        if (g.dead[i]) continue;
        Step s = std::move(steps_[i]);
        for (int& v : s.inputs) v = v < 0 ? -1 : index[v];
        s.ins.clear();
        for (int v : s.inputs) s.ins.push_back(v < 0 ? input_.d : live[v].out);
        s.in = s.ins.at(0);
        if (s.op != OpKind::merge && s.op != OpKind::concat && s.op != OpKind::dequantize) s.ins.clear();
        index[i] = int(live.size());
        live.push_back(std::move(s));
    }
    const int out = index[g.output];
    steps_ = std::move(live);
    // The output is the last step's (everything before it feeds it).
    if (out != int(steps_.size()) - 1 || steps_.back().out != output_.d)
        throw Error(source_ + ": internal error: the lowered network does not end in its output");

    const Step& last = steps_.back();
    if (last.op == OpKind::softmax)
        output_kind_ = last.log ? OutputKind::log_softmax : OutputKind::softmax;
    else if ((weighted(last) || last.op == OpKind::activation) && last.act.kind == Act::sigmoid)
        output_kind_ = OutputKind::sigmoid;
}

int64_t Network::params() const {
    int64_t n = 0;
    for (const auto& l : summary_) n += l.params;
    return n;
}

int64_t Network::macs() const {
    int64_t n = 0;
    for (const Step& s : steps_) {
        if (s.op == OpKind::conv2d) n += s.out.size() * s.kh * s.kw * (s.in.c / s.groups);
        if (s.op == OpKind::dense) n += s.in.size() * s.out.c;
    }
    return n;
}

}  // namespace lenet
