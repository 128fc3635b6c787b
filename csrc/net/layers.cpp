// The layer table (layer_table.h): for each layer kind, its shape rule, its
// weights and its naive lowering to Steps. Adding a layer is a row here, a
// kernel per backend (or a lowering onto existing steps) and a row in the tests.
#include <algorithm>
#include <cmath>

#include "../support/errors.h"
#include "layer_table.h"
#include "limits.h"

namespace lenet {

// ------------------------------------------------------------------ context

void LayerContext::fail_file(const std::string& what) const {
    throw ModelFileError(source + ": layer '" + l.name + "' (" + l.keras_class + "): " + what);
}

void LayerContext::fail_unsupported(const std::string& what) const {
    throw UnsupportedModelError(source + ": layer '" + l.name + "' (" + l.keras_class + "): " + what);
}

void LayerContext::check_range(const char* what, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi)
        fail_file(std::string(what) + " = " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
}

bool LayerContext::one_d() const { return l.kind.size() > 2 && l.kind.compare(l.kind.size() - 2, 2, "1d") == 0; }

bool LayerContext::is(const char* prefix) const { return l.kind.rfind(prefix, 0) == 0; }

const Shape& LayerContext::image_input() const {
    if (one_d()) {
        if (in.at(0).rank != 2) fail_unsupported("needs a (steps, channels) input, got " + in[0].str());
    } else if (in.at(0).rank != 3) {
        fail_unsupported("needs an image input (height, width, channels), got " + in[0].str());
    }
    return in[0];
}

Shape LayerContext::make(int rank, Dims d) const { return Shape{rank, d, rank == 3 && channels_first}; }

namespace {

// For each Keras axis of `s` (batch excluded, outermost first), its canonical axis.
std::vector<int> keras_axes(const Shape& s) {
    if (s.rank == 1) return {2};
    if (s.rank == 2) return {1, 2};
    return s.chw ? std::vector<int>{2, 0, 1} : std::vector<int>{0, 1, 2};
}

int64_t extent(Dims d, int axis) { return axis == 0 ? d.h : axis == 1 ? d.w : d.c; }

}  // namespace

int LayerContext::canonical_axis(const Shape& s, int keras_axis, const char* what) const {
    const int a = keras_axis < 0 ? keras_axis + s.rank + 1 : keras_axis;
    if (a == 0) fail_unsupported(std::string(what) + " " + std::to_string(keras_axis) + " is the batch axis");
    if (a < 1 || a > s.rank)
        fail_file(std::string(what) + " " + std::to_string(keras_axis) + " is not an axis of a tensor of shape " +
                  s.str() + " (the batch axis 0 excluded)");
    return keras_axes(s)[a - 1];
}

const Tensor& LayerContext::weight(const char* name) const {
    const Tensor* t = l.weight(name);
    if (!t) fail_file(std::string("weight '") + name + "' is missing");
    return *t;
}

int Lowering::emit(Step s, int from) {
    if (s.inputs.empty()) s.inputs = {from};
    s.in = dims_of(s.inputs[0]);
    steps.push_back(std::move(s));
    return int(steps.size()) - 1;
}

Dims Lowering::dims_of(int value) const {
    if (value >= 0) return steps.at(value).out;
    for (size_t i = 0; i < inputs.size(); ++i)
        if (inputs[i] == value) return dims[i];
    return dims.at(0);
}

Activation activation_of(const LayerContext& c) {
    const LayerSpec& l = c.l;
    Activation a;
    bool found = false;
#define LENET_MATCH(n, monotonic) \
    if (l.activation == #n) {     \
        a.kind = Act::n;          \
        found = true;             \
    }
    LENET_ACTIVATIONS(LENET_MATCH)
#undef LENET_MATCH
    if (!found) {
        std::string known;
#define LENET_NAME(n, monotonic) known += std::string(known.empty() ? "" : ", ") + #n;
        LENET_ACTIVATIONS(LENET_NAME)
#undef LENET_NAME
        c.fail_unsupported("activation '" + l.activation + "' is not supported (supported: " + known +
                           ", softmax, log_softmax)");
    }
    bool bad = false;
#define LENET_COPY_PARAM(type, field, init, doc) \
    a.field = l.field;                           \
    bad |= std::isnan(a.field) || (std::isinf(a.field) && !std::isinf(type(init)));
    LENET_ACTIVATION_PARAMS(LENET_COPY_PARAM)
#undef LENET_COPY_PARAM
    if (bad) c.fail_file("activation parameters must be finite numbers (a relu's max_value may be infinite)");
    if (a.kind == Act::relu && (a.max_value < 0.f || a.threshold < 0.f))
        c.fail_file("relu max_value and threshold must not be negative");
    return a;
}

namespace {

// ------------------------------------------------------------------ helpers

Step make_step(OpKind op, Dims out, const LayerSpec& l) {
    Step s;
    s.op = op, s.out = out, s.layers = l.name;
    return s;
}

// Softmax over a Keras axis, which must be the canonical channel axis.
void check_softmax_axis(const LayerContext& c, const Shape& s) {
    const int keras = c.l.axes.empty() ? -1 : c.l.axes[0];
    if (c.l.axes.size() > 1)
        c.fail_unsupported("softmax over several axes " + tuple_str(c.l.axes) + " is not supported");
    if (c.canonical_axis(s, keras, "softmax axis") != 2)
        c.fail_unsupported("softmax over axis " + std::to_string(keras) + " of " + s.str() +
                           " is not supported (only over the channel axis)");
}

// The layer's activation field, applied to `value`: nothing for linear, a softmax
// step for softmax, else an activation step (fused into its producer later).
void emit_activation(const LayerContext& c, const Shape& out, Lowering& low, int value) {
    low.result = value;
    if (c.l.activation == "linear" || c.l.activation.empty()) return;
    if (c.l.activation == "softmax" || c.l.activation == "log_softmax") {
        check_softmax_axis(c, out);
        Step s = make_step(OpKind::softmax, out.d, c.l);
        s.log = c.l.activation == "log_softmax";
        low.result = low.emit(std::move(s), value);
        return;
    }
    Step s = make_step(OpKind::activation, out.d, c.l);
    s.act = activation_of(c);
    low.result = low.emit(std::move(s), value);
}

std::vector<float> bias_or_zeros(const LayerContext& c, int n) {
    if (const Tensor* b = c.l.weight("bias")) return b->data;
    return std::vector<float>(n, 0.f);
}

// The value `value` (dims d, Keras axes `order` outermost first: canonical axes)
// rearranged so that its canonical memory is in that order: a permute step unless
// the order already is the canonical one (size-1 axes do not count).
int emit_in_order(Lowering& low, const LayerSpec& l, int value, Dims d, std::vector<int> order) {
    // Prepend the axes the order lacks (size 1: rank < 3).
    std::vector<int> full;
    for (int a = 0; a < 3; ++a)
        if (std::find(order.begin(), order.end(), a) == order.end()) full.push_back(a);
    full.insert(full.end(), order.begin(), order.end());
    int last = -1;
    bool trivial = true;
    for (int a : full) {
        if (extent(d, a) == 1) continue;
        trivial = trivial && a > last;
        last = a;
    }
    if (trivial) return value;
    Step s =
        make_step(OpKind::permute, Dims{int(extent(d, full[0])), int(extent(d, full[1])), int(extent(d, full[2]))}, l);
    s.perm = {full[0], full[1], full[2]};
    return low.emit(std::move(s), value);
}

int emit_reshape(Lowering& low, const LayerSpec& l, int value, Dims out) {
    if (low.dims_of(value) == out) return value;
    return low.emit(make_step(OpKind::reshape, out, l), value);
}

// A canonical Shape from a Keras per-sample shape of rank 1-3.
Shape from_keras(const LayerContext& c, const std::vector<int64_t>& k) {
    Dims d;
    if (k.size() == 1) d = {1, 1, int(k[0])};
    if (k.size() == 2) d = {1, int(k[0]), int(k[1])};
    if (k.size() == 3)
        d = c.channels_first ? Dims{int(k[1]), int(k[2]), int(k[0])} : Dims{int(k[0]), int(k[1]), int(k[2])};
    return c.make(int(k.size()), d);
}

// ------------------------------------------------------------------ convolution

struct Window {
    int kh, kw, sh, sw, dh, dw;
};

Window check_window(const LayerContext& c, bool dilated) {
    const LayerSpec& l = c.l;
    c.check_range("kernel height", l.kernel[0], 1, limits::kKernel);
    c.check_range("kernel width", l.kernel[1], 1, limits::kKernel);
    c.check_range("stride", l.strides[0], 1, limits::kStride);
    c.check_range("stride", l.strides[1], 1, limits::kStride);
    if (dilated) {
        c.check_range("dilation", l.dilation[0], 1, limits::kDilation);
        c.check_range("dilation", l.dilation[1], 1, limits::kDilation);
    }
    return {
        l.kernel[0], l.kernel[1], l.strides[0], l.strides[1], dilated ? l.dilation[0] : 1, dilated ? l.dilation[1] : 1};
}

// Output height/width of a window over an image, and its 'same' pads.
Dims window_out(const LayerContext& c, Dims in, const Window& w, int channels, Pads* pads) {
    const int eh = (w.kh - 1) * w.dh + 1, ew = (w.kw - 1) * w.dw + 1;
    Dims out{0, 0, channels};
    *pads = {};
    if (c.l.same_padding) {
        const auto y = same_padding(in.h, eh, w.sh), x = same_padding(in.w, ew, w.sw);
        out.h = y.out, out.w = x.out;
        *pads = {y.before, y.after, x.before, x.after};
    } else {
        if (in.h < eh || in.w < ew)
            c.fail_file("window " + std::to_string(eh) + "x" + std::to_string(ew) + " is larger than its input " +
                        c.in[0].str());
        out.h = (in.h - eh) / w.sh + 1, out.w = (in.w - ew) / w.sw + 1;
    }
    return out;
}

Shape conv2d_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const Shape& x = c.image_input();
    const LayerSpec& l = c.l;
    const Window w = check_window(c, true);
    c.check_range("filters", l.filters, 1, limits::kChannels);
    c.check_range("groups", l.groups, 1, limits::kChannels);
    if (x.d.c % l.groups || l.filters % l.groups)
        c.fail_file("groups = " + std::to_string(l.groups) + " does not divide the input channels (" +
                    std::to_string(x.d.c) + ") and filters (" + std::to_string(l.filters) + ")");
    Pads p;
    const Dims out = window_out(c, x.d, w, l.filters, &p);
    // A 1-D convolution is a 2-D one of height 1: its (k, in, out) kernel is the HWIO (1, k, in, out).
    if (c.one_d())
        slots.push_back({"kernel", {w.kw, x.d.c / l.groups, l.filters}});
    else
        slots.push_back({"kernel", {w.kh, w.kw, x.d.c / l.groups, l.filters}});
    if (l.use_bias) slots.push_back({"bias", {l.filters}});
    return c.make(x.rank, out);
}

Step conv_step(const LayerContext& c, Dims in, Dims out, const Window& w, int groups) {
    Step s = make_step(OpKind::conv2d, out, c.l);
    s.kh = w.kh, s.kw = w.kw, s.sh = w.sh, s.sw = w.sw, s.dh = w.dh, s.dw = w.dw, s.groups = groups;
    window_out(c, in, w, out.c, &s.pad);
    return s;
}

void conv2d_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = conv_step(c, c.in[0].d, out.d, check_window(c, true), c.l.groups);
    s.weights = c.weight("kernel").data;
    s.bias = bias_or_zeros(c, out.d.c);
    s.integers = c.l.integers;
    emit_activation(c, out, low, low.emit(std::move(s)));
}

