// Winograd's minimal filtering F(m x m, r x r) for stride-1 3x3 and 5x5 convolutions
// with many input channels (lenet-tf's second layer; most CNNs' inner ones). Each
// m x m tile of output pixels costs alpha^2 = (m + r - 1)^2 multiply-adds per input
// and output channel instead of m^2 r^2: F(2, 3) 2.25x fewer, F(4, 3) 4x, F(2, 5)
// 2.8x, F(4, 5) 6.25x, plus the transforms. The products are alpha^2 small GEMMs (tiles x ci) x
// (ci x co), the KernelTable's winograd_products; the transforms are its
// winograd_in/out.
//
// Precision. The transforms' constants (F(4, 5)'s 5.25 and 4.25, F(4, r)'s 8 and 1/8)
// make the transformed inputs, the products and their sums much larger than the outputs
// they cancel down to, so float32 there lands far from the exact answer: on lenet-tf's
// second layer, F(2, 5) about 4x and F(4, 5) about 11x the direct kernel's distance from
// float64, in the model's probabilities; every stage contributes, the products' sums most
// (PERFORMANCE.md, issue 74). By default ("exact") the transforms and the products are
// computed in double from the float inputs and weights, and the outputs rounded to float
// once: closer to float64 than the direct kernel, for about twice the float32 products'
// cost. "fast" (an opt-in) keeps float32 throughout.
#pragma once

#include <memory>
#include <vector>

#include "../backend.h"
#include "direct.h"

namespace lenet::cpu {

struct WinogradWeights {
    int m = 0;                     // output pixels per tile side: 2 or 4
    int alpha = 0;                 // m + r - 1
    int ci = 0;                    // input channels rounded up to kLanes
    bool exact = true;             // in double (the file's comment)
    // Per tile position p = i * alpha + j, the transformed kernel (G g G^T)[i][j] as a
    // (ci, co) matrix packed for KernelTable::conv (kh = kw = 1): at stride `stride`, in
    // u64 (exact) or u (fast).
    AlignedFloats u;
    AlignedDoubles u64;
    size_t stride = 0;
    AlignedFloats bias;            // co rounded up to kLanes
};

// The output tile side m with which `s` (a conv2d Step) runs fastest this way, or 0
// where the direct kernel does: Winograd needs stride 1, no dilation or groups, a
// square 3x3 or 5x5 kernel, at least 16 input channels, and few enough zero channels
// padding them to a multiple of 16; F(4, r) where its tiles compute less than
// F(2, r)'s (all but the smallest outputs, and 2 x n ones). `exact`: with the sums in
// double, which cost about twice as much (F(2, 3) then loses to the direct kernel).
int winograd_tile(const Step& s, bool exact);
WinogradWeights pack_winograd(const Step& s, bool exact);

// `pool`: the fused 2x2 / 2 max pool that follows, or null.
std::unique_ptr<Kernel> make_winograd_conv2d(const Step& conv, const Step* pool, const KernelTable& table,
                                             const WinogradWeights& weights);

}  // namespace lenet::cpu
