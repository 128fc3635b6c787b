// The direct kernels, written once with GCC/Clang vector extensions and
// compiled once per instruction set (CMake passes -DLENET_ISA=<name> and the
// matching -m flags); the vector is the instruction set's register. No
// intrinsics except the AVX-512 masked store.
//
// Everything here has internal linkage (an anonymous namespace) and only the table
// is exported: a weak symbol compiled with AVX-512 flags could otherwise be merged
// by the linker into code that runs on any CPU (`nm -C` on the objects shows only
// kTable_<isa>).
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "direct.h"
#include "winograd_transforms.h"

#ifndef LENET_ISA
#error "compile with -DLENET_ISA=avx512|avx2|neon|generic"
#endif
#define LENET_CAT2(a, b) a##b
#define LENET_CAT(a, b) LENET_CAT2(a, b)
#define LENET_STR2(a) #a
#define LENET_STR(a) LENET_STR2(a)

namespace lenet::cpu {
namespace LENET_ISA {
namespace {

// The hardware vector: 16 lanes on AVX-512, 8 on AVX2, 4 on SSE2 and on aarch64's
// Advanced SIMD (NEON). A packed block of 16 output channels is kPerBlock of them.
#if defined(__AVX512F__)
constexpr int kWidth = 16;
#elif defined(__AVX2__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
constexpr int kPerBlock = kLanes / kWidth;
using V = float __attribute__((vector_size(kWidth * sizeof(float))));

// Accumulators that fit in the register file next to a tile's weights and one
// broadcast input: 32 AVX-512 registers, 16 AVX2 or SSE registers; the neon set's 32
// aarch64 registers hold 24 beside a block's 4 weight vectors (the generic set, the same
// instructions, keeps the 16-register tiles).
#if defined(__AVX512F__)
constexpr int kAccBudget = 28;
#elif defined(LENET_NEON_REGISTERS)
constexpr int kAccBudget = 24;
#else
constexpr int kAccBudget = 12;
#endif
constexpr int kMaxTile = 14;  // output pixels per tile

inline V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Stores the first `count` lanes of v (all of them when count >= kWidth).
inline void store(float* y, V v, int count) {
    if (count >= kWidth) {
        std::memcpy(y, &v, sizeof v);
        return;
    }
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(y, __mmask16((1u << count) - 1), __m512(v));
#else
    for (int l = 0; l < count; ++l) y[l] = v[l];
#endif
}

// R rows of P output pixels times B blocks of 16 output channels, accumulated in
// registers over the whole window. The (kx, ci) values of one window row are
// contiguous both in an NHWC image and in the packed weights, so they are one
// loop. With a fused 2x2 max pool (R = 2, P even) the epilogue stores the max of
// each 2x2 square, then the ReLU: it is monotonic, so pooling first is exact.
template <int R, int P, int B>
void conv_tile(const ConvArgs& a, int oy, int ox0, int cb0) {
    constexpr int NV = B * kPerBlock;  // vectors across the tile's output channels
    const int run = a.kw * a.ci;
    const size_t block = size_t(a.kh) * run * kLanes;  // floats per packed block
    const size_t xs = size_t(a.sw) * a.ci;             // between neighbouring windows
    const size_t rs = size_t(a.sh) * a.iw * a.ci;      // between neighbouring rows
    // The bias is added to the finished sum, as TensorFlow and BLAS do: started from a
    // large bias, each product would be rounded to the bias's precision.
    V acc[R][P][NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v)
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
            for (int p = 0; p < P; ++p) acc[r][p][v] = V{};
    if (a.planar_in) {
        // Row-planar input: a tile's pixels are neighbours in each channel's run, so
        // their addresses differ by constants (no register per pixel). Two output
        // rows (R = 2) read input rows oy .. oy + kh, all but the first and last for
        // both: each input is broadcast once for both rows' sums, which take their
        // terms in the same order as the NHWC loop below (ky, then kx, then c).
        const size_t pitch = size_t(a.iw) * a.ci;
        const float* wb = a.w + size_t(cb0) * block;
        // Input row iy for row 0 (with weights row ky = iy, Top) and for row R - 1
        // (ky = iy - 1, Bottom).
        const auto input_row = [&](int iy, auto top, auto bottom) __attribute__((always_inline)) {
            constexpr bool Top = decltype(top)::value, Bottom = decltype(bottom)::value;
            const float* xr = a.x + size_t(oy + iy) * pitch + ox0;
            const float* w0 = wb + size_t(iy) * run * kLanes;
            const float* w1 = w0 - size_t(run) * kLanes;
            for (int kx = 0; kx < a.kw; ++kx)
                for (int c = 0; c < a.ci; ++c) {
                    const float* xc = xr + size_t(c) * a.iw + kx;
                    const size_t j = size_t(kx * a.ci + c) * kLanes;
                    V wt[NV], wm[NV];
#pragma GCC unroll 16
                    for (int v = 0; v < NV; ++v) {
                        const size_t at = (v / kPerBlock) * block + j + (v % kPerBlock) * kWidth;
                        if constexpr (Top) wt[v] = load(w0 + at);
                        if constexpr (Bottom) wm[v] = load(w1 + at);
                    }
#pragma GCC unroll 16
                    for (int p = 0; p < P; ++p) {
                        const float x = xc[p];
#pragma GCC unroll 16
                        for (int v = 0; v < NV; ++v) {
                            if constexpr (Top) acc[0][p][v] += x * wt[v];
                            if constexpr (Bottom) acc[R - 1][p][v] += x * wm[v];
                        }
                    }
                }
        };
        using yes = std::true_type;
        using no = std::false_type;
        if constexpr (R == 1) {
            for (int iy = 0; iy < a.kh; ++iy) input_row(iy, yes{}, no{});
        } else {
            input_row(0, yes{}, no{});
            for (int iy = 1; iy < a.kh; ++iy) input_row(iy, yes{}, yes{});
            input_row(a.kh, no{}, yes{});
        }
    } else
        for (int ky = 0; ky < a.kh; ++ky) {
            const float* xr = a.x + (size_t(oy * a.sh + ky) * a.iw + size_t(ox0) * a.sw) * a.ci;
            const float* wr = a.w + size_t(cb0) * block + size_t(ky) * run * kLanes;
            for (int j = 0; j < run; ++j) {
                V w[NV];
#pragma GCC unroll 16
                for (int v = 0; v < NV; ++v)
                    w[v] = load(wr + (v / kPerBlock) * block + size_t(j) * kLanes + (v % kPerBlock) * kWidth);
#pragma GCC unroll 2
                for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
                    for (int p = 0; p < P; ++p) {
                        const float x = xr[r * rs + p * xs + j];
#pragma GCC unroll 16
                        for (int v = 0; v < NV; ++v) acc[r][p][v] += x * w[v];
                    }
            }
        }
    const bool relu = a.relu;
    const int left = a.co - cb0 * kLanes;  // channels from this tile's first one
    if constexpr (R == 2) {  // fused 2x2 max pool: pooled pixel (oy/2, ox0/2 + q)
        float* y = a.y + (size_t(oy / 2) * (a.ow / 2) + ox0 / 2) * a.ldy + cb0 * kLanes;
#pragma GCC unroll 8
        for (int q = 0; q < P / 2; ++q)
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) {
                if (v * kWidth >= left) break;
                const V t = acc[0][2 * q][v] > acc[0][2 * q + 1][v] ? acc[0][2 * q][v] : acc[0][2 * q + 1][v];
                const V b = acc[1][2 * q][v] > acc[1][2 * q + 1][v] ? acc[1][2 * q][v] : acc[1][2 * q + 1][v];
                V m = (t > b ? t : b) + load(a.bias + cb0 * kLanes + v * kWidth);  // max(a) + b = max(a + b)
                if (relu) m = m < 0.f ? 0.f : m;  // NaN stays NaN, as in TensorFlow
                store(y + size_t(q) * a.ldy + v * kWidth, m, left - v * kWidth);
            }
    } else {
        float* y = a.y + (size_t(oy) * a.ow + ox0) * a.ldy + cb0 * kLanes;
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) {
                if (v * kWidth >= left) break;
                V m = acc[0][p][v] + load(a.bias + cb0 * kLanes + v * kWidth);
                if (relu) m = m < 0.f ? 0.f : m;  // NaN stays NaN, as in TensorFlow
                store(y + size_t(p) * a.ldy + v * kWidth, m, left - v * kWidth);
            }
    }
}

using TileFn = void (*)(const ConvArgs&, int, int, int);

// Tiles of 1..pmax pixels in one row; of 2, 4, .. pmax pixels in two rows.
template <int B, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> row_tiles(std::index_sequence<I...>) {
    return {&conv_tile<1, int(I) + 1, B>...};
}
template <int B, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> pooled_tiles(std::index_sequence<I...>) {
    return {&conv_tile<2, 2 * (int(I) + 1), B>...};
}

// Accumulators per tile: one row of up to kMaxTile pixels; for a fused pool, two
// rows sharing the budget (an even number of pixels each).
template <int B>
constexpr int tile_pixels() {
    return std::max(1, std::min(kMaxTile, kAccBudget / (B * kPerBlock)));
}
template <int B>
constexpr int pooled_tile_pairs() {
    return std::max(1, std::min(kMaxTile, kAccBudget / (2 * B * kPerBlock)) / 2);
}

// `total` items in the fewest tiles of at most `most`, their sizes within one of each
// other: 28 pixels as 14 + 14; 32 as 6 + 6 + 5 + 5 + 5 + 5, not 6 x 5 + 2, whose last
// tile has too few sums to cover the multiply-add's latency. Calls tile(first, size)
// in order.
template <class Tile>
inline void split_even(int total, int most, Tile&& tile) {
    const int count = (total + most - 1) / most;
    for (int i = 0, first = 0; i < count; ++i) {
        const int next = int(int64_t(total) * (i + 1) / count);
        tile(first, next - first);
        first = next;
    }
}

// Every output pixel for blocks [cb0, cb0 + B): one group of weights is read from
// L2 while the image stays in L1.
template <int B>
void conv_blocks(const ConvArgs& a, int cb0) {
    if (a.pool) {
        constexpr int most = pooled_tile_pairs<B>();
        static constexpr auto table = pooled_tiles<B>(std::make_index_sequence<most>());
        for (int oy = a.row_begin; oy < a.row_end; oy += 2)
            split_even(a.ow / 2, most, [&](int px, int q) { table[q - 1](a, oy, 2 * px, cb0); });
        return;
    }
    constexpr int most = tile_pixels<B>();
    static constexpr auto table = row_tiles<B>(std::make_index_sequence<most>());
    for (int oy = a.row_begin; oy < a.row_end; ++oy)
        split_even(a.ow, most, [&](int ox, int p) { table[p - 1](a, oy, ox, cb0); });
}

// Blocks of output channels per pass. Each pass streams its weights (often from
// L2) once per tile of pixels: wider tiles over fewer blocks load fewer weight
// bytes per multiply-add, and two 16-lane blocks x 12-14 pixels fill the AVX-512
// register file (PERFORMANCE.md). AVX2 and SSE registers hold a block in 2 or 4.
constexpr int kBlocksPerPass = kPerBlock == 1 ? 2 : 1;

void conv(const ConvArgs& a) {
    const int blocks = (a.co + kLanes - 1) / kLanes;
    int cb = 0;
    if (!a.pool && a.ow * (a.row_end - a.row_begin) < 4) {
        for (; cb + 4 <= blocks; cb += 4) conv_blocks<4>(a, cb);
    }
    for (; cb + kBlocksPerPass <= blocks; cb += kBlocksPerPass) conv_blocks<kBlocksPerPass>(a, cb);
    if (cb < blocks) conv_blocks<1>(a, cb);
}

// Dense layers (a 1x1 convolution over n "pixels", the images). Each sum takes its
// inputs in kDenseRuns runs (len = k / kDenseRuns inputs each, the last also those
// past them); each run in blocks of kDenseBlock inputs, each block summed apart in
// input order and added to its run's total in order; the runs' totals added in order,
// then the bias. On one image the runs are independent chains (with 4 vectors, 8 of
// them: a chain waits on its multiply-add, 4 cycles, and 2 issue a cycle); on a tile
// of many images, where the tile's own sums are chains enough, the runs follow one
// another, so that the tile can hold as many images as conv_tile's and each weight
// (streamed from L2 for the larger layers) serves them all. Both are the same sums in
// the same order, whatever the tile, the batch or the thread split: an image's row is
// the same bits alone or in any batch.
constexpr int kDenseRuns = 2;
// A chain of n float32 sums strays from the exact sum about sqrt(n) times one rounding; in
// blocks it strays as a chain of kDenseBlock plus one of n / kDenseBlock, as BLAS's and
// oneDNN's blocked GEMMs do. Unblocked, lenet-tf's 3136 -> 1024 layer (chains of 1568)
// left lenet 1.4x Keras' distance from float64 (issue 74, PERFORMANCE.md).
constexpr int kDenseBlock = 128;

// Output vectors [v0, v0 + NV) (kWidth channels each; a packed block of 16 channels
// is kPerBlock of them) of images [px0, px0 + P); the runs Apart (interleaved) or
// one after another.
template <int P, int NV, bool Apart>
void dense_tile(const ConvArgs& a, int px0, int v0) {
    constexpr int S = kDenseRuns, R = Apart ? S : 1;  // runs in registers at once
    const int k = a.ci, len = k / S;
    const size_t block = size_t(k) * kLanes;
    const float* x = a.x + size_t(px0) * k;
    const float* w[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) w[v] = a.w + size_t((v0 + v) / kPerBlock) * block + ((v0 + v) % kPerBlock) * kWidth;
    // acc: the block being summed; total: its run's blocks so far; sum: the runs so far.
    V acc[R][P][NV], total[R][P][NV], sum[P][NV];
    const auto zero = [&](V(&z)[P][NV]) __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) z[p][v] = V{};
    };
    const auto term = [&](int r, int i) __attribute__((always_inline)) {
        V wi[NV];
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) wi[v] = load(w[v] + size_t(i) * kLanes);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
            const float xi = x[size_t(p) * k + i];
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) acc[r][p][v] += xi * wi[v];
        }
    };
    // The block in acc[r] onto its run's total, and a new block.
    const auto end_block = [&](int r) __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v) total[r][p][v] += acc[r][p][v];
        zero(acc[r]);
    };
    // sum = run 0's total, then sum += run s's in order.
    const auto add = [&](int r, bool first) __attribute__((always_inline)) {
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
            for (int v = 0; v < NV; ++v)
                if (first)
                    sum[p][v] = total[r][p][v];
                else
                    sum[p][v] += total[r][p][v];
    };
    if constexpr (Apart) {
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) {
            zero(acc[s]);
            zero(total[s]);
        }
        for (int j0 = 0; j0 < len; j0 += kDenseBlock) {
            const int j1 = std::min(len, j0 + kDenseBlock);
            for (int j = j0; j < j1; ++j)
#pragma GCC unroll 4
                for (int s = 0; s < S; ++s) term(s, s * len + j);
            if (j1 - j0 == kDenseBlock)
#pragma GCC unroll 4
                for (int s = 0; s < S; ++s) end_block(s);
        }
        // The inputs past S equal runs, in the last run's blocks (its offsets len, len + 1, ...).
        for (int i = S * len; i < k; ++i) {
            term(S - 1, i);
            if ((i - (S - 1) * len + 1) % kDenseBlock == 0) end_block(S - 1);
        }
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) end_block(s);
        add(0, true);