Shape depthwise_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const Shape& x = c.image_input();
    const LayerSpec& l = c.l;
    const Window w = check_window(c, true);
    c.check_range("depth_multiplier", l.depth_multiplier, 1, limits::kChannels);
    const int64_t channels = int64_t(x.d.c) * l.depth_multiplier;
    c.check_range("output channels", channels, 1, limits::kChannels);
    Pads p;
    const Dims out = window_out(c, x.d, w, int(channels), &p);
    slots.push_back({"depthwise_kernel", {w.kh, w.kw, x.d.c, l.depth_multiplier}});
    if (c.l.kind == "separable_conv2d") {
        c.check_range("filters", l.filters, 1, limits::kChannels);
        slots.push_back({"pointwise_kernel", {1, 1, channels, l.filters}});
        if (l.use_bias) slots.push_back({"bias", {l.filters}});
        return c.make(3, Dims{out.h, out.w, l.filters});
    }
    if (l.use_bias) slots.push_back({"bias", {channels}});
    return c.make(3, out);
}

// A depthwise kernel (kh, kw, c, m) is already the grouped HWIO kernel (kh, kw, 1, c * m)
// of a convolution with c groups: output channel i * m + j reads input channel i.
void depthwise_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Dims in = c.in[0].d;
    const bool separable = c.l.kind == "separable_conv2d";
    const Dims mid{out.d.h, out.d.w, in.c * c.l.depth_multiplier};
    Step s = conv_step(c, in, mid, check_window(c, true), in.c);
    s.weights = c.weight("depthwise_kernel").data;
    s.bias = separable ? std::vector<float>(mid.c, 0.f) : bias_or_zeros(c, mid.c);
    int v = low.emit(std::move(s));
    if (separable) {
        Step p = make_step(OpKind::conv2d, out.d, c.l);
        p.weights = c.weight("pointwise_kernel").data;
        p.bias = bias_or_zeros(c, out.d.c);
        v = low.emit(std::move(p), v);
    }
    emit_activation(c, out, low, v);
}

