// Convolutions over NHWC, three ways. Direct (the default): the image is copied
// into a zero-bordered scratch once and the packed kernel accumulates whole
// windows in registers (direct_kernels.cpp). Depthwise (one input channel per
// group): plain loops. BLAS (the reference, cpu_kernels="blas", and every
// grouped or dilated convolution): im2col rows times the HWIO kernel matrix on
// SGEMM, one GEMM per group.
#include <algorithm>
#include <cstring>
#include <vector>

#include "blas.h"
#include "ops.h"

namespace lenet::cpu {
namespace {

// Short rows (28 floats) are copied inline: a memcpy call per row cost as much as
// the copy.
inline void copy_floats(float* dst, const float* src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
}

class DirectConv2d : public Kernel {
public:
    // `pool`: the fused 2x2 / 2 max pool that follows, or null.
    DirectConv2d(const Step& s, const Step* pool, const KernelTable& table, const PackedWeights& packed)
        : s_(s), pool_(pool), table_(table), packed_(packed) {
        ph_ = s.in.h + s.pad.top + s.pad.bottom;
        pw_ = s.in.w + s.pad.left + s.pad.right;
        choose();
    }

    // Backend::link with the convolution after this one: images in lanes stay
    // interleaved between two kernels that both run them; the images of a call past its
    // last whole group of lanes go row-planar where vectors along the rows produce that
    // order and the next convolution reads it faster (a stride-1 one, without a
    // register per pixel of its tile).
    bool link(DirectConv2d& next) {
        bool linked = false;
        if (rows_ && next.stride1() && (next.rows_if_planar() || table_.planar_conv))
            planar_out_ = next.planar_in_ = linked = true;
        if (il_capable() && next.il_capable()) il_out_ = next.il_in_ = linked = true;
        choose();
        next.choose();
        return linked;
    }

    void run(Inputs xs, float* y, int n, ThreadPool* spare) override {
        const float* x = xs[0];
        const Dims in = s_.in;
        // With the pool fused, only the conv rows and columns it reads are computed.
        const Dims out = pool_ ? pool_->out : s_.out;
        const int oh = pool_ ? 2 * out.h : out.h, ow = pool_ ? 2 * out.w : out.w;
        ConvArgs a{};
        a.ih = ph_, a.iw = pw_, a.ci = in.c, a.oh = oh, a.ow = ow;
        a.kh = s_.kh, a.kw = s_.kw, a.sh = s_.sh, a.sw = s_.sw;
        a.w = packed_.w.data(), a.hwio = s_.weights.data(), a.bias = packed_.bias.data(), a.co = out.c;
        a.relu = s_.act.plain_relu(), a.ldy = out.c, a.row_begin = 0, a.row_end = oh, a.pool = pool_ != nullptr;
        // Whole groups of images in lanes (conv_il), then the rest one by one.
        const int lanes = table_.width, groups = il_ ? n / lanes : 0;
        for (int g = 0; g < groups; ++g) {
            const float* images = x + size_t(g) * lanes * in.size();
            a.x = il_in_ && !copy_il_ ? images : interleaved(images);
            a.y = y + size_t(g) * lanes * out.size();
            a.il_out = il_out_ ? 0 : planar_out_ ? 2 : 1;
            a.y_image = out.size();
            a.stage = stage_.data();
            table_.conv_il(a);
        }
        // One input channel: NHWC is row-planar.
        a.planar_in = planar_in_ || (in.c == 1 && stride1() && (rows_ || table_.planar_conv));
        a.planar_out = planar_out_;
        const auto kernel = rows_ ? table_.conv_rows_pool : table_.conv;
        for (int b = groups * lanes; b < n; ++b) {
            const float* image = x + b * in.size();
            if (copy_) {
                copy_padded(image);
                image = scratch_.data();
            }
            a.x = image;
            a.y = y + b * out.size();
            conv_split(kernel, a, spare);
        }
        if (!s_.act.plain_relu()) apply_activation(s_.act, y, size_t(n) * out.size());
    }