#pragma GCC unroll 4
        for (int s = 1; s < S; ++s) add(s, false);
    } else {
        const auto run = [&](int s) __attribute__((always_inline)) {
            zero(acc[0]);
            zero(total[0]);
            const int begin = s * len, end = s == S - 1 ? k : (s + 1) * len;
            for (int i0 = begin; i0 < end; i0 += kDenseBlock) {
                const int i1 = std::min(end, i0 + kDenseBlock);
                for (int i = i0; i < i1; ++i) {
                    // A line of weights a step on AVX2, from L2 (lenet-tf's 3136 -> 1024):
                    // asked for 16 steps ahead, it is there when its step comes (4% faster on
                    // a Zen 4, PERFORMANCE.md, issue 61). Never past the weights' end.
                    __builtin_prefetch(w[0] + size_t(std::min(i + 16, k - 1)) * kLanes);
                    term(0, i);
                }
                if (i1 - i0 == kDenseBlock) end_block(0);
            }
            end_block(0);
        };
        run(0);
        add(0, true);
        for (int s = 1; s < S; ++s) {
            run(s);
            add(0, false);
        }
    }
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
        float* y = a.y + size_t(px0 + p) * a.ldy;
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) {
            const int c = (v0 + v) * kWidth;
            if (c >= a.co) break;
            V m = sum[p][v] + load(a.bias + c);
            if (a.relu) m = m < 0.f ? 0.f : m;  // NaN stays NaN, as in TensorFlow
            store(y + c, m, a.co - c);
        }
    }
}