// ------------------------------------------------------------------ dense

// Dense acts on the last Keras axis: the canonical channel axis, unless the tensor
// is a channels_first image.
Shape dense_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const Shape& x = c.in[0];
    if (x.chw)
        c.fail_unsupported("Dense on a channels_first image " + x.str() +
                           " (it acts on the width axis) is not supported; add a Flatten before it");
    c.check_range("units", c.l.units, 1, limits::kUnits);
    slots.push_back({"kernel", {x.d.c, c.l.units}});
    if (c.l.use_bias) slots.push_back({"bias", {c.l.units}});
    Shape out = x;
    out.d.c = c.l.units;
    return out;
}

// On a flat vector a dense step; on an image (or a Keras (a, b) tensor) a 1x1
// convolution, whose HWIO kernel (1, 1, in, out) is the dense kernel as stored.
void dense_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(c.in[0].rank == 1 ? OpKind::dense : OpKind::conv2d, out.d, c.l);
    s.weights = c.weight("kernel").data;
    s.bias = bias_or_zeros(c, out.d.c);
    s.integers = c.l.integers;
    emit_activation(c, out, low, low.emit(std::move(s)));
}

// ------------------------------------------------------------------ pooling, padding

// A pooling's output and pads: 'same' or none (window_out), or the record's explicit
// pads (ONNX's pads, and the partial windows of its ceil_mode as pads after): pixels
// absent from the windows, which max pooling ignores and average pooling does not
// count. Every window must hold a real pixel.
Dims pool_out(const LayerContext& c, Dims in, const Window& w, Pads* pads) {
    const Int4& p = c.l.pad;
    if (c.l.same_padding || !(p[0] || p[1] || p[2] || p[3])) return window_out(c, in, w, in.c, pads);
    c.check_range("pool pad top", p[0], 0, w.kh - 1);
    c.check_range("pool pad bottom", p[1], 0, w.kh - 1 + w.sh - 1);
    c.check_range("pool pad left", p[2], 0, w.kw - 1);
    c.check_range("pool pad right", p[3], 0, w.kw - 1 + w.sw - 1);
    *pads = {p[0], p[1], p[2], p[3]};
    const int h = in.h + p[0] + p[1], wd = in.w + p[2] + p[3];
    if (h < w.kh || wd < w.kw)
        c.fail_file("window " + std::to_string(w.kh) + "x" + std::to_string(w.kw) +
                    " is larger than its padded input " + c.in[0].str());
    const Dims out{(h - w.kh) / w.sh + 1, (wd - w.kw) / w.sw + 1, in.c};
    if ((out.h - 1) * w.sh - p[0] >= in.h || (out.w - 1) * w.sw - p[2] >= in.w)
        c.fail_file("pads " + tuple_str(std::vector<int>(p.begin(), p.end())) + " leave a window without a real pixel");
    return out;
}

