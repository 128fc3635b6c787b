#include "network.h"

#include <algorithm>
#include <sstream>

#include "errors.h"
#include "layout.h"

namespace lenet {

const char* to_string(LayerKind k) {
    switch (k) {
        case LayerKind::conv2d: return "conv2d";
        case LayerKind::max_pool2d: return "max_pool2d";
        case LayerKind::avg_pool2d: return "avg_pool2d";
        case LayerKind::zero_pad2d: return "zero_pad2d";
        case LayerKind::flatten: return "flatten";
        case LayerKind::dense: return "dense";
        case LayerKind::activation: return "activation";
        case LayerKind::rescaling: return "rescaling";
    }
    return "?";
}

const char* to_string(Act a) {
    switch (a) {
        case Act::linear: return "linear";
        case Act::relu: return "relu";
        case Act::tanh: return "tanh";
        case Act::sigmoid: return "sigmoid";
        case Act::softmax: return "softmax";
    }
    return "?";
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
        case OpKind::softmax: return "softmax";
    }
    return "?";
}

SamePadding same_padding(int in, int kernel, int stride) {
    const int out = (in + stride - 1) / stride;
    const int total = std::max((out - 1) * stride + kernel - in, 0);
    return {out, total / 2, total - total / 2};
}

namespace {

Step make_step(OpKind op, Dims in, Dims out) {
    Step s;
    s.op = op, s.in = in, s.out = out;
    return s;
}

// Bounds that keep a hostile or broken config from asking for absurd memory:
// LeNet-sized models sit orders of magnitude below them.
constexpr int kMaxExtent = 1 << 16;          // any kernel, stride, dimension or channel count
constexpr int64_t kMaxTensor = int64_t(1) << 28;  // floats per image in one activation

std::string dims_str(Dims d, bool flat) {
    std::ostringstream s;
    if (flat)
        s << "(" << d.size() << ")";
    else
        s << "(" << d.h << ", " << d.w << ", " << d.c << ")";
    return s.str();
}

std::string shape_str(const std::vector<int64_t>& shape) {
    std::ostringstream s;
    s << "(";
    for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    s << (shape.size() == 1 ? ",)" : ")");
    return s.str();
}

class Builder {
public:
    Builder(const std::string& source) : source_(source) {}

    [[noreturn]] void fail_file(const LayerSpec& l, const std::string& what) const {
        throw ModelFileError(source_ + ": layer '" + l.name + "' (" + l.keras_class + "): " + what);
    }
    [[noreturn]] void fail_unsupported(const LayerSpec& l, const std::string& what) const {
        throw UnsupportedModelError(source_ + ": layer '" + l.name + "' (" + l.keras_class + "): " + what);
    }

    void check_extent(const LayerSpec& l, const char* what, int v) const {
        if (v < 1 || v > kMaxExtent)
            fail_file(l, std::string(what) + " = " + std::to_string(v) + " is out of range [1, " +
                             std::to_string(kMaxExtent) + "]");
    }

    void check_dims(const LayerSpec& l, Dims d) const {
        if (d.h < 1 || d.w < 1 || d.c < 1)
            fail_file(l, "output shape " + dims_str(d, false) + " is empty");
        if (d.size() > kMaxTensor) fail_file(l, "output shape " + dims_str(d, false) + " is too large");
    }

    void check_shape(const LayerSpec& l, const char* what, const std::vector<int64_t>& found,
                     const std::vector<int64_t>& expected, size_t count) const {
        if (found != expected)
            fail_file(l, std::string(what) + " has shape " + shape_str(found) + ", expected " + shape_str(expected));
        int64_t n = 1;
        for (auto v : found) n *= v;
        if (size_t(n) != count)
            fail_file(l, std::string(what) + " holds " + std::to_string(count) + " values for shape " +
                             shape_str(found));
    }

    std::vector<float> bias_of(const LayerSpec& l, int n) const {
        if (l.bias.empty() && l.bias_shape.empty()) return std::vector<float>(n, 0.f);
        check_shape(l, "bias", l.bias_shape, {n}, l.bias.size());
        return l.bias;
    }

    const std::string& source_;
};

}  // namespace