using DenseFn = void (*)(const ConvArgs&, int, int);
template <int NV, bool Apart, size_t... I>
constexpr std::array<DenseFn, sizeof...(I)> dense_tiles(std::index_sequence<I...>) {
    return {&dense_tile<int(I) + 1, NV, Apart>...};
}

// The runs apart below this many images (more have chains enough in their tile).
constexpr int kDenseFew = 4;

// Every image for output vectors [v0, v0 + NV), in tiles of as many images as the
// accumulators allow.
template <int NV, bool Apart>
void dense_vectors(const ConvArgs& a, int v0) {
    constexpr int most = std::max(
        1, Apart ? std::min(kDenseFew - 1, kAccBudget / (kDenseRuns * NV)) : std::min(kMaxTile, kAccBudget / NV));
    static constexpr auto table = dense_tiles<NV, Apart>(std::make_index_sequence<most>());
    split_even(a.ow, most, [&](int px, int p) { table[p - 1](a, px, v0); });
}

void dense(const ConvArgs& a) {
    const int vectors = (a.co + kWidth - 1) / kWidth;
    int v = 0;
    if (a.ow < kDenseFew) {  // few images: four vectors a pass, the runs apart
        for (; v + 4 <= vectors; v += 4) dense_vectors<4, true>(a, v);
        if (vectors - v == 3) dense_vectors<3, true>(a, v);  // the rest in one pass
        if (vectors - v == 2) dense_vectors<2, true>(a, v);
        if (vectors - v == 1) dense_vectors<1, true>(a, v);
        return;
    }
    constexpr int wide = kBlocksPerPass * kPerBlock;  // conv's passes: 2 AVX-512 or AVX2 vectors, 4 SSE
    for (; v + wide <= vectors; v += wide) dense_vectors<wide, false>(a, v);
    for (; v < vectors; ++v) dense_vectors<1, false>(a, v);
}

// Convolutions with few output channels (every LeNet's first layer, and small
// second ones), stride 1, with a fused 2x2 max pool: vectors along the output
// rows and weights broadcast, so that 5 or 6 output channels leave no lane idle.
// x is row-planar (each row's ci channels one after another, each a run of iw
// values; that is NHWC when ci = 1). A tile is RP pairs of rows x F whole vectors a
// row, plus, with T, one vector holding the pair's last columns (at most half a
// vector), the lower row in the lower half and the upper row in the upper half: a
// 24-wide pair takes 3 vectors, not 4, and an 8-wide one 1, not 2. Every sum takes
// its terms in conv_tile's order (ky, kx, then c). Pooling max-es the rows, then
// even and odd lanes.
#if defined(__GNUC__) && !defined(__clang__)
using VI = int __attribute__((vector_size(kWidth * sizeof(int))));
template <int Odd, size_t... I>
constexpr VI lane_pairs(std::index_sequence<I...>) {
    return VI{int(2 * I + Odd)...};
}
template <size_t... I>
constexpr VI rotated_half(std::index_sequence<I...>) {
    return VI{int((I + kWidth / 2) % kWidth)...};
}
inline V pool_pairs(V lo, V hi) {  // lane q: max(lanes 2q, 2q + 1) of lo:hi
    constexpr VI even = lane_pairs<0>(std::make_index_sequence<kWidth>());
    constexpr VI odd = lane_pairs<1>(std::make_index_sequence<kWidth>());
    const V a = __builtin_shuffle(lo, hi, even), b = __builtin_shuffle(lo, hi, odd);
    return a > b ? a : b;
}
inline V swap_halves(V v) {
    constexpr VI idx = rotated_half(std::make_index_sequence<kWidth>());
    return __builtin_shuffle(v, idx);
}
#else
inline V pool_pairs(V lo, V hi) {
    V out;
    for (int q = 0; q < kWidth; ++q) {
        const float a = q < kWidth / 2 ? lo[2 * q] : hi[2 * q - kWidth];
        const float b = q < kWidth / 2 ? lo[2 * q + 1] : hi[2 * q + 1 - kWidth];
        out[q] = a > b ? a : b;
    }
    return out;
}
inline V swap_halves(V v) {
    V out;
    for (int l = 0; l < kWidth; ++l) out[l] = v[(l + kWidth / 2) % kWidth];
    return out;
}
#endif

constexpr int kHalf = kWidth / 2;

using HalfV = float __attribute__((vector_size(kHalf * sizeof(float))));
template <size_t... I>
inline V concat(HalfV lo, HalfV hi, std::index_sequence<I...>) {
    return __builtin_shufflevector(lo, hi, I...);
}
// Lanes [0, kHalf) from lo, [kHalf, kWidth) from hi.
inline V load_halves(const float* lo, const float* hi) {
    HalfV a, b;
    std::memcpy(&a, lo, sizeof a);
    std::memcpy(&b, hi, sizeof b);
    return concat(a, b, std::make_index_sequence<kWidth>());
}