Shape pool_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const Shape& x = c.image_input();
    Pads p;
    return c.make(x.rank, pool_out(c, x.d, check_window(c, false), &p));
}

void pool_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Window w = check_window(c, false);
    Step s = make_step(c.is("max_pool") ? OpKind::max_pool2d : OpKind::avg_pool2d, out.d, c.l);
    s.kh = w.kh, s.kw = w.kw, s.sh = w.sh, s.sw = w.sw;
    pool_out(c, c.in[0].d, w, &s.pad);
    low.result = low.emit(std::move(s));
}

Shape global_pool_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const Shape& x = c.image_input();
    return c.make(c.l.keepdims ? x.rank : 1, Dims{1, 1, x.d.c});
}

void global_pool_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Dims in = c.in[0].d;
    Step s = make_step(c.is("global_max") ? OpKind::max_pool2d : OpKind::avg_pool2d, out.d, c.l);
    s.kh = in.h, s.kw = in.w;
    c.check_range("pool height", in.h, 1, limits::kDim);
    c.check_range("pool width", in.w, 1, limits::kDim);
    low.result = low.emit(std::move(s));
}

Shape pad_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const Shape& x = c.image_input();
    const auto& p = c.l.pad;
    for (int v : p) c.check_range(c.is("crop") ? "cropping" : "padding", v, 0, limits::kPad);
    if (c.one_d() && (p[0] || p[1])) c.fail_file("a 1-D padding or cropping with a height");
    const int sign = c.is("crop") ? -1 : 1;
    const Dims out{x.d.h + sign * (p[0] + p[1]), x.d.w + sign * (p[2] + p[3]), x.d.c};
    if (out.h < 1 || out.w < 1) c.fail_file("cropping " + x.str() + " leaves nothing");
    return c.make(x.rank, out);
}

void pad_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const int sign = c.is("crop") ? -1 : 1;
    Step s = make_step(OpKind::pad2d, out.d, c.l);
    s.pad = {sign * c.l.pad[0], sign * c.l.pad[1], sign * c.l.pad[2], sign * c.l.pad[3]};
    low.result = low.emit(std::move(s));
}

// ------------------------------------------------------------------ resizing

struct Crop {
    int y, x, h, w;
};

// Keras' crop_to_aspect_ratio box: the largest centred box of the output's aspect ratio.
Crop resize_crop(const LayerContext& c, Dims in, int oh, int ow) {
    if (!c.l.crop_to_aspect_ratio) return {0, 0, in.h, in.w};
    int ch = int(float(in.w) * oh / ow), cw = int(float(in.h) * ow / oh);
    ch = std::max(std::min(in.h, ch), 1), cw = std::max(std::min(in.w, cw), 1);
    return {int(float(in.h - ch) / 2), int(float(in.w - cw) / 2), ch, cw};
}

Shape resize_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const Shape& x = c.image_input();
    int oh = c.l.size[0], ow = c.l.size[1];
    if (c.is("upsampling")) {  // size: integer factors
        c.check_range("upsampling factor", oh, 1, limits::kDim);
        c.check_range("upsampling factor", ow, 1, limits::kDim);
        oh *= x.d.h, ow *= x.d.w;
    }
    c.check_range("output height", oh, 1, limits::kDim);
    c.check_range("output width", ow, 1, limits::kDim);
    if (c.l.interpolation != "bilinear" && c.l.interpolation != "nearest")
        c.fail_unsupported("interpolation '" + c.l.interpolation + "' is not supported (bilinear, nearest)");
    const Crop box = resize_crop(c, x.d, oh, ow);
    if (c.l.antialias && (oh < box.h || ow < box.w)) c.fail_unsupported("antialiased downscaling is not supported");
    return c.make(x.rank, Dims{oh, ow, x.d.c});
}