    Facts facts() const override {
        Facts f{{"vectors", std::string(rows_ ? "rows" : "channels")}};
        if (il_) f.emplace_back("batches", "images in lanes, " + std::to_string(table_.width) + " a group");
        if (il_in_ || il_out_)
            f.emplace_back("interleaved", std::string(il_in_ && il_out_ ? "in, out" : il_in_ ? "in" : "out"));
        if (planar_in_) f.emplace_back("input", std::string("row-planar"));
        if (planar_out_) f.emplace_back("output", std::string("row-planar"));
        return f;
    }

private:
    bool stride1() const { return s_.sh == 1 && s_.sw == 1; }
    // Images in lanes for stride-1 convolutions with few output channels, where the
    // per-image kernels leave lanes idle or split rows into short tiles (measured:
    // PERFORMANCE.md).
    bool il_capable() const {
        return table_.conv_il && stride1() && (pool_ ? pool_->out.c : s_.out.c) <= kIlMaxChannels;
    }

    // Vectors along the rows where they leave fewer lanes idle than 16-channel
    // blocks (few output channels), when the input is row-planar (planar_in_ or one
    // channel) and the pool fused.
    bool rows_if_planar() const {
        const int co = pool_ ? pool_->out.c : s_.out.c;
        const int ow = pool_ ? 2 * pool_->out.w : s_.out.w;
        const int blocks = (co + kLanes - 1) / kLanes;
        return pool_ && stride1() && int64_t(ow) * blocks * kLanes > int64_t(co) * rows_lanes(ow, table_.width);
    }

    // Then the zero-bordered copy, which also gives the row kernel the slack it reads
    // past a row where its vectors reach beyond one, unless the input comes from a
    // linked kernel's buffer (CpuBackend::alloc's slack).
    void choose() {
        const int co = pool_ ? pool_->out.c : s_.out.c;
        const int ow = pool_ ? 2 * pool_->out.w : s_.out.w;
        rows_ = (planar_in_ || s_.in.c == 1) && rows_if_planar();
        const bool padded = s_.pad.top || s_.pad.bottom || s_.pad.left || s_.pad.right;
        // The row kernel's vectors reach rows_lanes(ow) + kw - 1 columns into a row.
        const bool overreads = rows_lanes(ow, table_.width) + s_.kw - 1 > pw_;
        copy_ = padded || (rows_ && !planar_in_ && overreads);
        if (copy_)
            scratch_.assign(size_t(ph_) * pw_ * s_.in.c + (rows_ ? kLanes : 0), 0.f);
        else
            scratch_ = AlignedFloats();
        // An interleaved input comes from a kernel that interleaves; one row-planar
        // without interleaving would need another transposition: none.
        il_ = il_capable() && (il_in_ || !planar_in_);
        copy_il_ = padded;
        const size_t lanes = size_t(table_.width);
        il_scratch_.assign(il_ && (copy_il_ || !il_in_) ? size_t(ph_) * pw_ * s_.in.c * lanes : 0, 0.f);
        stage_.assign(il_ ? size_t(pool_ ? pool_->out.w : s_.out.w) * co * lanes : 0, 0.f);
    }

    // `width` images from `images` (consecutive, NHWC, or interleaved when il_in_) into
    // the interior of the zero-bordered interleaved scratch.
    const float* interleaved(const float* images) {
        const Dims in = s_.in;
        const size_t lanes = size_t(table_.width), run = size_t(in.w) * in.c;
        float* dst = il_scratch_.data() + (size_t(s_.pad.top) * pw_ + s_.pad.left) * in.c * lanes;
        for (int iy = 0; iy < in.h; ++iy, dst += size_t(pw_) * in.c * lanes) {
            if (il_in_)
                copy_floats(dst, images + iy * run * lanes, run * lanes);
            else
                table_.interleave(images + iy * run, in.size(), int(run), dst);
        }
        return il_scratch_.data();
    }