// Row pairs [oy0, oy1) in steps of 2 RP, columns from c0, channels [co0, co0 + G).
template <int RP, int F, bool T, int G>
void rows_pool_tiles(const ConvArgs& a, int oy0, int oy1, int c0, int co0) {
    constexpr int NX = 2 * F + (T ? 1 : 0);    // accumulators a row pair and channel
    constexpr int vecs = F + (T ? 1 : 0);      // vectors of a row pair's max
    const size_t pitch = size_t(a.iw) * a.ci;  // floats between input rows
    const int pw = a.ow / 2;
    // Pooled columns from c0 / 2: kHalf from each whole vector, then the pair's.
    const int valid = std::min(F * kHalf + (T ? (a.ow - c0 - F * kWidth) / 2 : 0), pw - c0 / 2);
    const bool relu = a.relu;
    const float* bias = a.bias + co0;  // added to the pooled sums (see conv_tile)
    for (int oy = oy0; oy < oy1; oy += 2 * RP) {
        V acc[RP][NX][G];
#pragma GCC unroll 2
        for (int r = 0; r < RP; ++r)
#pragma GCC unroll 5
            for (int i = 0; i < NX; ++i)
#pragma GCC unroll 16
                for (int g = 0; g < G; ++g) acc[r][i][g] = V{};
        // One tap: the input rows at r0 (from column c0), the weights at wk.
        const auto tap = [&](const float* r0, const float* wk) __attribute__((always_inline)) {
            V x[RP][NX];
#pragma GCC unroll 2
            for (int r = 0; r < RP; ++r) {
                const float* lo = r0 + 2 * r * pitch;
#pragma GCC unroll 2
                for (int f = 0; f < F; ++f) {
                    x[r][2 * f] = load(lo + f * kWidth);
                    x[r][2 * f + 1] = load(lo + pitch + f * kWidth);
                }
                if constexpr (T) x[r][NX - 1] = load_halves(lo + F * kWidth, lo + pitch + F * kWidth);
            }
#pragma GCC unroll 16
            for (int g = 0; g < G; ++g) {
                const float w = wk[g];
#pragma GCC unroll 2
                for (int r = 0; r < RP; ++r)
#pragma GCC unroll 5
                    for (int i = 0; i < NX; ++i) acc[r][i][g] += x[r][i] * w;
            }
        };
        for (int ky = 0; ky < a.kh; ++ky) {
            const float* row = a.x + size_t(oy + ky) * pitch + c0;
            const float* wr = a.hwio + size_t(ky) * a.kw * a.ci * a.co + co0;
            if (a.ci == 1) {  // one loop: the first layers
                for (int kx = 0; kx < a.kw; ++kx) tap(row + kx, wr + size_t(kx) * a.co);
                continue;
            }
            for (int kx = 0; kx < a.kw; ++kx)
                for (int c = 0; c < a.ci; ++c) tap(row + size_t(c) * a.iw + kx, wr + size_t(kx * a.ci + c) * a.co);
        }
#pragma GCC unroll 2
        for (int r = 0; r < RP; ++r) {
            const int py = oy / 2 + r;
            V m[G][2];  // pooled columns: up to 2 vectors a channel
#pragma GCC unroll 16
            for (int g = 0; g < G; ++g) {
                V rows[3];
#pragma GCC unroll 2
                for (int f = 0; f < F; ++f)
                    rows[f] = acc[r][2 * f][g] > acc[r][2 * f + 1][g] ? acc[r][2 * f][g] : acc[r][2 * f + 1][g];
                if constexpr (T) {  // the pair's max in the lower half
                    const V t = acc[r][NX - 1][g], u = swap_halves(t);
                    rows[F] = t > u ? t : u;
                }
                m[g][0] = pool_pairs(rows[0], rows[vecs > 1 ? 1 : 0]);
                if constexpr (vecs == 3)
                    m[g][1] = pool_pairs(rows[2], rows[2]);
                else
                    m[g][1] = V{};  // copied whole below
#pragma GCC unroll 2
                for (int k = 0; k < (vecs + 1) / 2; ++k) {
                    m[g][k] += bias[g];  // max(a) + b = max(a + b)
                    if (relu) m[g][k] = m[g][k] < 0.f ? 0.f : m[g][k];  // NaN stays NaN, as in TensorFlow
                }
            }
            if (a.planar_out) {
                float* y = a.y + size_t(py) * pw * a.co + c0 / 2;
#pragma GCC unroll 16
                for (int g = 0; g < G; ++g)
#pragma GCC unroll 2
                    for (int k = 0; k < (vecs + 1) / 2; ++k)
                        store(y + size_t(co0 + g) * pw + k * kWidth, m[g][k], valid - k * kWidth);
                continue;
            }
            alignas(64) float pooled[G][2 * kWidth];
#pragma GCC unroll 16
            for (int g = 0; g < G; ++g) std::memcpy(pooled[g], m[g], sizeof m[g]);
            float* y = a.y + (size_t(py) * pw + c0 / 2) * a.ldy + co0;
            for (int q = 0; q < valid; ++q, y += a.ldy)
#pragma GCC unroll 16
                for (int g = 0; g < G; ++g) y[g] = pooled[g][q];
        }
    }
}

// The tiles' shapes: whole vectors a row, the paired tail, row pairs.
struct RowsShape {
    int f, t, rp;
};
constexpr RowsShape kRowsShapes[] = {{2, 0, 1}, {1, 0, 1}, {1, 1, 1}, {2, 1, 1}, {0, 1, 1}, {0, 1, 2}};
constexpr int kRowsShapeCount = int(sizeof kRowsShapes / sizeof kRowsShapes[0]);

// Output channels a tile of `shape` computes at once: its accumulators and inputs
// within the register file (32 AVX-512, 16 AVX2 or SSE registers; the broadcast
// weight may stay a memory operand).
constexpr int rows_channels(RowsShape s) {
    const int x = s.rp * (2 * s.f + s.t);
    return std::max(1, std::min(16, ((kWidth == 16 ? 32 : 16) - x) / x));
}

using RowsFn = void (*)(const ConvArgs&, int, int, int, int);
template <int S, size_t... I>
constexpr std::array<RowsFn, sizeof...(I)> rows_fns(std::index_sequence<I...>) {
    constexpr RowsShape s = kRowsShapes[S];
    return {&rows_pool_tiles < s.rp, s.f, s.t != 0, int(I) + 1 > ...};
}
template <int S>
RowsFn rows_fn(int g) {
    static constexpr auto fns = rows_fns<S>(std::make_index_sequence<rows_channels(kRowsShapes[S])>());
    return fns[g - 1];
}
template <size_t... S>
RowsFn rows_fn(int shape, int g, std::index_sequence<S...>) {
    RowsFn fn = nullptr;
    ((shape == int(S) ? (fn = rows_fn<int(S)>(g), 0) : 0), ...);
    return fn;
}

constexpr int rows_shape(int f, int t, int rp) {
    for (int i = 0; i < kRowsShapeCount; ++i)
        if (kRowsShapes[i].f == f && kRowsShapes[i].t == t && kRowsShapes[i].rp == rp) return i;
    return -1;
}

// Runs `shape`'s tiles over its columns [c0, ...) and every row pair, all channels in
// equal groups (32 channels as 7, 7, 6, 6, 6 rather than 7, 7, 7, 7, 4).
void rows_pool_columns(const ConvArgs& a, int shape, int c0) {
    const RowsShape s = kRowsShapes[shape];
    const int most = rows_channels(s), count = (a.co + most - 1) / most;
    for (int k = 0, co0 = 0; k < count; ++k) {
        const int g = (a.co - co0) / (count - k);
        const RowsFn fn = rows_fn(shape, g, std::make_index_sequence<kRowsShapeCount>());
        // Pairs of row pairs, then a last pair alone.
        const RowsFn one = rows_fn(rows_shape(s.f, s.t, 1), g, std::make_index_sequence<kRowsShapeCount>());
        const int pairs = (a.row_end - a.row_begin) / 2, split = a.row_begin + (pairs - pairs % s.rp) * 2;
        if (split > a.row_begin) fn(a, a.row_begin, split, c0, co0);
        if (split < a.row_end) one(a, split, a.row_end, c0, co0);
        co0 += g;
    }
}

void conv_rows_pool(const ConvArgs& a) {
    // The row pair's columns: whole vectors, then a tail: in half a vector, paired.
    const int whole = a.ow / kWidth, rest = a.ow % kWidth;
    const bool paired = rest > 0 && rest <= kHalf;
    int vectors = whole + (rest > kHalf ? 1 : 0), c0 = 0;
    for (; vectors > 2 || (vectors == 2 && !paired); vectors -= 2, c0 += 2 * kWidth) rows_pool_columns(a, 0, c0);
    if (vectors == 2)
        rows_pool_columns(a, rows_shape(2, 1, 1), c0);
    else if (vectors == 1)
        rows_pool_columns(a, rows_shape(1, paired, 1), c0);
    else if (paired)
        rows_pool_columns(a, rows_shape(0, 1, 2), c0);
}