void resize_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Dims in = c.in[0].d;
    const Crop box = resize_crop(c, in, out.d.h, out.d.w);
    Step s = make_step(OpKind::resize, out.d, c.l);
    s.nearest = c.l.interpolation == "nearest";
    s.pad = {box.y, in.h - box.y - box.h, box.x, in.w - box.x - box.w};
    low.result = low.emit(std::move(s));
}

// ------------------------------------------------------------------ reshaping

// The canonical axes in the order Keras flattens `x`; Flatten(data_format=
// 'channels_first') first moves the first axis last.
std::vector<int> flatten_order(const LayerContext& c, const Shape& x) {
    std::vector<int> order = keras_axes(x);
    if (c.l.data_format == "channels_first" && order.size() > 1)
        std::rotate(order.begin(), order.begin() + 1, order.end());
    return order;
}

Shape flatten_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    return c.make(1, Dims{1, 1, int(std::min<int64_t>(c.in[0].d.size(), limits::kActivation + 1))});
}

void flatten_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Dims in = c.in[0].d;
    const int v = emit_in_order(low, c.l, low.inputs[0], in, flatten_order(c, c.in[0]));
    low.result = emit_reshape(low, c.l, v, out.d);
}

Shape reshape_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const auto& t = c.l.target_shape;
    if (t.empty() || t.size() > 3)
        c.fail_unsupported("target shape " + tuple_str(t) + " is not supported (rank 1 to 3)");
    const int64_t n = c.in[0].d.size();
    int64_t known = 1;
    int unknown = -1;
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] == -1 && unknown < 0) {
            unknown = int(i);
            continue;
        }
        c.check_range("target dimension", t[i], 1, limits::kActivation);
        known *= t[i];
    }
    std::vector<int64_t> k(t.begin(), t.end());
    if (unknown >= 0) k[unknown] = known > 0 && n % known == 0 ? n / known : 0;
    int64_t total = 1;
    for (auto v : k) total *= v;
    if (total != n || (unknown >= 0 && k[unknown] < 1))
        c.fail_file("cannot reshape " + c.in[0].str() + " (" + std::to_string(n) + " values) into " + tuple_str(t));
    for (auto v : k) c.check_range("target dimension", v, 1, k.size() == 1 ? limits::kActivation : limits::kUnits);
    return from_keras(c, k);
}

// Reshape reads and writes Keras' memory order: a channels_first image is put in
// C, H, W order first, and an output image is put back from it.
void reshape_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Shape& x = c.in[0];
    int v = emit_in_order(low, c.l, low.inputs[0], x.d, keras_axes(x));
    if (out.chw) {
        v = emit_reshape(low, c.l, v, Dims{out.d.c, out.d.h, out.d.w});  // (c, h, w) in memory order
        Step s = make_step(OpKind::permute, out.d, c.l);
        s.perm = {1, 2, 0};
        low.result = low.emit(std::move(s), v);
        return;
    }
    low.result = emit_reshape(low, c.l, v, out.d);
}

Shape permute_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const Shape& x = c.in[0];
    const auto& dims = c.l.axes;
    std::vector<int> sorted(dims);
    std::sort(sorted.begin(), sorted.end());
    bool ok = int(dims.size()) == x.rank;
    for (int i = 0; ok && i < x.rank; ++i) ok = sorted[i] == i + 1;
    if (!ok) c.fail_file("dims " + tuple_str(dims) + " are not a permutation of the axes of " + x.str());
    const auto k = x.keras();
    std::vector<int64_t> p;
    for (int d : dims) p.push_back(k[d - 1]);
    return from_keras(c, p);
}

void permute_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Shape& x = c.in[0];
    const std::vector<int> ax_in = keras_axes(x), ax_out = keras_axes(out);
    std::array<int, 3> perm{0, 1, 2};
    for (size_t j = 0; j < ax_out.size(); ++j) perm[ax_out[j]] = ax_in[c.l.axes[j] - 1];
    if (perm == std::array<int, 3>{0, 1, 2}) {
        low.result = low.inputs[0];
        return;
    }
    Step s = make_step(OpKind::permute, out.d, c.l);
    s.perm = perm;
    low.result = low.emit(std::move(s));
}

// ------------------------------------------------------------------ element-wise

Shape same_shape(const LayerContext& c, std::vector<WeightSlot>&) { return c.in[0]; }

void activation_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    emit_activation(c, out, low, low.inputs[0]);
}

Shape softmax_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    check_softmax_axis(c, c.in[0]);
    return c.in[0];
}

void softmax_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(OpKind::softmax, out.d, c.l);
    s.log = c.l.kind == "log_softmax";
    low.result = low.emit(std::move(s));
}