    // The image into the interior of the zero-bordered scratch (borders written once,
    // by choose()), in the input's order: NHWC, or row-planar.
    void copy_padded(const float* image) {
        const Dims in = s_.in;
        const int top = s_.pad.top, left = s_.pad.left;
        if (!planar_in_) {
            const size_t row = size_t(in.w) * in.c;
            for (int iy = 0; iy < in.h; ++iy)
                copy_floats(scratch_.data() + ((size_t(iy) + top) * pw_ + left) * in.c, image + iy * row, row);
            return;
        }
        for (int iy = 0; iy < in.h; ++iy)
            for (int c = 0; c < in.c; ++c)
                copy_floats(scratch_.data() + ((size_t(iy) + top) * in.c + c) * pw_ + left,
                            image + (size_t(iy) * in.c + c) * in.w, in.w);
    }

    // Output channels up to which images in lanes beat the per-image kernels.
    static constexpr int kIlMaxChannels = 32;

    const Step& s_;
    const Step* pool_;
    const KernelTable& table_;
    const PackedWeights& packed_;
    bool rows_ = false;        // table_.conv_rows_pool, else table_.conv
    bool planar_in_ = false;   // x row-planar (linked to the kernel before)
    bool planar_out_ = false;  // y row-planar (linked to the kernel after)
    bool copy_ = false;        // through scratch_
    bool il_ = false;          // whole groups of images in lanes (table_.conv_il)
    bool il_in_ = false;       // their x interleaved (linked to the kernel before)
    bool il_out_ = false;      // their y interleaved (linked to the kernel after)
    bool copy_il_ = false;     // interleaved input copied for its zero border
    int ph_, pw_;
    AlignedFloats scratch_, il_scratch_, stage_;
};

// One input channel per group (DepthwiseConv2D): each output channel o reads input
// channel o / multiplier over its window.
class DepthwiseConv2d : public Kernel {
public:
    explicit DepthwiseConv2d(const Step& s) : s_(s) {}

    void run(Inputs xs, float* y, int n, ThreadPool*) override {
        const Dims in = s_.in, out = s_.out;
        const int co = out.c, mult = co / in.c;
        const float* w = s_.weights.data();
        for (int b = 0; b < n; ++b) {
            const float* image = xs[0] + b * in.size();
            float* dst = y + b * out.size();
            for (int oy = 0; oy < out.h; ++oy)
                for (int ox = 0; ox < out.w; ++ox, dst += co) {
                    std::memcpy(dst, s_.bias.data(), co * sizeof(float));
                    for (int ky = 0; ky < s_.kh; ++ky) {
                        const int iy = oy * s_.sh - s_.pad.top + ky * s_.dh;
                        if (iy < 0 || iy >= in.h) continue;
                        for (int kx = 0; kx < s_.kw; ++kx) {
                            const int ix = ox * s_.sw - s_.pad.left + kx * s_.dw;
                            if (ix < 0 || ix >= in.w) continue;
                            const float* px = image + (size_t(iy) * in.w + ix) * in.c;
                            const float* wk = w + (size_t(ky) * s_.kw + kx) * co;
                            for (int o = 0; o < co; ++o) dst[o] += px[o / mult] * wk[o];
                        }
                    }
                }
        }
        apply_activation(s_.act, y, size_t(n) * out.size());
    }

private:
    const Step& s_;
};

// Rows of the im2col matrix per GEMM call: keeps the patch tile within ~1 MiB (L2).
constexpr size_t kTileFloats = 1 << 18;

class BlasConv2d : public Kernel {
public:
    BlasConv2d(const Step& s, int capacity)
        : s_(s), cig_(s.in.c / s.groups), cog_(s.out.c / s.groups), k_(s.kh * s.kw * cig_) {
        one_by_one_ = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && !s.pad.any() && s.groups == 1;
        const size_t rows = size_t(capacity) * s.out.h * s.out.w;
        tile_rows_ = int(std::min(rows, std::max<size_t>(1, kTileFloats / k_)));
        if (!one_by_one_) patches_.resize(size_t(tile_rows_) * k_);
    }