// Images in lanes: a group of kWidth images, each tensor interleaved (value v of
// image l at v * kWidth + l), so that every lane holds an output whatever the
// shapes: convolutions with few channels, which fill a 16-channel block or a row's
// vectors only in part, run at full width at batch >= kWidth. The terms of every sum
// come in conv_tile's order: the same bits as the per-image kernels. AVX-512 only:
// AVX2's 16 registers hold tiles of 2 channels, which gained 3% on lenet-keras and
// lost 2% on lenet5 (measured).
#if defined(__AVX512F__)

// In-register transpose of a kWidth x kWidth block: after the stage of distance d,
// bit d of a value's row and column have swapped.
#if defined(__GNUC__) && !defined(__clang__)
template <int D, bool Hi, size_t... J>
constexpr VI swap_mask(std::index_sequence<J...>) {
    return VI{int((J & D) ? (Hi ? kWidth + J : kWidth + J - D) : (Hi ? J + D : J))...};
}
template <int D>
inline void transpose_stage(V* r) {
    constexpr VI lo = swap_mask<D, false>(std::make_index_sequence<kWidth>());
    constexpr VI hi = swap_mask<D, true>(std::make_index_sequence<kWidth>());
#pragma GCC unroll 16
    for (int i = 0; i < kWidth; ++i)
        if (!(i & D)) {
            const V a = r[i], b = r[i + D];
            r[i] = __builtin_shuffle(a, b, lo);
            r[i + D] = __builtin_shuffle(a, b, hi);
        }
}
inline void transpose(V* r) {
    transpose_stage<1>(r);
    if constexpr (kWidth > 2) transpose_stage<2>(r);
    if constexpr (kWidth > 4) transpose_stage<4>(r);
    if constexpr (kWidth > 8) transpose_stage<8>(r);
}
#else
inline void transpose(V* r) {
    V t[kWidth];
    for (int i = 0; i < kWidth; ++i)
        for (int j = 0; j < kWidth; ++j) t[i][j] = r[j][i];
    for (int i = 0; i < kWidth; ++i) r[i] = t[i];
}
#endif

// dst[k * kWidth + l] = src[l * stride + k], k < count: kWidth runs into one interleaved.
void interleave(const float* src, size_t stride, int count, float* dst) {
    int k = 0;
    for (; k + kWidth <= count; k += kWidth) {
        V r[kWidth];
#pragma GCC unroll 16
        for (int l = 0; l < kWidth; ++l) r[l] = load(src + l * stride + k);
        transpose(r);
#pragma GCC unroll 16
        for (int i = 0; i < kWidth; ++i) std::memcpy(dst + size_t(k + i) * kWidth, &r[i], sizeof(V));
    }
    for (; k < count; ++k)
        for (int l = 0; l < kWidth; ++l) dst[size_t(k) * kWidth + l] = src[l * stride + k];
}

// dst[l * stride + k] = src[k * kWidth + l], k < count: the inverse.
void deinterleave(const float* src, int count, float* dst, size_t stride) {
    int k = 0;
    for (; k + kWidth <= count; k += kWidth) {
        V r[kWidth];
#pragma GCC unroll 16
        for (int i = 0; i < kWidth; ++i) r[i] = load(src + size_t(k + i) * kWidth);
        transpose(r);
#pragma GCC unroll 16
        for (int l = 0; l < kWidth; ++l) std::memcpy(dst + l * stride + k, &r[l], sizeof(V));
    }
    for (; k < count; ++k)
        for (int l = 0; l < kWidth; ++l) dst[l * stride + k] = src[size_t(k) * kWidth + l];
}

// Tiles of a convolution on interleaved images along output row oy: pooled, the
// 2x2 conv outputs of each pooled pixel, else P outputs a tile; `count` outputs from
// conv column ox (pooled: 2 ox). G output channels from co0; output pixel i's result
// vectors to dst + i * ps + g * gs.
template <bool Pool, int P, int G>
void il_tiles(const ConvArgs& a, int oy, int ox, int count, int co0, float* dst, size_t gs, size_t ps) {
    constexpr int NP = Pool ? 4 : P;
    const size_t px = size_t(a.ci) * kWidth;  // floats between neighbouring input pixels
    const size_t row = size_t(a.iw) * px;     // between input rows
    size_t off[NP];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) off[q] = Pool ? (q / 2) * row + (q % 2) * px : q * px;
    // A window row's (kx, c) inputs are consecutive here as in NHWC: one loop.
    const int run = a.kw * a.ci;
    const bool relu = a.relu;
    for (int i = 0; i < count; i += Pool ? 1 : P, dst += (Pool ? 1 : P) * ps) {
        const int x0 = ox + (Pool ? 2 * i : i);
        V acc[NP][G];
#pragma GCC unroll 4
        for (int q = 0; q < NP; ++q)
#pragma GCC unroll 8
            for (int g = 0; g < G; ++g) acc[q][g] = V{};
        for (int ky = 0; ky < a.kh; ++ky) {
            const float* xb = a.x + size_t(oy + ky) * row + size_t(x0) * px;
            const float* wk = a.hwio + size_t(ky) * run * a.co + co0;
            for (int j = 0; j < run; ++j, xb += kWidth, wk += a.co) {
                V x[NP];
#pragma GCC unroll 4
                for (int q = 0; q < NP; ++q) x[q] = load(xb + off[q]);
#pragma GCC unroll 8
                for (int g = 0; g < G; ++g) {
                    const float w = wk[g];
#pragma GCC unroll 4
                    for (int q = 0; q < NP; ++q) acc[q][g] += x[q] * w;
                }
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; ++g) {
            const float b = a.bias[co0 + g];  // after the pool: max(a) + b = max(a + b)
            if constexpr (Pool) {
                const V t = acc[0][g] > acc[1][g] ? acc[0][g] : acc[1][g];
                const V u = acc[2][g] > acc[3][g] ? acc[2][g] : acc[3][g];
                V m = (t > u ? t : u) + b;
                if (relu) m = m < 0.f ? 0.f : m;  // NaN stays NaN, as in TensorFlow
                std::memcpy(dst + g * gs, &m, sizeof m);
            } else {
#pragma GCC unroll 4
                for (int q = 0; q < NP; ++q) {
                    V m = acc[q][g] + b;
                    if (relu) m = m < 0.f ? 0.f : m;
                    std::memcpy(dst + q * ps + g * gs, &m, sizeof m);
                }
            }
        }
    }
}

// Accumulators, inputs and a broadcast weight within the register file.
constexpr int kIlChannels = kWidth == 16 ? 6 : 2;
using IlFn = void (*)(const ConvArgs&, int, int, int, int, float*, size_t, size_t);
template <bool Pool, int P, size_t... I>
constexpr std::array<IlFn, sizeof...(I)> il_fns(std::index_sequence<I...>) {
    return {&il_tiles<Pool, P, int(I) + 1>...};
}

