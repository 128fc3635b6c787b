// The fused path: a whole LeNet-sized network as one CUDA kernel. Each thread
// block runs every layer for a tile of images, its activations (and the conv
// weights) in shared memory, the dense weights read through the caches; one launch
// per call instead of one (or three) per layer, and nothing but the input and the
// answers crosses device memory. It takes sequential networks of convolutions
// (for a tile of several images, with the max pooling after them computed inside),
// pooling, dense layers, activations, affine steps and a final softmax whose
// activations fit in shared memory; anything else runs on cuDNN and cuBLAS
// (fused_plan says why). Whether it is faster than they are depends on the GPU and
// the batch: the executor times both when it plans (Backend::time_paths).
//
// This header is the program (what the planner decides, host C++) and the work
// of one phase of one op for thread `tid` of `threads` (host and device code).
// The kernel (fused.cu) runs the phases with a barrier between them; emulate()
// runs them on the host one thread index after another, which gives the same
// result, so the CPU checks the kernel's arithmetic and indexing in CI.
#pragma once

#include <math.h>

#include <cstdint>
#include <string>
#include <vector>

#include "../../net/network.h"
#include "../activation_math.h"
#include "completion.h"

#if defined(__CUDACC__)
#define LENET_FUSED_FN __host__ __device__ inline
#define LENET_UNROLL4 _Pragma("unroll 4")
#define LENET_UNROLL _Pragma("unroll")
#else
#define LENET_FUSED_FN inline
#define LENET_UNROLL4
#define LENET_UNROLL
#endif

