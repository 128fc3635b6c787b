// Winograd's minimal filtering F(2x2, r x r) for stride-1 3x3 and 5x5 convolutions
// with many input channels (lenet-tf's second layer; most CNNs' inner ones). Each
// 2x2 tile of output pixels costs alpha^2 = (r + 1)^2 multiply-adds per input and
// output channel instead of 4 r^2: 2.8x fewer for 5x5, 2.25x for 3x3, plus the
// transforms. The products are alpha^2 small GEMMs (tiles x ci) x (ci x co), run on
// the direct dense kernel; the transforms are the KernelTable's winograd_in/out.
// Float32 rounding: about 4x the direct kernel's on lenet-tf (PERFORMANCE.md).
#pragma once

#include <memory>
#include <vector>

#include "../backend.h"
#include "direct.h"

namespace lenet::cpu {

struct WinogradWeights {
    int alpha = 0;
    int ci = 0;                    // input channels rounded up to kLanes
    // Per tile position p = i * alpha + j, the transformed kernel (G g G^T)[i][j] as a
    // (ci, co) matrix packed for KernelTable::conv (kh = kw = 1): at stride `stride`.
    AlignedFloats u;
    size_t stride = 0;
    AlignedFloats zeros;           // the GEMMs' bias; the real one is added after A^T
    AlignedFloats bias;            // co rounded up to kLanes
};

// Whether `s` (a conv2d Step) runs faster this way: stride 1, no dilation or groups,
// a square 3x3 or 5x5 kernel, at least 16 input channels, and few enough zero
// channels padding them to a multiple of 16.
bool winograd_fits(const Step& s);
WinogradWeights pack_winograd(const Step& s);

// `pool`: the fused 2x2 / 2 max pool that follows, or null.
std::unique_ptr<Kernel> make_winograd_conv2d(const Step& conv, const Step* pool, const KernelTable& table,
                                             const WinogradWeights& weights);

}  // namespace lenet::cpu