Network::Network(const std::vector<LayerSpec>& layers, Dims input, DataFormat format, std::string source,
                 bool classifier)
    : input_(input), format_(format), source_(std::move(source)) {
    Builder b(source_);
    if (input.h < 1 || input.w < 1 || input.c < 1 || input.h > kMaxExtent || input.w > kMaxExtent ||
        input.c > kMaxExtent || input.size() > kMaxTensor)
        throw ModelFileError(source_ + ": input shape " + dims_str(input, false) + " is out of range");

    Dims cur = input;
    bool flat = false;
    Pads pending_zero_pad;            // a ZeroPadding2D waiting to be folded into the next conv
    std::string pending_zero_pad_name;
    // The shape a Flatten saw and its row order, until the Dense that reads it.
    bool flattened = false;
    Dims flattened_dims;
    FlattenOrder flattened_order = FlattenOrder::hwc;

    // Fuse an activation into the step that produced its input when that step has none.
    auto emit_activation = [&](Act act, const std::string& name) {
        if (act == Act::linear) return;
        if (act == Act::softmax) {
            steps_.push_back(make_step(OpKind::softmax, cur, cur));
        } else if (!steps_.empty() && (steps_.back().op == OpKind::conv2d || steps_.back().op == OpKind::dense) &&
                   steps_.back().act == Act::linear && steps_.back().out == cur) {
            steps_.back().act = act;
            if (name != steps_.back().layers) steps_.back().layers += "+" + name;  // a separate Activation layer
            return;
        } else {
            Step s = make_step(OpKind::activation, cur, cur);
            s.act = act;
            steps_.push_back(std::move(s));
        }
        steps_.back().layers = name;
    };

    for (size_t i = 0; i < layers.size(); ++i) {
        const LayerSpec& l = layers[i];
        const bool spatial_op = l.kind == LayerKind::conv2d || l.kind == LayerKind::max_pool2d ||
                                l.kind == LayerKind::avg_pool2d || l.kind == LayerKind::zero_pad2d ||
                                l.kind == LayerKind::flatten;
        if (spatial_op && flat) b.fail_unsupported(l, "needs an image-shaped input, got a flat vector");
        if (l.kind != LayerKind::dense && l.kind != LayerKind::conv2d && (!l.weights.empty() || !l.bias.empty()))
            b.fail_file(l, "has weights, but a " + std::string(to_string(l.kind)) + " layer takes none");
        int64_t params = 0;

        switch (l.kind) {
            case LayerKind::conv2d: {
                b.check_extent(l, "kernel height", l.kernel[0]);
                b.check_extent(l, "kernel width", l.kernel[1]);
                b.check_extent(l, "stride", l.strides[0]);
                b.check_extent(l, "stride", l.strides[1]);
                b.check_extent(l, "filters", l.filters);
                const int ph = cur.h + pending_zero_pad.top + pending_zero_pad.bottom;
                const int pw = cur.w + pending_zero_pad.left + pending_zero_pad.right;
                Step s = make_step(OpKind::conv2d, cur, Dims{0, 0, l.filters});
                s.kh = l.kernel[0], s.kw = l.kernel[1], s.sh = l.strides[0], s.sw = l.strides[1];
                s.pad = pending_zero_pad;
                if (l.same_padding) {
                    auto y = same_padding(ph, s.kh, s.sh), x = same_padding(pw, s.kw, s.sw);
                    s.out.h = y.out, s.out.w = x.out;
                    s.pad.top += y.before, s.pad.bottom += y.after, s.pad.left += x.before, s.pad.right += x.after;
                } else {
                    if (ph < s.kh || pw < s.kw)
                        b.fail_file(l, "kernel " + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
                                           " is larger than its input " + dims_str(cur, false));
                    s.out.h = (ph - s.kh) / s.sh + 1, s.out.w = (pw - s.kw) / s.sw + 1;
                }
                b.check_dims(l, s.out);
                b.check_shape(l, "kernel", l.weights_shape, {s.kh, s.kw, cur.c, l.filters}, l.weights.size());
                s.weights = l.weights;
                s.bias = b.bias_of(l, l.filters);
                s.layers = pending_zero_pad_name.empty() ? l.name : pending_zero_pad_name + "+" + l.name;
                params = int64_t(l.weights.size() + l.bias.size());
                cur = s.out;
                steps_.push_back(std::move(s));
                pending_zero_pad = {};
                pending_zero_pad_name.clear();
                emit_activation(l.activation, l.name);
                break;
            }
            case LayerKind::max_pool2d:
            case LayerKind::avg_pool2d: {
                b.check_extent(l, "pool height", l.kernel[0]);
                b.check_extent(l, "pool width", l.kernel[1]);
                b.check_extent(l, "stride", l.strides[0]);
                b.check_extent(l, "stride", l.strides[1]);
                Step s = make_step(l.kind == LayerKind::max_pool2d ? OpKind::max_pool2d : OpKind::avg_pool2d, cur,
                       Dims{0, 0, cur.c});
                s.kh = l.kernel[0], s.kw = l.kernel[1], s.sh = l.strides[0], s.sw = l.strides[1];
                if (l.same_padding) {
                    auto y = same_padding(cur.h, s.kh, s.sh), x = same_padding(cur.w, s.kw, s.sw);
                    s.out.h = y.out, s.out.w = x.out;
                    s.pad = {y.before, y.after, x.before, x.after};
                } else {
                    if (cur.h < s.kh || cur.w < s.kw)
                        b.fail_file(l, "pool " + std::to_string(s.kh) + "x" + std::to_string(s.kw) +
                                           " is larger than its input " + dims_str(cur, false));
                    s.out.h = (cur.h - s.kh) / s.sh + 1, s.out.w = (cur.w - s.kw) / s.sw + 1;
                }
                b.check_dims(l, s.out);
                s.layers = l.name;
                cur = s.out;
                steps_.push_back(std::move(s));
                break;
            }
            case LayerKind::zero_pad2d: {
                for (int p : l.pad)
                    if (p < 0 || p > kMaxExtent) b.fail_file(l, "padding " + std::to_string(p) + " is out of range");
                const Pads p{l.pad[0], l.pad[1], l.pad[2], l.pad[3]};
                Dims out{cur.h + p.top + p.bottom, cur.w + p.left + p.right, cur.c};
                b.check_dims(l, out);
                const bool next_is_conv = i + 1 < layers.size() && layers[i + 1].kind == LayerKind::conv2d;
                if (next_is_conv) {
                    // Zeros either way: the conv pads its input with them itself.
                    pending_zero_pad.top += p.top, pending_zero_pad.bottom += p.bottom;
                    pending_zero_pad.left += p.left, pending_zero_pad.right += p.right;
                    pending_zero_pad_name += (pending_zero_pad_name.empty() ? "" : "+") + l.name;
                    summary_.push_back({l.name, l.keras_class, out, false, 0});
                    // The conv reads the unpadded tensor: keep `cur` as it is.
                    continue;
                }
                Step s = make_step(OpKind::pad2d, cur, out);
                s.pad = p;
                s.layers = l.name;
                cur = out;
                steps_.push_back(std::move(s));
                break;
            }
            case LayerKind::flatten:
                flattened = true, flattened_dims = cur, flattened_order = l.flatten_order;
                cur = Dims{1, 1, int(cur.size())};
                flat = true;
                break;
            case LayerKind::dense: {
                if (!flat) b.fail_unsupported(l, "Dense on an image-shaped input " + dims_str(cur, false) +
                                                     " (add a Flatten before it)");
                b.check_extent(l, "units", l.units);
                const int in = cur.c;
                b.check_shape(l, "kernel", l.weights_shape, {in, l.units}, l.weights.size());
                Step s = make_step(OpKind::dense, cur, Dims{1, 1, l.units});
                s.weights = l.weights;
                if (flattened) {
                    s.in = flattened_dims;
                    if (flattened_order == FlattenOrder::chw)
                        s.weights = dense_rows_chw_to_hwc(s.weights, s.in, l.units);
                    flattened = false;
                }
                s.bias = b.bias_of(l, l.units);
                s.layers = l.name;
                params = int64_t(l.weights.size() + l.bias.size());
                cur = s.out;
                steps_.push_back(std::move(s));
                emit_activation(l.activation, l.name);
                break;
            }
            case LayerKind::activation:
                emit_activation(l.activation, l.name);
                break;
            case LayerKind::rescaling: {
                Step s = make_step(OpKind::affine, cur, cur);
                s.scale = l.scale, s.offset = l.offset;
                s.layers = l.name;
                steps_.push_back(std::move(s));
                break;
            }
        }
        summary_.push_back({l.name, l.keras_class, cur, flat, params});
    }

    classes_ = int(cur.size());
    if (steps_.empty())
        throw UnsupportedModelError(source_ + ": the model computes nothing (no layer with an operation)");
    if (!classifier) return;
    const std::string output = source_ + ": the model's output ";
    if (!flat)
        throw UnsupportedModelError(output + "is image-shaped " + dims_str(cur, false) +
                                    "; lenet runs classifiers that end in a vector of class scores");
    if (steps_.empty() || steps_.back().op != OpKind::softmax) {
        const Act last = steps_.empty() ? Act::linear : steps_.back().act;
        if (last != Act::linear)
            throw UnsupportedModelError(output + "activation is " + std::string(to_string(last)) +
                                        "; lenet runs classifiers that end in softmax or in logits");
        steps_.push_back(make_step(OpKind::softmax, cur, cur));
        steps_.back().layers = "(softmax over logits)";
        softmax_appended_ = true;
    }
}

int64_t Network::params() const {
    int64_t n = 0;
    for (const auto& l : summary_) n += l.params;
    return n;
}

int64_t Network::macs() const {
    int64_t n = 0;
    for (const Step& s : steps_) {
        if (s.op == OpKind::conv2d) n += s.out.size() * s.kh * s.kw * s.in.c;
        if (s.op == OpKind::dense) n += s.in.size() * s.out.c;
    }
    return n;
}

}  // namespace lenet