    void run(Inputs xs, float* y, int n, ThreadPool*) override {
        const float* x = xs[0];
        const int co = s_.out.c;
        const int64_t rows = int64_t(n) * s_.out.h * s_.out.w;
        for (int64_t r0 = 0; r0 < rows; r0 += tile_rows_) {
            const int m = int(std::min<int64_t>(tile_rows_, rows - r0));
            float* out = y + r0 * co;
            for (int r = 0; r < m; ++r) std::memcpy(out + size_t(r) * co, s_.bias.data(), co * sizeof(float));
            for (int g = 0; g < s_.groups; ++g) {
                const float* a = one_by_one_ ? x + r0 * k_ : patches_.data();
                if (!one_by_one_) im2col(x, r0, m, g);
                blas::sgemm_nn(m, cog_, k_, a, k_, s_.weights.data() + g * cog_, co, 1.f, out + g * cog_, co);
            }
            apply_activation(s_.act, out, size_t(m) * co);
        }
    }

private:
    // Patch rows [r0, r0 + m) of the whole batch, the channels of group g, into patches_.
    void im2col(const float* x, int64_t r0, int m, int g) {
        const Dims in = s_.in, out = s_.out;
        const int ci = in.c;
        const int64_t pixels = int64_t(out.h) * out.w;
        const bool runs = s_.groups == 1 && s_.dw == 1;  // a window row is one contiguous run
        for (int r = 0; r < m; ++r) {
            const int64_t p = r0 + r;
            const int64_t b = p / pixels;
            const int oy = int((p % pixels) / out.w), ox = int(p % out.w);
            const float* image = x + b * in.size() + g * cig_;
            float* row = patches_.data() + size_t(r) * k_;
            const int x0 = ox * s_.sw - s_.pad.left;
            const bool inside_x = x0 >= 0 && x0 + (s_.kw - 1) * s_.dw < in.w;
            for (int ky = 0; ky < s_.kh; ++ky, row += s_.kw * cig_) {
                const int iy = oy * s_.sh - s_.pad.top + ky * s_.dh;
                if (iy < 0 || iy >= in.h) {
                    std::memset(row, 0, size_t(s_.kw) * cig_ * sizeof(float));
                    continue;
                }
                const float* src = image + (size_t(iy) * in.w) * ci;
                if (runs && inside_x) {
                    std::memcpy(row, src + size_t(x0) * ci, size_t(s_.kw) * ci * sizeof(float));
                    continue;
                }
                for (int kx = 0; kx < s_.kw; ++kx) {
                    const int ix = x0 + kx * s_.dw;
                    if (ix < 0 || ix >= in.w)
                        std::memset(row + kx * cig_, 0, cig_ * sizeof(float));
                    else
                        std::memcpy(row + kx * cig_, src + size_t(ix) * ci, cig_ * sizeof(float));
                }
            }
        }
    }

    const Step& s_;
    const int cig_, cog_;  // input and output channels per group
    const int k_;
    bool one_by_one_;
    int tile_rows_;
    std::vector<float> patches_;
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d(const Step& s, const KernelTable* table, const PackedWeights* packed,
                                    int capacity) {
    if (table && packed) return std::make_unique<DirectConv2d>(s, nullptr, *table, *packed);
    if (table && s.depthwise()) return std::make_unique<DepthwiseConv2d>(s);
    return std::make_unique<BlasConv2d>(s, capacity);
}

std::unique_ptr<Kernel> make_conv2d_pool(const Step& conv, const Step& pool, const KernelTable& table,
                                         const PackedWeights& packed) {
    return std::make_unique<DirectConv2d>(conv, &pool, table, packed);
}

bool link_planar(Kernel& producer, Kernel& consumer) {
    auto* p = dynamic_cast<DirectConv2d*>(&producer);
    auto* c = dynamic_cast<DirectConv2d*>(&consumer);
    return p && c && p->link(*c);
}

}  // namespace lenet::cpu