Shape prelu_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const Shape& x = c.in[0];
    std::vector<int64_t> shape = x.keras();
    for (int a : c.l.axes) {
        if (a < 1 || a > x.rank) c.fail_file("shared axis " + std::to_string(a) + " is not an axis of " + x.str());
        shape[a - 1] = 1;
    }
    slots.push_back({"alpha", shape});
    return x;
}

// alpha, in Keras' shape with shared axes of size 1, broadcast to canonical (h, w, c).
void prelu_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    const Shape& x = c.in[0];
    const Tensor& alpha = c.weight("alpha");
    const std::vector<int> ax = keras_axes(x);
    std::vector<int64_t> stride(ax.size(), 0);  // alpha's stride along each Keras axis (0: broadcast)
    int64_t s = 1;
    for (int i = int(ax.size()) - 1; i >= 0; --i) {
        stride[i] = alpha.shape[i] == 1 ? 0 : s;
        s *= alpha.shape[i];
    }
    Step st = make_step(OpKind::prelu, out.d, c.l);
    const Dims d = x.d;
    st.scale.resize(size_t(d.size()));
    for (int y = 0; y < d.h; ++y)
        for (int xx = 0; xx < d.w; ++xx)
            for (int ch = 0; ch < d.c; ++ch) {
                const int pos[3] = {y, xx, ch};
                int64_t k = 0;
                for (size_t i = 0; i < ax.size(); ++i) k += pos[ax[i]] * stride[i];
                st.scale[(size_t(y) * d.w + xx) * d.c + ch] = alpha.data[size_t(k)];
            }
    low.result = low.emit(std::move(st));
}

int channel_axis(const LayerContext& c, const char* what) {
    const Shape& x = c.in[0];
    if (c.l.axes.size() > 1)
        c.fail_unsupported(std::string(what) + " over several axes " + tuple_str(c.l.axes) + " is not supported");
    const int keras = c.l.axes.empty() ? -1 : c.l.axes[0];
    if (c.canonical_axis(x, keras, "axis") != 2)
        c.fail_unsupported(std::string(what) + " over axis " + std::to_string(keras) + " of " + x.str() +
                           " is not supported (only over the channel axis)");
    return x.d.c;
}

Shape batch_norm_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const int64_t n = channel_axis(c, "batch normalization");
    if (!(c.l.epsilon >= 0.f) || !std::isfinite(c.l.epsilon)) c.fail_file("epsilon must be a non-negative number");
    if (c.l.bn_scale) slots.push_back({"gamma", {n}});
    if (c.l.bn_center) slots.push_back({"beta", {n}});
    slots.push_back({"moving_mean", {n}});
    slots.push_back({"moving_variance", {n}});
    return c.in[0];
}

Step affine_step(const LayerContext& c, const Shape& out) {
    Step s = make_step(OpKind::affine, out.d, c.l);
    s.scale.assign(out.d.c, 1.f);
    s.shift.assign(out.d.c, 0.f);
    return s;
}

// As tf.nn.batch_normalization: x * (gamma / sqrt(var + eps)) + (beta - mean * that).
void batch_norm_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = affine_step(c, out);
    const Tensor* gamma = c.l.bn_scale ? &c.weight("gamma") : nullptr;
    const Tensor* beta = c.l.bn_center ? &c.weight("beta") : nullptr;
    const auto& mean = c.weight("moving_mean").data;
    const auto& var = c.weight("moving_variance").data;
    for (int i = 0; i < out.d.c; ++i) {
        float inv = 1.f / std::sqrt(var[i] + c.l.epsilon);
        if (gamma) inv *= gamma->data[i];
        s.scale[i] = inv;
        s.shift[i] = (beta ? beta->data[i] : 0.f) - mean[i] * inv;
        if (!std::isfinite(s.scale[i]) || !std::isfinite(s.shift[i]))
            c.fail_file("moving_variance + epsilon must be positive (channel " + std::to_string(i) + ")");
    }
    low.result = low.emit(std::move(s));
}

Shape rescaling_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    if (!std::isfinite(c.l.scale) || !std::isfinite(c.l.offset)) c.fail_file("scale and offset must be finite");
    return c.in[0];
}

void rescaling_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = affine_step(c, out);
    std::fill(s.scale.begin(), s.scale.end(), c.l.scale);
    std::fill(s.shift.begin(), s.shift.end(), c.l.offset);
    low.result = low.emit(std::move(s));
}

// Keras' Normalization: (x - mean) / max(sqrt(variance), epsilon), per channel, or
// with one mean and variance for everything when no axis is given.
Shape normalization_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const int64_t n = c.l.axes.empty() ? 1 : channel_axis(c, "normalization");
    const std::vector<int64_t> shape = c.l.axes.empty() ? std::vector<int64_t>{} : std::vector<int64_t>{n};
    slots.push_back({"mean", shape, true});
    slots.push_back({"variance", shape, true});
    slots.push_back({"count", {}, false, true});
    return c.in[0];
}