// One group of kWidth images: x interleaved and padded (ih x iw x ci); output rows
// [row_begin, row_end) (pairs when pooled) interleaved to y, or each image's to
// y + l * y_image (NHWC or row-planar), through a row of a.stage.
void conv_il(const ConvArgs& a) {
    static constexpr auto pooled = il_fns<true, 1>(std::make_index_sequence<kIlChannels>());
    static constexpr auto quads = il_fns<false, 4>(std::make_index_sequence<kIlChannels>());
    static constexpr std::array<std::array<IlFn, kIlChannels>, 3> rest = {
        il_fns<false, 1>(std::make_index_sequence<kIlChannels>()),
        il_fns<false, 2>(std::make_index_sequence<kIlChannels>()),
        il_fns<false, 3>(std::make_index_sequence<kIlChannels>())};
    const int step = a.pool ? 2 : 1;
    const int ow = a.pool ? a.ow / 2 : a.ow;  // outputs a row
    const size_t line = size_t(ow) * a.co;    // floats of an output row, per image
    const int count = (a.co + kIlChannels - 1) / kIlChannels;
    for (int oy = a.row_begin; oy < a.row_end; oy += step) {
        const int r = oy / step;
        float* out = a.il_out == 0 ? a.y + size_t(r) * line * kWidth : a.stage;
        // Interleaved and NHWC rows put channels last; row-planar rows put them first.
        const size_t gs = a.il_out == 2 ? size_t(ow) * kWidth : kWidth;
        const size_t ps = a.il_out == 2 ? kWidth : size_t(a.co) * kWidth;
        for (int k = 0, co0 = 0; k < count; ++k) {
            const int g = (a.co - co0) / (count - k);
            float* at = out + co0 * gs;
            if (a.pool) {
                pooled[g - 1](a, oy, 0, ow, co0, at, gs, ps);
            } else {
                const int whole = ow / 4 * 4;
                if (whole) quads[g - 1](a, oy, 0, whole, co0, at, gs, ps);
                if (whole < ow) rest[ow - whole - 1][g - 1](a, oy, whole, ow - whole, co0, at + whole * ps, gs, ps);
            }
            co0 += g;
        }
        if (a.il_out != 0) deinterleave(a.stage, int(line), a.y + size_t(r) * line, a.y_image);
    }
}
#endif

// Pooling over NHWC with windows clipped to the image (TensorFlow's 'same'
// pooling ignores padding pixels): the window's rows are folded into one row
// first (contiguous, vectorizes), then each output pixel folds its columns.
void pool(const PoolArgs& a) {
    const size_t rowlen = size_t(a.iw) * a.c;
    const int c = a.c;
    for (int oy = 0; oy < a.oh; ++oy) {
        const int y0 = std::max(oy * a.sh - a.pad_top, 0);
        const int y1 = std::min(oy * a.sh - a.pad_top + a.kh, a.ih);
        const float* row = a.x + size_t(y0) * rowlen;
        if (y1 - y0 > 1) {
            float* acc = a.row;
            std::memcpy(acc, row, rowlen * sizeof(float));
            for (int iy = y0 + 1; iy < y1; ++iy) {
                const float* r = a.x + size_t(iy) * rowlen;
                if (a.max)
                    for (size_t i = 0; i < rowlen; ++i) acc[i] = acc[i] < r[i] ? r[i] : acc[i];
                else
                    for (size_t i = 0; i < rowlen; ++i) acc[i] += r[i];
            }
            row = acc;
        }
        float* out = a.y + size_t(oy) * a.ow * c;
        for (int ox = 0; ox < a.ow; ++ox, out += c) {
            const int x0 = std::max(ox * a.sw - a.pad_left, 0);
            const int x1 = std::min(ox * a.sw - a.pad_left + a.kw, a.iw);
            std::memcpy(out, row + size_t(x0) * c, c * sizeof(float));
            for (int ix = x0 + 1; ix < x1; ++ix) {
                const float* s = row + size_t(ix) * c;
                if (a.max)
                    for (int k = 0; k < c; ++k) out[k] = out[k] < s[k] ? s[k] : out[k];
                else
                    for (int k = 0; k < c; ++k) out[k] += s[k];
            }
            if (!a.max) {
                const float inv = 1.f / float((y1 - y0) * (x1 - x0));
                for (int k = 0; k < c; ++k) out[k] *= inv;
            }
        }
    }
}

// Winograd F(m x m, r x r) transforms, alpha = m + r - 1: each tile's alpha x alpha
// window d to B^T d B, and each tile's alpha x alpha products to A^T m A, a vector
// of channels at a time. The matrices are constants: unrolled, the zeros of B^T
// and A^T cost nothing and their ones no multiplication. Precision "exact"
// (WinogradArgs::exact) computes all of it in double, a register of doubles at a time.
template <int M, int R>
constexpr WinogradMatrices<M, R> kWinograd = winograd_matrices<M, R>();

// A register of doubles (half as many lanes as of floats), and the float half that widens
// to one.
constexpr int kDWidth = kWidth / 2;
using VD = double __attribute__((vector_size(sizeof(V))));
using VH = float __attribute__((vector_size(sizeof(V) / 2)));