namespace lenet::cuda::fused {

enum class Code : int { conv, max_pool, avg_pool, dense, activation, affine, softmax };
const char* to_string(Code c);

// One op of the program, over per-image CHW tensors in shared memory. Buffers: the
// block's shared memory holds two ping-pong regions (and the dense partial sums);
// image i of a region starts at base + i * stride.
struct Op {
    Code code = Code::activation;
    int in_c = 1, in_h = 1, in_w = 1, out_c = 1, out_h = 1, out_w = 1;
    int kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, pad_top = 0, pad_left = 0;  // conv or pool window
    // A max pooling fused after a convolution: its window over the conv's output
    // (conv_h x conv_w); pool_kh == 0 when there is none.
    int pool_kh = 0, pool_kw = 0, pool_sh = 1, pool_sw = 1, pool_top = 0, pool_left = 0, conv_h = 1, conv_w = 1;
    Activation act;
    bool log = false;   // softmax: its logarithm
    int splits = 1;     // dense: the input rows split over this many threads per output, summed in a second phase
    const float* weights = nullptr;  // conv OIHW; dense (in, out), rows in CHW order; affine scale
    const float* bias = nullptr;     // conv / dense bias (never null); affine shift
    int in_base = 0, in_stride = 0, out_base = 0, out_stride = 0, scratch_base = 0;  // floats into shared memory
    // conv: where its weights, then its bias, are copied into shared memory by a first
    // phase (-1: read from global memory), so that the inner loop waits on shared
    // memory's latency, not L2's.
    int staged = -1;
    // conv, one image a block (cuda_path "fast"): each thread computes this many adjacent
    // outputs of a column (conv_columns), 0 when it computes one.
    int column_block = 0;
    int step = -1;  // the step whose constants it uses (the convolution of a fused conv + pool)
    LENET_FUSED_FN int phases() const {
        return (code == Code::dense && splits > 1) || (code == Code::conv && staged >= 0) ? 2 : 1;
    }
    LENET_FUSED_FN int weight_count() const { return out_c * in_c * kh * kw; }
};

// Where a tile's input and output live in shared memory (the first op's input
// region, the last op's output region), per image.
struct Tile {
    int images = 1;  // per block: each weight read once serves this many images
    int input_size = 0, output_size = 0;
    int input_base = 0, input_stride = 0, output_base = 0, output_stride = 0;
};

// A network as the fused kernel runs it.
struct Program {
    std::vector<Op> ops;
    Tile tile;
    int threads = 256;      // per block
    int shared_floats = 0;  // per block
    std::string summary() const;  // e.g. "conv+max_pool 6x14x14, ..., dense 10, softmax; 4 images x 256 threads"
};

// What decides whether and how the fused path runs a network.
struct Limits {
    int shared_bytes = 227 * 1024;      // usable shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin)
    int64_t max_macs = 2'000'000;       // multiply-adds per image (see fused_plan)
    int64_t max_weight_bytes = 2 << 20;  // all constants
    bool column_blocks = false;          // conv columns of kColumnBlock outputs a thread (cuda_path "fast")
};

// Outputs of a column a thread computes in a column-blocked convolution (conv_columns).
constexpr int kColumnBlock = 4;

// The program for `steps` (weights and biases unset: the caller points them at
// its copies), or an empty `ops` with `why` saying what keeps the network off the
// fused path. `capacity` (the plan's batch) chooses the tile: up to 8 images per
// block while the grid keeps `min_blocks` blocks (enough to fill the GPU), within
// the shared memory limit.
//
// The size rule: one block computes a whole image, so its time per image is the
// network's multiply-adds over one SM's threads. Up to a few million per image
// (lenet5: 0.42 M) that can beat a launch per layer (measured on an H200: faster at
// batch 8, slower at batch 1; PERFORMANCE.md); beyond (lenet-tf: 13.9 M, 12.8 MB of
// dense weights that every tile reads again) it was 7-35x slower than cuDNN and
// cuBLAS, which spread each layer over the whole GPU (measured too), so it is not
// tried. At one image a block (small batches), pooling stays its own op: every
// conv position is then a thread's work.
Program fused_plan(const std::vector<Step>& steps, int capacity, int min_blocks, const Limits& limits,
                   std::string* why);

// A convolution of one image, each thread kColumnBlock adjacent outputs of a column
// (cuda_path "fast", a K x K kernel, K = 3 or 5, vertical stride and dilation 1): for each
// input channel, the K + 3 input rows' K values under the column and the K x K weights are
// loaded once for the 4 outputs (0.65 shared-memory loads a multiply-add instead of 2), the
// taps' loop unrolled whole. Neighbouring threads compute neighbouring columns, so that a
// warp's loads are neighbouring words, one per bank (issue 67: four rows of a row a thread
// put neighbours 4 words apart, 4-way bank conflicts). Each output takes its terms in the
// verified kernel's order (channel, kernel row, kernel column); rows and columns outside
// the image load as zeros, whose products add +0 to a sum that is never -0, which leaves
// it as skipping them does: the verified kernel's answers to the bit.
template <int K>
LENET_FUSED_FN void conv_columns(const Op& op, const float* in, float* out, const float* weights, const float* bias,
                                 int tid, int threads) {
    constexpr int R = kColumnBlock, X = R + K - 1;
    const int groups = (op.out_h + R - 1) / R, plane = op.out_h * op.out_w;
    const int tasks = op.out_c * groups * op.out_w, in_plane = op.in_h * op.in_w;
    for (int t = tid; t < tasks; t += threads) {
        const int oc = t / (groups * op.out_w), oy0 = t / op.out_w % groups * R, ox = t % op.out_w;
        const float* w_oc = weights + oc * op.in_c * K * K;
        const int y0 = oy0 - op.pad_top, x0 = ox * op.sw - op.pad_left;
        float acc[R];
        for (int r = 0; r < R; ++r) acc[r] = 0.f;
        for (int ic = 0; ic < op.in_c; ++ic) {
            const float* xc = in + ic * in_plane;
            const float* wc = w_oc + ic * K * K;
            float xv[X][K], w[K][K];
            LENET_UNROLL
            for (int j = 0; j < X; ++j) {
                const bool row_in = y0 + j >= 0 && y0 + j < op.in_h;
                LENET_UNROLL
                for (int kx = 0; kx < K; ++kx) {
                    const int x = x0 + kx * op.dw;
                    xv[j][kx] = row_in && x >= 0 && x < op.in_w ? xc[(y0 + j) * op.in_w + x] : 0.f;
                }
            }
            LENET_UNROLL
            for (int i = 0; i < K * K; ++i) w[i / K][i % K] = wc[i];
            LENET_UNROLL
            for (int ky = 0; ky < K; ++ky) LENET_UNROLL
            for (int kx = 0; kx < K; ++kx) LENET_UNROLL
            for (int r = 0; r < R; ++r) acc[r] = fmaf(xv[r + ky][kx], w[ky][kx], acc[r]);
        }
        const float b = bias[oc];
        for (int r = 0; r < R && oy0 + r < op.out_h; ++r)
            out[oc * plane + (oy0 + r) * op.out_w + ox] = activate(op.act, acc[r] + b);
    }
}

// The phase `phase` of `op` for thread `tid` of `threads`, over a tile of IPB
// images in shared memory `smem`. Every weight a thread reads serves the IPB
// images of the tile (their sums are held in registers side by side).
template <int IPB>
LENET_FUSED_FN void run_phase(const Op& op, int phase, float* smem, int tid, int threads) {
    const float* in = smem + op.in_base;
    float* out = smem + op.out_base;
    switch (op.code) {
        case Code::conv: {
            const int taps = op.kh * op.kw;
            const float* weights = op.weights;
            const float* bias = op.bias;
            if (op.staged >= 0) {
                const int count = op.weight_count();
                if (phase == 0) {  // the block copies the weights and biases in, coalesced
                    for (int i = tid; i < count + op.out_c; i += threads)
                        smem[op.staged + i] = i < count ? op.weights[i] : op.bias[i - count];
                    break;
                }
                weights = smem + op.staged;
                bias = weights + count;
            }
            if (IPB == 1 && op.column_block) {
                if (op.kw == 5)
                    conv_columns<5>(op, in, out, weights, bias, tid, threads);
                else
                    conv_columns<3>(op, in, out, weights, bias, tid, threads);
                break;
            }
            const bool pooled = op.pool_kh > 0;
            const int plane = op.out_h * op.out_w, total = op.out_c * plane;
            const int in_plane = op.in_h * op.in_w;
            for (int o = tid; o < total; o += threads) {
                const int oc = o / plane, oy = (o % plane) / op.out_w, ox = o % op.out_w;
                const float* w_oc = weights + oc * op.in_c * taps;
                const float b = bias[oc];
                // Each conv position of the pool window (or the one position): act(sum + bias), their max.
                const int wy0 = pooled ? oy * op.pool_sh - op.pool_top : oy;
                const int wx0 = pooled ? ox * op.pool_sw - op.pool_left : ox;
                const int wkh = pooled ? op.pool_kh : 1, wkw = pooled ? op.pool_kw : 1;
                float best[IPB];
                for (int i = 0; i < IPB; ++i) best[i] = -INFINITY;
                for (int py = 0; py < wkh; ++py) {
                    const int cy = wy0 + py;
                    if (pooled && (cy < 0 || cy >= op.conv_h)) continue;  // absent pixels: max ignores them
                    // The taps inside the image (the rest multiply zero padding).
                    const int y0 = cy * op.sh - op.pad_top;
                    int ky0 = 0, ky1 = op.kh;
                    while (ky0 < ky1 && y0 + ky0 * op.dh < 0) ++ky0;
                    while (ky1 > ky0 && y0 + (ky1 - 1) * op.dh >= op.in_h) --ky1;
                    for (int px = 0; px < wkw; ++px) {
                        const int cx = wx0 + px;
                        if (pooled && (cx < 0 || cx >= op.conv_w)) continue;
                        const int x0 = cx * op.sw - op.pad_left;
                        int kx0 = 0, kx1 = op.kw;
                        while (kx0 < kx1 && x0 + kx0 * op.dw < 0) ++kx0;
                        while (kx1 > kx0 && x0 + (kx1 - 1) * op.dw >= op.in_w) --kx1;
                        float acc[IPB];
                        for (int i = 0; i < IPB; ++i) acc[i] = 0.f;
                        for (int ic = 0; ic < op.in_c; ++ic) {
                            const float* xc = in + ic * in_plane;
                            const float* wc = w_oc + ic * taps;
                            for (int ky = ky0; ky < ky1; ++ky) {
                                const float* xr = xc + (y0 + ky * op.dh) * op.in_w + x0;
                                const float* wr = wc + ky * op.kw;
                                LENET_UNROLL4
                                for (int kx = kx0; kx < kx1; ++kx) {
                                    const float w = wr[kx];
                                    const int at = kx * op.dw;
                                    for (int i = 0; i < IPB; ++i) acc[i] = fmaf(xr[i * op.in_stride + at], w, acc[i]);
                                }
                            }
                        }
                        for (int i = 0; i < IPB; ++i) {
                            const float v = activate(op.act, acc[i] + b);
                            best[i] = v > best[i] || v != v ? v : best[i];  // NaN propagates, as the CPU's max does
                        }
                    }
                }
                for (int i = 0; i < IPB; ++i) out[i * op.out_stride + o] = best[i];
            }
            break;
        }
        case Code::max_pool:
        case Code::avg_pool: {
            const bool is_max = op.code == Code::max_pool;
            const int plane = op.out_h * op.out_w, total = op.out_c * plane;
            for (int o = tid; o < total * IPB; o += threads) {
                const int i = o / total, r = o % total;
                const int c = r / plane, oy = (r % plane) / op.out_w, ox = r % op.out_w;
                const float* x = in + i * op.in_stride + c * op.in_h * op.in_w;
                float acc = is_max ? -INFINITY : 0.f;
                int count = 0;
                for (int ky = 0; ky < op.kh; ++ky) {
                    const int iy = oy * op.sh - op.pad_top + ky;
                    if (iy < 0 || iy >= op.in_h) continue;  // absent pixels
                    for (int kx = 0; kx < op.kw; ++kx) {
                        const int ix = ox * op.sw - op.pad_left + kx;
                        if (ix < 0 || ix >= op.in_w) continue;
                        const float v = x[iy * op.in_w + ix];
                        if (is_max)
                            acc = v > acc || v != v ? v : acc;
                        else
                            acc += v;
                        ++count;
                    }
                }
                out[i * op.out_stride + r] = is_max ? acc : acc / float(count);
            }
            break;
        }
        case Code::dense: {
            const int units = op.out_c, rows = op.in_c * op.in_h * op.in_w, s = op.splits;
            if (phase == 0) {
                for (int t = tid; t < units * s; t += threads) {
                    const int j = t % units, part = t / units;
                    const int begin = int(int64_t(rows) * part / s), end = int(int64_t(rows) * (part + 1) / s);
                    float acc[IPB];
                    for (int i = 0; i < IPB; ++i) acc[i] = 0.f;
                    LENET_UNROLL4
                    for (int r = begin; r < end; ++r) {
                        const float w = op.weights[int64_t(r) * units + j];
                        for (int i = 0; i < IPB; ++i) acc[i] = fmaf(in[i * op.in_stride + r], w, acc[i]);
                    }
                    for (int i = 0; i < IPB; ++i) {
                        if (s == 1)
                            out[i * op.out_stride + j] = activate(op.act, acc[i] + op.bias[j]);
                        else
                            smem[op.scratch_base + (i * s + part) * units + j] = acc[i];
                    }
                }
            } else {
                for (int t = tid; t < units * IPB; t += threads) {
                    const int i = t / units, j = t % units;
                    float acc = 0.f;
                    for (int part = 0; part < s; ++part) acc += smem[op.scratch_base + (i * s + part) * units + j];
                    out[i * op.out_stride + j] = activate(op.act, acc + op.bias[j]);
                }
            }
            break;
        }
        case Code::activation:
        case Code::affine: {
            const int plane = op.in_h * op.in_w, total = op.in_c * plane;
            for (int t = tid; t < total * IPB; t += threads) {
                const int i = t / total, r = t % total;
                const float v = in[i * op.in_stride + r];
                if (op.code == Code::activation) {
                    out[i * op.out_stride + r] = activate(op.act, v);
                } else {
                    const int c = r / plane;
                    out[i * op.out_stride + r] = v * op.weights[c] + op.bias[c];
                }
            }
            break;
        }
        case Code::softmax: {
            // One thread per image: the class vectors are short.
            const int n = op.in_c;
            for (int i = tid; i < IPB; i += threads) {
                const float* x = in + i * op.in_stride;
                float* y = out + i * op.out_stride;
                float top = x[0];
                for (int k = 1; k < n; ++k) top = x[k] > top ? x[k] : top;
                float sum = 0.f;
                for (int k = 0; k < n; ++k) sum += expf(x[k] - top);
                if (op.log) {
                    const float lse = logf(sum);
                    for (int k = 0; k < n; ++k) y[k] = x[k] - top - lse;
                } else {
                    const float inv = 1.f / sum;
                    for (int k = 0; k < n; ++k) y[k] = expf(x[k] - top) * inv;
                }
            }
            break;
        }
    }
}

// The tile's input into shared memory: float32 values, or uint8 pixels times
// `scale` (the same product as the host's float(p) * scale); images past `count`
// are zeros (computed, never stored).
LENET_FUSED_FN void load_tile(const Tile& t, const float* values, const uint8_t* pixels, float scale, int count,
                              float* smem, int tid, int threads) {
    const int size = t.input_size;
    for (int k = tid; k < size * t.images; k += threads) {
        const int i = k / size, r = k % size;
        float v = 0.f;
        if (i < count) v = pixels ? float(pixels[int64_t(i) * size + r]) * scale : values[int64_t(i) * size + r];
        smem[t.input_base + i * t.input_stride + r] = v;
    }
}

LENET_FUSED_FN void store_tile(const Tile& t, const float* smem, float* y, int count, int tid, int threads) {
    const int size = t.output_size;
    for (int k = tid; k < size * count; k += threads) {
        const int i = k / size, r = k % size;
        y[int64_t(i) * size + r] = smem[t.output_base + i * t.output_stride + r];
    }
}

// The kernel's work on the host: every block of `n` images, each phase run for
// every thread index before the next (what the kernel's barriers guarantee), each
// block counted in `done` after its answers are stored, as the kernel does.
// Weights and biases are host pointers here. For tests.
void emulate(const Program& p, const float* values, const uint8_t* pixels, float scale, float* y, int n,
             const Completion& done = {});

}  // namespace lenet::cuda::fused