void normalization_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = affine_step(c, out);
    const auto& mean = c.weight("mean").data;
    const auto& var = c.weight("variance").data;
    for (int i = 0; i < out.d.c; ++i) {
        const size_t k = mean.size() == 1 ? 0 : size_t(i);
        const float d = std::max(std::sqrt(var[k]), c.l.epsilon);
        s.scale[i] = 1.f / d;
        s.shift[i] = -mean[k] / d;
        if (!std::isfinite(s.scale[i]) || !std::isfinite(s.shift[i]) || !(var[k] >= 0.f))
            c.fail_file("variance must be a non-negative number (channel " + std::to_string(i) + ")");
    }
    low.result = low.emit(std::move(s));
}

// Keras' LayerNormalization over the channel axis: per pixel, (x - mean) * rsqrt(var + eps)
// * gamma + beta, the moments over the channels.
Shape layer_norm_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    const int64_t n = channel_axis(c, "layer normalization");
    if (!(c.l.epsilon >= 0.f) || !std::isfinite(c.l.epsilon)) c.fail_file("epsilon must be a non-negative number");
    if (c.l.bn_scale) slots.push_back({"gamma", {n}});
    if (c.l.bn_center) slots.push_back({"beta", {n}});
    return c.in[0];
}

void layer_norm_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(OpKind::layer_norm, out.d, c.l);
    s.scale = c.l.bn_scale ? c.weight("gamma").data : std::vector<float>(out.d.c, 1.f);
    s.shift = c.l.bn_center ? c.weight("beta").data : std::vector<float>(out.d.c, 0.f);
    s.epsilon = c.l.epsilon;
    low.result = low.emit(std::move(s));
}

// ONNX's QuantizeLinear + DequantizeLinear, or DynamicQuantizeLinear (quant_scale 0):
// network.h's Quantization.
Shape quantize_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const LayerSpec& l = c.l;
    if (!std::isfinite(l.quant_scale) || l.quant_scale < 0.f)
        c.fail_file("quant_scale = " + number_str(l.quant_scale) + " must be a positive number (0: dynamic)");
    c.check_range("quant_range[0]", l.quant_range[0], -limits::kQuantized, limits::kQuantized);
    c.check_range("quant_range[1]", l.quant_range[1], l.quant_range[0] + 1, limits::kQuantized);
    c.check_range("zero_point", l.zero_point, l.quant_range[0], l.quant_range[1]);
    if (l.quant_scale == 0.f && (l.quant_range[0] != 0 || l.quant_range[1] != 255 || l.zero_point != 0))
        c.fail_unsupported("a dynamic quantization (quant_scale 0) is to uint8 (quant_range (0, 255), zero_point 0)");
    return c.in[0];
}

void quantize_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(OpKind::quantize, out.d, c.l);
    s.quant = {c.l.quant_scale, c.l.zero_point, c.l.quant_range[0], c.l.quant_range[1]};
    s.integers = c.l.integers;
    low.result = low.emit(std::move(s));
}

// Integer sums (of a conv2d / dense with `integers`) times the scale the dynamic
// quantization of its second input chose for each sample, times a constant per channel
// (the weights' scale): ONNX Runtime's Cast and Mul after ConvInteger / MatMulInteger.
Shape dequantize_infer(const LayerContext& c, std::vector<WeightSlot>& slots) {
    slots.push_back({"scale", {int64_t(c.in[0].d.c)}});
    return c.in[0];
}

void dequantize_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(OpKind::dequantize, out.d, c.l);
    s.scale = c.weight("scale").data;
    s.inputs = low.inputs;
    s.ins = low.dims;
    low.result = low.emit(std::move(s));
}

// ------------------------------------------------------------------ merging

Merge merge_of(const std::string& kind) {
    if (kind == "subtract") return Merge::subtract;
    if (kind == "multiply") return Merge::multiply;
    if (kind == "average") return Merge::average;
    if (kind == "maximum") return Merge::maximum;
    if (kind == "minimum") return Merge::minimum;
    return Merge::add;
}

Shape merge_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    for (const Shape& s : c.in)
        if (s.rank != c.in[0].rank || s.d != c.in[0].d)
            c.fail_unsupported("inputs of different shapes " + c.in[0].str() + " and " + s.str() +
                               " (broadcasting is not supported)");
    return c.in[0];
}

void merge_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(OpKind::merge, out.d, c.l);
    s.merge = merge_of(c.l.kind);
    s.inputs = low.inputs;
    s.ins = low.dims;
    low.result = low.emit(std::move(s));
}