inline VD widen(const float* p) {
    VH h;
    std::memcpy(&h, p, sizeof h);
    return __builtin_convertvector(h, VD);
}
inline VD load(const double* p) {
    VD v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
// Rounds v to float once and stores its first `count` lanes (all when count >= kDWidth).
inline void store(float* y, VD v, int count) {
    const VH h = __builtin_convertvector(v, VH);
    if (count >= kDWidth) {
        std::memcpy(y, &h, sizeof h);
        return;
    }
    for (int l = 0; l < count; ++l) y[l] = h[l];
}

// The register type of T: V for float, VD for double.
template <class T>
using VecOf = std::conditional_t<std::is_same_v<T, double>, VD, V>;
template <class T>
constexpr int kLanesOf = int(sizeof(V) / sizeof(T));

// sum_k c[k] x[k] over the nonzero c[k] (zero when all are), in Vec's arithmetic.
template <int N, class Vec>
inline Vec combine(const double* c, const Vec* x) {
    using T = std::remove_cv_t<std::remove_reference_t<decltype(x[0][0])>>;
    Vec acc{};
    bool first = true;
#pragma GCC unroll 8
    for (int k = 0; k < N; ++k) {
        if (c[k] == 0) continue;
        const Vec term = c[k] == 1 ? x[k] : c[k] == -1 ? -x[k] : x[k] * T(c[k]);
        acc = first ? term : acc + term;
        first = false;
    }
    return acc;
}

// The matrices' symmetry, used where the sums are in double (exact): the rows of B^T for
// the points p and -p are one polynomial at x and -x, row_{-p}[k] = s (-1)^k row_p[k], so
// both come from the row's even and odd halves (E + O and s (E - O)); A^T's columns for p
// and -p likewise, so A^T m takes m_p + m_{-p} and m_p - m_{-p} once. F(4, 5)'s transforms
// do about a quarter fewer operations. Float32 keeps the plain sums, whose rounding the
// fast path's figures describe.
template <int Rows, int Cols>
struct Mirrors {
    // partner[i]: the row (of B^T; column of A^T) mirroring i, after it, or -1; sign[i]: s.
    std::array<int, Rows> partner{}, sign{};
    std::array<bool, Rows> second{};  // i mirrors an earlier one
};
template <int Rows, int Cols>
constexpr Mirrors<Rows, Cols> row_mirrors(const std::array<double, Rows * Cols>& a) {
    Mirrors<Rows, Cols> out;
    for (int i = 0; i < Rows; ++i) out.partner[i] = -1;
    for (int i = 0; i < Rows; ++i) {
        if (out.second[i]) continue;
        for (int j = i + 1; j < Rows && out.partner[i] < 0; ++j) {
            if (out.second[j]) continue;
            for (int s = -1; s <= 1; s += 2) {
                bool same = true, odd = false, even = false;
                for (int k = 0; k < Cols; ++k) {
                    const double want = (k % 2 ? -s : s) * a[i * Cols + k];
                    same = same && a[j * Cols + k] == want;
                    odd = odd || (k % 2 && a[i * Cols + k] != 0);
                    even = even || (k % 2 == 0 && a[i * Cols + k] != 0);
                }
                if (same && odd && even) {  // a true pair: the row differs from its mirror
                    out.partner[i] = j;
                    out.sign[i] = s;
                    out.second[j] = true;
                    break;
                }
            }
        }
    }
    return out;
}
template <int Rows, int Cols>
constexpr std::array<double, Rows * Cols> transposed(const std::array<double, Rows * Cols>& a) {
    std::array<double, Rows * Cols> t{};
    for (int i = 0; i < Rows; ++i)
        for (int k = 0; k < Cols; ++k) t[k * Rows + i] = a[i * Cols + k];
    return t;
}
// The coefficients of row i at the indices of one parity (the others zero).
template <int N>
constexpr std::array<double, N> parity_part(const double* row, int parity) {
    std::array<double, N> out{};
    for (int k = 0; k < N; ++k) out[k] = k % 2 == parity ? row[k] : 0;
    return out;
}

template <int M, int R>
struct WinogradMirrored {
    static constexpr int A = M + R - 1;
    static constexpr auto& w = kWinograd<M, R>;
    static constexpr auto bt_rows = row_mirrors<A, A>(w.bt);
    static constexpr auto at_cols = row_mirrors<A, M>(transposed<M, A>(w.at));
    // B^T's rows split into even and odd parts.
    static constexpr auto bt_parts = [] {
        std::array<std::array<double, A>, 2 * A> p{};
        for (int i = 0; i < A; ++i) {
            p[2 * i] = parity_part<A>(&w.bt[i * A], 0);
            p[2 * i + 1] = parity_part<A>(&w.bt[i * A], 1);
        }
        return p;
    }();
    // A^T with the columns that mirror an earlier one zeroed: their values enter through the
    // sums and differences that replace the earlier one's.
    static constexpr auto at_kept = [] {
        std::array<double, M * A> k = w.at;
        for (int i = 0; i < M; ++i)
            for (int j = 0; j < A; ++j)
                if (at_cols.second[j]) k[i * A + j] = 0;
        return k;
    }();
};

// out = B^T x (A values), using the mirrored rows.
template <int M, int R, class Vec>
inline void apply_bt_mirrored(const Vec* x, Vec* out) {
    using W = WinogradMirrored<M, R>;
    constexpr int A = W::A;
#pragma GCC unroll 8
    for (int i = 0; i < A; ++i) {
        if (W::bt_rows.second[i]) continue;
        if (W::bt_rows.partner[i] < 0) {
            out[i] = combine<A>(&W::w.bt[i * A], x);
            continue;
        }
        const Vec even = combine<A>(W::bt_parts[2 * i].data(), x), odd = combine<A>(W::bt_parts[2 * i + 1].data(), x);
        out[i] = even + odd;
        out[W::bt_rows.partner[i]] = W::bt_rows.sign[i] > 0 ? even - odd : odd - even;
    }
}

// out = A^T x (M values from A), using the mirrored columns.
template <int M, int R, class Vec>
inline void apply_at_mirrored(const Vec* x, Vec* out) {
    using W = WinogradMirrored<M, R>;
    constexpr int A = W::A;
    Vec sums[A], differences[A];  // at column j: x_j + x_j' and x_j - x_j' (j' = partner)
#pragma GCC unroll 8
    for (int j = 0; j < A; ++j) {
        const int q = W::at_cols.partner[j];
        if (q < 0) {
            sums[j] = differences[j] = x[j];
            continue;
        }
        // A^T[i][q] = s (-1)^i A^T[i][j]: row i takes x_j + s (-1)^i x_q.
        const bool plus = W::at_cols.sign[j] > 0;
        sums[j] = plus ? x[j] + x[q] : x[j] - x[q];
        differences[j] = plus ? x[j] - x[q] : x[j] + x[q];
    }
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) out[i] = combine<A>(&W::at_kept[i * A], i % 2 ? differences : sums);
}

// B^T d B for every tile, channels a register of T at a time, into v (T's array).
template <int M, int R, class T>
void winograd_in_t(const WinogradArgs& a, T* v_all) {
    constexpr int A = M + R - 1;
    constexpr const auto& w = kWinograd<M, R>;
    using Vec = VecOf<T>;
    const size_t plane = a.v_plane;
    for (int t = 0; t < a.count; ++t) {
        const float* src = a.tiles[t].src;
        T* v = v_all + size_t(t) * a.ci;
        for (int c = 0; c < a.ci; c += kLanesOf<T>) {
            Vec rows[A][A];  // B^T d, transposed: rows[j][i]
#pragma GCC unroll 8
            for (int j = 0; j < A; ++j) {
                Vec d[A];
#pragma GCC unroll 8
                for (int k = 0; k < A; ++k) {
                    const float* at = src + k * a.src_row + size_t(j) * a.ci + c;
                    if constexpr (std::is_same_v<T, double>)
                        d[k] = widen(at);
                    else
                        d[k] = load(at);
                }
                if constexpr (std::is_same_v<T, double>)
                    apply_bt_mirrored<M, R>(d, rows[j]);
                else
#pragma GCC unroll 8
                    for (int i = 0; i < A; ++i) rows[j][i] = combine<A>(&w.bt[i * A], d);
            }
#pragma GCC unroll 8
            for (int i = 0; i < A; ++i) {
                Vec row[A];
#pragma GCC unroll 8
                for (int k = 0; k < A; ++k) row[k] = rows[k][i];
                Vec out[A];
                if constexpr (std::is_same_v<T, double>)
                    apply_bt_mirrored<M, R>(row, out);
                else
#pragma GCC unroll 8
                    for (int j = 0; j < A; ++j) out[j] = combine<A>(&w.bt[j * A], row);
#pragma GCC unroll 8
                for (int j = 0; j < A; ++j) std::memcpy(v + (i * A + j) * plane + c, &out[j], sizeof(Vec));
            }
        }
    }
}

// A^T m A + bias for every tile, the fused pool and ReLU, channels a register of T at a time,
// from m (T's array); double rounded to float once, at the store.
template <int M, int R, class T>
void winograd_out_t(const WinogradArgs& a, const T* m_all) {
    constexpr int A = M + R - 1;
    constexpr const auto& w = kWinograd<M, R>;
    using Vec = VecOf<T>;
    const size_t plane = a.m_plane;
    for (int t = 0; t < a.count; ++t) {
        const WinogradTile& tile = a.tiles[t];
        const T* m = m_all + size_t(t) * a.ldm;
        for (int o = 0; o < a.co; o += kLanesOf<T>) {
            Vec cols[M][A];  // A^T m
#pragma GCC unroll 8
            for (int j = 0; j < A; ++j) {
                Vec col[A];
#pragma GCC unroll 8
                for (int k = 0; k < A; ++k) col[k] = load(m + (k * A + j) * plane + o);
                Vec at_col[M];
                if constexpr (std::is_same_v<T, double>)
                    apply_at_mirrored<M, R>(col, at_col);
                else
#pragma GCC unroll 4
                    for (int i = 0; i < M; ++i) at_col[i] = combine<A>(&w.at[i * A], col);
#pragma GCC unroll 4
                for (int i = 0; i < M; ++i) cols[i][j] = at_col[i];
            }
            Vec y[M][M];
#pragma GCC unroll 4
            for (int i = 0; i < M; ++i) {
                if constexpr (std::is_same_v<T, double>)
                    apply_at_mirrored<M, R>(cols[i], y[i]);
                else
#pragma GCC unroll 4
                    for (int l = 0; l < M; ++l) y[i][l] = combine<A>(&w.at[l * A], cols[i]);
            }
            Vec bias;
            if constexpr (std::is_same_v<T, double>)
                bias = widen(a.bias + o);
            else
                bias = load(a.bias + o);
            const int left = a.co - o;
            const auto put = [&](int i, int l, Vec r) __attribute__((always_inline)) {
                if (a.relu) r = r < T(0) ? T(0) : r;  // NaN stays NaN, as in TensorFlow
                store(tile.dst + i * a.dst_row + size_t(l) * a.co + o, r, left);
            };
            if (a.pool) {
                for (int i = 0; i < tile.rows; ++i)
                    for (int l = 0; l < tile.cols; ++l) {
                        const Vec* top = y[2 * i];
                        const Vec* bottom = y[2 * i + 1];
                        const Vec t0 = top[2 * l] > top[2 * l + 1] ? top[2 * l] : top[2 * l + 1];
                        const Vec t1 = bottom[2 * l] > bottom[2 * l + 1] ? bottom[2 * l] : bottom[2 * l + 1];
                        put(i, l, (t0 > t1 ? t0 : t1) + bias);  // max(a) + b = max(a + b)
                    }
                continue;
            }
            for (int i = 0; i < tile.rows; ++i)
                for (int l = 0; l < tile.cols; ++l) put(i, l, y[i][l] + bias);
        }
    }
}

