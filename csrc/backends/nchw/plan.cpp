#include "plan.h"

#include <algorithm>
#include <limits>

#include "../../net/layout.h"

namespace lenet::nchw {

Constants constants(const Step& s) {
    Constants k;
    switch (s.op) {
        case OpKind::conv2d:
            k.weights = conv_hwio_to_oihw(s.weights, s.kh, s.kw, s.in.c / s.groups, s.out.c);
            k.bias = s.bias;
            break;
        case OpKind::dense:
            // Activations arrive in NCHW order: the rows after a Flatten follow it.
            k.weights = s.in.h * s.in.w > 1 ? dense_rows_hwc_to_chw(s.weights, s.in, s.out.c) : s.weights;
            k.bias = s.bias;
            break;
        case OpKind::affine:
        case OpKind::layer_norm:
            k.weights = s.scale;
            k.bias = s.shift;
            break;
        case OpKind::dequantize: k.weights = s.scale; break;
        case OpKind::prelu:
            k.weights.resize(s.scale.size());  // (h, w, c) -> (c, h, w)
            nhwc_to_nchw(s.scale.data(), k.weights.data(), 1, s.out);
            break;
        default: break;
    }
    return k;
}

PaddingChoice choose_padding(const Step& s) {
    PaddingChoice c;
    const Pads p = s.pad;
    if (!p.any()) return c;
    const bool symmetric = p.top == p.bottom && p.left == p.right;
    if (s.op == OpKind::conv2d && symmetric) {
        c.pad_h = p.top, c.pad_w = p.left;
        return c;
    }
    if (s.op == OpKind::conv2d || s.op == OpKind::max_pool2d || s.op == OpKind::avg_pool2d) c.prepad = p;
    return c;
}

float pad_value(const Step& s) { return s.op == OpKind::max_pool2d ? -std::numeric_limits<float>::infinity() : 0.f; }

Dims padded_dims(const Step& s, const PaddingChoice& padding) {
    const Pads& q = padding.prepad;
    return Dims{s.in.h + q.top + q.bottom, s.in.w + q.left + q.right, s.in.c};
}

std::vector<float> average_factors(const Step& s, const PaddingChoice& padding) {
    std::vector<float> factor;
    if (s.op != OpKind::avg_pool2d || !padding.prepadded()) return factor;
    factor.resize(size_t(s.out.h) * s.out.w);
    for (int oy = 0; oy < s.out.h; ++oy)
        for (int ox = 0; ox < s.out.w; ++ox) {
            const int y0 = oy * s.sh - s.pad.top, x0 = ox * s.sw - s.pad.left;
            const int rows = std::min(y0 + s.kh, s.in.h) - std::max(y0, 0);
            const int cols = std::min(x0 + s.kw, s.in.w) - std::max(x0, 0);
            factor[size_t(oy) * s.out.w + ox] = float(s.kh * s.kw) / float(rows * cols);
        }
    return factor;
}

}  // namespace lenet::nchw