Shape concat_infer(const LayerContext& c, std::vector<WeightSlot>&) {
    const Shape& first = c.in[0];
    if (c.l.axes.size() > 1) c.fail_file("concatenation over several axes " + tuple_str(c.l.axes));
    const int axis = c.canonical_axis(first, c.l.axes.empty() ? -1 : c.l.axes[0], "axis");
    Dims out = first.d;
    int64_t total = 0;
    for (const Shape& s : c.in) {
        Dims a = s.d, b = first.d;
        (axis == 0 ? a.h : axis == 1 ? a.w : a.c) = 0;
        (axis == 0 ? b.h : axis == 1 ? b.w : b.c) = 0;
        if (s.rank != first.rank || a != b)
            c.fail_file("cannot concatenate " + first.str() + " and " + s.str() + " along axis " +
                        std::to_string(c.l.axes.empty() ? -1 : c.l.axes[0]));
        total += extent(s.d, axis);
    }
    c.check_range("concatenated size", total, 1, axis == 2 && first.rank == 1 ? limits::kUnits : limits::kChannels);
    (axis == 0 ? out.h : axis == 1 ? out.w : out.c) = int(total);
    return c.make(first.rank, out);
}

void concat_lower(const LayerContext& c, const Shape& out, Lowering& low) {
    Step s = make_step(OpKind::concat, out.d, c.l);
    s.axis = c.canonical_axis(c.in[0], c.l.axes.empty() ? -1 : c.l.axes[0], "axis");
    s.inputs = low.inputs;
    s.ins = low.dims;
    low.result = low.emit(std::move(s));
}

// ------------------------------------------------------------------ the table

constexpr int kMany = limits::kInputs;

const LayerRule kRules[] = {
    // kind                 inputs     infer                lower              spatial
    {"conv2d", 1, 1, conv2d_infer, conv2d_lower, true},
    {"depthwise_conv2d", 1, 1, depthwise_infer, depthwise_lower, true},
    {"separable_conv2d", 1, 1, depthwise_infer, depthwise_lower, true},
    {"dense", 1, 1, dense_infer, dense_lower, false},
    {"max_pool2d", 1, 1, pool_infer, pool_lower, true},
    {"avg_pool2d", 1, 1, pool_infer, pool_lower, true},
    {"global_max_pool2d", 1, 1, global_pool_infer, global_pool_lower, true},
    {"global_avg_pool2d", 1, 1, global_pool_infer, global_pool_lower, true},
    {"zero_pad2d", 1, 1, pad_infer, pad_lower, true},
    {"crop2d", 1, 1, pad_infer, pad_lower, true},
    {"resizing", 1, 1, resize_infer, resize_lower, true},
    {"upsampling2d", 1, 1, resize_infer, resize_lower, true},
    {"flatten", 1, 1, flatten_infer, flatten_lower, false},
    {"reshape", 1, 1, reshape_infer, reshape_lower, false},
    {"permute", 1, 1, permute_infer, permute_lower, false},
    {"activation", 1, 1, same_shape, activation_lower, false},
    {"softmax", 1, 1, softmax_infer, softmax_lower, false},
    {"log_softmax", 1, 1, softmax_infer, softmax_lower, false},  // ONNX LogSoftmax (PyTorch's log_softmax)
    {"prelu", 1, 1, prelu_infer, prelu_lower, false},
    {"batch_norm", 1, 1, batch_norm_infer, batch_norm_lower, false},
    {"rescaling", 1, 1, rescaling_infer, rescaling_lower, false},
    {"normalization", 1, 1, normalization_infer, normalization_lower, false},
    {"layer_norm", 1, 1, layer_norm_infer, layer_norm_lower, false},
    {"quantize", 1, 1, quantize_infer, quantize_lower, false},        // ONNX's quantized graphs
    {"dequantize", 2, 2, dequantize_infer, dequantize_lower, false},  // (quantize_math.h)
    {"add", 2, kMany, merge_infer, merge_lower, false},
    {"subtract", 2, 2, merge_infer, merge_lower, false},
    {"multiply", 2, kMany, merge_infer, merge_lower, false},
    {"average", 2, kMany, merge_infer, merge_lower, false},
    {"maximum", 2, kMany, merge_infer, merge_lower, false},
    {"minimum", 2, kMany, merge_infer, merge_lower, false},
    {"concatenate", 1, kMany, concat_infer, concat_lower, false},
    // 1-D layers on (steps, channels): the 2-D ones with height 1 (kernel, strides,
    // dilation, size and pad given as (1, k), (0, 0, left, right)).
    {"conv1d", 1, 1, conv2d_infer, conv2d_lower, false},
    {"max_pool1d", 1, 1, pool_infer, pool_lower, false},
    {"avg_pool1d", 1, 1, pool_infer, pool_lower, false},
    {"global_max_pool1d", 1, 1, global_pool_infer, global_pool_lower, false},
    {"global_avg_pool1d", 1, 1, global_pool_infer, global_pool_lower, false},
    {"zero_pad1d", 1, 1, pad_infer, pad_lower, false},
    {"crop1d", 1, 1, pad_infer, pad_lower, false},
    {"upsampling1d", 1, 1, resize_infer, resize_lower, false},
};

}  // namespace

const LayerRule* find_layer_rule(const std::string& kind) {
    for (const LayerRule& r : kRules)
        if (kind == r.kind) return &r;
    return nullptr;
}

std::vector<std::string> layer_kinds() {
    std::vector<std::string> out;
    for (const LayerRule& r : kRules) out.push_back(r.kind);
    return out;
}

}  // namespace lenet
