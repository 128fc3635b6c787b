// Weight and tensor layout conversions between the canonical layouts of
// network.h and the ones a backend may prefer. Each runs once, at load or plan
// time, never per call (except the input transpose, for C > 1 models only).
#pragma once

#include <array>
#include <vector>

#include "network.h"

namespace lenet {

// Dense rows that follow a permute step's output (its input `in` with axes
// reordered by `perm`, see Step) reordered to follow `in` itself in H,W,C order.
std::vector<float> dense_rows_unpermute(const std::vector<float>& w, Dims in, const std::array<int, 3>& perm,
                                        int units);
// Dense rows in H,W,C order to C,H,W order, for backends that hold activations in NCHW.
std::vector<float> dense_rows_hwc_to_chw(const std::vector<float>& w, Dims in, int units);
// Conv kernel (kh, kw, in, out) to (out, in, kh, kw), cuDNN's NCHW filter layout.
std::vector<float> conv_hwio_to_oihw(const std::vector<float>& w, int kh, int kw, int ci, int co);
// A batch of n images between (n, H, W, C) and (n, C, H, W).
void nhwc_to_nchw(const float* src, float* dst, int n, Dims d);
void nchw_to_nhwc(const float* src, float* dst, int n, Dims d);

}  // namespace lenet