// F(m, r) from m and alpha = m + r - 1, in the precision asked.
template <int M, int R>
void winograd_in_mr(const WinogradArgs& a) {
    a.exact ? winograd_in_t<M, R>(a, a.v64) : winograd_in_t<M, R>(a, a.v);
}
template <int M, int R>
void winograd_out_mr(const WinogradArgs& a) {
    a.exact ? winograd_out_t<M, R>(a, static_cast<const double*>(a.m64))
            : winograd_out_t<M, R>(a, static_cast<const float*>(a.m_t));
}
void winograd_in(const WinogradArgs& a) {
    if (a.m == 4) return a.alpha == 6 ? winograd_in_mr<4, 3>(a) : winograd_in_mr<4, 5>(a);
    a.alpha == 4 ? winograd_in_mr<2, 3>(a) : winograd_in_mr<2, 5>(a);
}
void winograd_out(const WinogradArgs& a) {
    if (a.m == 4) return a.alpha == 6 ? winograd_out_mr<4, 3>(a) : winograd_out_mr<4, 5>(a);
    a.alpha == 4 ? winograd_out_mr<2, 3>(a) : winograd_out_mr<2, 5>(a);
}

// Winograd's products: for each tile position, m (count x ldm) = v (count x ci) times
// that position's u (ci x ldm, packed as conv's with kh = kw = 1), in T (float, or
// double for exact). Each sum as conv_tile's on a 1x1 convolution: the channels in order,
// from zero. One call for all of a position's tiles, no bias, no activation, no bounds:
// the short sums (ci = 32 on lenet-tf) left conv_tile a fifth of its time in its setup
// and epilogue (PERFORMANCE.md, issue 61).
template <int P, int B, class T>
void products_tile(const T* v, int ci, const T* u, T* m, int ldm) {
    using Vec = VecOf<T>;
    constexpr int per_block = kLanes / kLanesOf<T>;
    constexpr int NV = B * per_block;
    const size_t block = size_t(ci) * kLanes;
    Vec acc[P][NV];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
        for (int n = 0; n < NV; ++n) acc[p][n] = Vec{};
    for (int c = 0; c < ci; ++c) {
        Vec w[NV];
#pragma GCC unroll 16
        for (int n = 0; n < NV; ++n)
            w[n] = load(u + (n / per_block) * block + size_t(c) * kLanes + (n % per_block) * kLanesOf<T>);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
            const T x = v[size_t(p) * ci + c];
#pragma GCC unroll 16
            for (int n = 0; n < NV; ++n) acc[p][n] += x * w[n];
        }
    }
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 16
        for (int n = 0; n < NV; ++n) std::memcpy(m + size_t(p) * ldm + n * kLanesOf<T>, &acc[p][n], sizeof(Vec));
}

template <class T>
using ProductsFn = void (*)(const T*, int, const T*, T*, int);
template <int B, class T, size_t... I>
constexpr std::array<ProductsFn<T>, sizeof...(I)> products_tiles(std::index_sequence<I...>) {
    return {&products_tile<int(I) + 1, B, T>...};
}

template <int B, class T>
void products_blocks(const WinogradArgs& a, const T* v, const T* u, T* m, int cb0) {
    // Rows of B blocks within the accumulator budget, counted in registers of T.
    constexpr int most = std::max(1, std::min(kMaxTile, kAccBudget / (B * kLanes / kLanesOf<T>)));
    static constexpr auto table = products_tiles<B, T>(std::make_index_sequence<most>());
    const T* ub = u + size_t(cb0) * a.ci * kLanes;
    split_even(a.count, most, [&](int t, int n) {
        table[n - 1](v + size_t(t) * a.ci, a.ci, ub, m + size_t(t) * a.ldm + cb0 * kLanes, a.ldm);
    });
}

template <class T>
void products_positions(const WinogradArgs& a, const T* v_all, const T* u_all, T* m_all, int first, int last) {
    // Blocks a pass: as conv's (kBlocksPerPass), counted in registers of T.
    constexpr int per_pass = kLanes / kLanesOf<T> == 1 ? 2 : 1;
    const int blocks = a.ldm / kLanes;
    for (int p = first; p < last; ++p) {
        const T* v = v_all + p * a.v_plane;
        const T* u = u_all + p * a.u_plane;
        T* m = m_all + p * a.m_plane;
        int cb = 0;
        for (; cb + per_pass <= blocks; cb += per_pass) products_blocks<per_pass>(a, v, u, m, cb);
        if (cb < blocks) products_blocks<1>(a, v, u, m, cb);
    }
}

void winograd_products(const WinogradArgs& a, int first, int last) {
    a.exact ? products_positions<double>(a, a.v64, a.u64, a.m64, first, last)
            : products_positions<float>(a, a.v, a.u, a.m_t, first, last);
}

// Independent chains of multiply-adds, enough to cover the FMA latency on every
// FMA port, within the register file.
constexpr int kChains = 12;

float mac_loop(int64_t iters) {
    V acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = V{} + float(c) * 1e-3f;
    const V m = V{} + 0.999999f, add = V{} + 1e-6f;
    for (int64_t i = 0; i < iters; ++i)
#pragma GCC unroll 12
        for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * m + add;
    V sum{};
    for (int c = 0; c < kChains; ++c) sum += acc[c];
    float s = 0.f;
    for (int l = 0; l < kWidth; ++l) s += sum[l];
    return s;
}

}  // namespace
}  // namespace LENET_ISA

extern const KernelTable LENET_CAT(kTable_, LENET_ISA);
const KernelTable LENET_CAT(kTable_, LENET_ISA) = {LENET_STR(LENET_ISA),
                                                   LENET_ISA::kWidth,
                                                   LENET_ISA::kWidth == 16,
                                                   &LENET_ISA::conv,
                                                   &LENET_ISA::dense,
#if defined(__AVX512F__)
                                                   &LENET_ISA::conv_il,
                                                   &LENET_ISA::interleave,
                                                   &LENET_ISA::deinterleave,
#else
                                                   nullptr,
                                                   nullptr,
                                                   nullptr,
#endif
                                                   &LENET_ISA::conv_rows_pool,
                                                   &LENET_ISA::pool,
                                                   &LENET_ISA::winograd_in,
                                                   &LENET_ISA::winograd_products,
                                                   &LENET_ISA::winograd_out,
                                                   &LENET_ISA::mac_loop,
                                                   int64_t(LENET_ISA::kChains) * LENET_ISA::kWidth};

}  // namespace lenet::cpu
