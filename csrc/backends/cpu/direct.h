// Hand-written CPU kernels for the shapes of these networks, where a packed BLAS
// call is mostly overhead: convolutions with few channels, dense layers on a few
// images, pooling. One source (direct_kernels.cpp) is compiled once per
// instruction set; the backend picks the best table the CPU supports at run
// time. The BLAS path (im2col + SGEMM) stays as the reference and for large GEMMs.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "../../net/network.h"
#include "../../support/thread_pool.h"

namespace lenet::cpu {

// Output channels are computed in blocks of this many lanes (one AVX-512 register).
constexpr int kLanes = 16;

// One image of a convolution, NHWC, optionally followed by a 2x2 max pool. `x` is
// already padded: no bounds checks in the inner loops. A dense layer on n images is the same thing with kh = kw = 1,
// oh = ih = 1, ow = iw = n and ci = the input length.
struct ConvArgs {
    const float* x;
    int ih, iw, ci;          // dims of the (padded) input
    int oh, ow;
    int kh, kw, sh, sw;
    const float* w;          // packed: [co / 16 blocks][kh][kw][ci][16], zero lanes past co
    const float* hwio;       // the same weights as the Step holds them (kh, kw, ci, co)
    const float* bias;       // [blocks * 16], zeros past co
    int co;                  // output channels computed (from w's first block)
    bool relu;               // max(x, 0) applied in the kernel; other activations by the caller after
    float* y;                // output pixel (oy, ox) at y + (oy * ow + ox) * ldy
    int ldy;                 // floats between output pixels: co, or more when a call
                             // computes a slice of the channels
    int row_begin, row_end;  // the output rows computed: [0, oh) for all
    // Fused 2x2 max pool, stride 2: oh and ow are the even conv rows and columns
    // the pool reads; y receives the (oh/2, ow/2) pooled pixels; rows go in pairs.
    bool pool;
    // x in row-planar order (H, C, W: each row's channels one after another, each a
    // run of iw values) instead of NHWC; stride 1 only.
    bool planar_in = false;
    // y in row-planar order (conv_rows_pool only; ldy unused).
    bool planar_out = false;
    // conv_il only (images in lanes, see KernelTable::conv_il): the output interleaved
    // at y (0), or each image's at y + l * y_image, NHWC (1) or row-planar (2), through
    // `stage` (an output row of every image: ow * co * width floats).
    int il_out = 0;
    size_t y_image = 0;
    float* stage = nullptr;
};

struct PoolArgs {
    const float* x;
    int ih, iw, c;
    int oh, ow, kh, kw, sh, sw, pad_top, pad_left;
    bool max;
    float* row;              // scratch of iw * c floats
    float* y;
};

// Winograd's minimal filtering F(m x m, r x r) (winograd.cpp): a tile of m x m output
// pixels from an alpha x alpha input window, alpha = m + r - 1. The transforms, per
// tile and per vector of channels; the channel counts are multiples of kLanes (padded
// with zeros), so every vector is whole.
struct WinogradTile {
    const float* src;        // the window's top-left pixel in a padded NHWC image
    float* dst;              // the tile's top-left output pixel (pooled: its first pooled one)
    int rows, cols;          // pixels of the tile inside the output (pooled: pooled pixels)
};

struct WinogradArgs {
    int m, alpha;            // F(2, 3), F(2, 5), F(4, 3), F(4, 5) (winograd_transforms.h)
    // Precision "exact": the transforms and the products in double (v64, u64, m64), only the
    // outputs rounded to float, once, with the bias added; "fast": all of it in float32 (v, u,
    // m_t), the arrays of the other precision null. Float32 lands up to 11x further from
    // float64 than the direct kernels (the transforms' large constants cancel: winograd.h).
    bool exact;
    const WinogradTile* tiles;
    int count;               // tiles
    // Input transform: v[(i * alpha + j) * v_plane + t * ci + c] = (B^T d_t B)[i][j][c].
    size_t src_row;          // floats between the window's rows
    int ci;                  // channels of the padded image (a multiple of kLanes)
    float* v;
    double* v64;
    size_t v_plane;          // values between tile positions (count * ci or more)
    // Products: m[p] = v[p] u[p] for each tile position p, u[p] at u + p * u_plane
    // ((ci, ldm) packed as conv's with kh = kw = 1).
    const float* u;
    const double* u64;
    size_t u_plane;
    // Output transform: y = A^T m A + bias, m[(i * alpha + j) * m_plane + t * ldm + o].
    float* m_t;
    double* m64;
    size_t m_plane;
    int co;                  // channels written
    int ldm;                 // values between m's rows (co rounded up to kLanes)
    const float* bias;       // ldm values
    bool pool;               // 2x2 / 2 max pools of the tile: (m / 2)^2 pixels
    bool relu;
    size_t dst_row;          // floats between output rows (pooled: pooled rows)
};

struct KernelTable {
    const char* isa;         // "avx512", "avx2", "neon", "generic"
    int width;               // floats in a vector: 16, 8, 4
    // Whether conv reads row-planar input (planar_in) faster than NHWC: AVX-512's tiles
    // of 10-14 pixels need no register per pixel there; AVX2's of 2 gain nothing and
    // lose the broadcast of each input to both rows of a pooled tile (measured).
    bool planar_conv;
    void (*conv)(const ConvArgs&);
    // A dense layer (conv's 1x1 form over n images): each sum in runs apart, so that
    // one image still has independent sums; the same bits at every batch size.
    void (*dense)(const ConvArgs&);
    // Stride 1 on `width` images at once, interleaved (value v of image l at
    // v * width + l: x is (ih, iw, ci) so, padded), a lane per image: every lane holds an
    // output whatever the channel counts. Optionally the fused pool. The same sums, in
    // the same order, as conv and conv_rows_pool. Null where it does not pay (AVX2, SSE),
    // with interleave and deinterleave.
    void (*conv_il)(const ConvArgs&);
    // dst[k * width + l] = src[l * stride + k] for k < count, l < width; and back:
    // deinterleave(src, count, dst, stride) writes dst[l * stride + k] = src[k * width + l].
    void (*interleave)(const float* src, size_t stride, int count, float* dst);
    void (*deinterleave)(const float* src, int count, float* dst, size_t stride);
    // Stride 1, a fused 2x2 max pool, x row-planar (planar_in, or one input channel):
    // vectors along the output rows, weights broadcast, so that few output channels
    // (every LeNet's first layer) leave no lane idle. x must be readable one vector
    // past the end of each row's run (and of the last one). rows_lanes(ow, width):
    // the lanes its tiles compute for a row of ow outputs.
    void (*conv_rows_pool)(const ConvArgs&);
    void (*pool)(const PoolArgs&);
    void (*winograd_in)(const WinogradArgs&);
    void (*winograd_products)(const WinogradArgs&, int first_position, int last_position);
    void (*winograd_out)(const WinogradArgs&);
    // `iters` rounds of independent multiply-adds (for measure_mac_rate); returns
    // a value that depends on them so that nothing is optimized away.
    float (*mac_loop)(int64_t iters);
    int64_t macs_per_iter;
};

// Vectors aligned to a cache line: a 16-lane load never straddles two lines.
template <class T>
struct CacheAligned {
    using value_type = T;
    CacheAligned() = default;
    template <class U>
    CacheAligned(const CacheAligned<U>&) {}
    T* allocate(size_t n);
    void deallocate(T* p, size_t) noexcept;
    template <class U>
    bool operator==(const CacheAligned<U>&) const {
        return true;
    }
    template <class U>
    bool operator!=(const CacheAligned<U>&) const {
        return false;
    }
};
template <class T>
T* CacheAligned<T>::allocate(size_t n) {
    const size_t bytes = ((n * sizeof(T) + 63) / 64) * 64;
    void* p = std::aligned_alloc(64, bytes ? bytes : 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
}
template <class T>
void CacheAligned<T>::deallocate(T* p, size_t) noexcept {
    std::free(p);
}
using AlignedFloats = std::vector<float, CacheAligned<float>>;
using AlignedDoubles = std::vector<double, CacheAligned<double>>;

// Weights packed for `conv`: from HWIO (kh, kw, ci, co), or a dense (in, out)
// matrix with kh = kw = 1.
struct PackedWeights {
    AlignedFloats w, bias;
};
PackedWeights pack(const std::vector<float>& hwio, const std::vector<float>& bias, int kh, int kw, int ci, int co);

// Lanes conv_rows_pool computes for a row of ow conv outputs with `width`-float
// vectors: whole vectors, and a last few columns paired with the next row's in one
// vector when they fill at most half of one.
inline int rows_lanes(int ow, int width) {
    const int rest = ow % width;
    return ow / width * width + (rest == 0 ? 0 : rest <= width / 2 ? width / 2 : width);
}

// Splits one call of `kernel` (a table's conv, dense or conv_rows_pool) over `pool`'s threads and the caller, by output
// rows or, for a single row (a dense layer), by blocks of output channels. Runs it whole when `pool` is null or the
// work is too small to pay for waking threads.
void conv_split(void (*kernel)(const ConvArgs&), const ConvArgs& a, ThreadPool* pool);

// The environment variable that caps the kernel sets "auto" and supported_tables() offer.
inline constexpr const char* kMaxIsaVariable = "LENET_MAX_CPU_ISA";

// Tables compiled into this library, best first, that this CPU can run, at most the
// widest $LENET_MAX_CPU_ISA names; throws InputError for a value that names no set.
std::vector<const KernelTable*> supported_tables();
// "auto" (the best supported), "avx512", "avx2", "neon" or "generic"; throws InputError
// for an unknown name or one this CPU cannot run.
const KernelTable* table_named(const std::string& name);

// The CPU's measured FP32 multiply-add rate, per thread, in GMAC/s: the arithmetic
// floor lenet-bench compares against. Runs `threads` threads for about `seconds`.
double measure_mac_rate(int threads, double seconds);

}  // namespace lenet::cpu
