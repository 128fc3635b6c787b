// Winograd F(m x m, r x r) convolutions (winograd.h); the matrices are in
// winograd_transforms.h.
#include "winograd.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "ops.h"
#include "winograd_transforms.h"

namespace lenet::cpu {
namespace {

// Tiles transformed at once: up to 64, fewer where their transformed windows and
// products would not stay within L2 (~1 MiB); from several images where one has
// fewer (F(4, 5) on a 14x14 image: 16). In double (exact) they are twice the bytes
// and so are the weights, which every pass reads from L3 once: 2 MiB, two images of
// lenet-tf a pass instead of one, 5% faster on a Zen 3 (PERFORMANCE.md, issue 74).
constexpr int kChunk = 64;
constexpr size_t kChunkBytes = 1 << 20, kExactChunkBytes = 2 << 20;

int round_up(int v, int to) { return (v + to - 1) / to * to; }

// Values of type T between two tile positions' planes: at least `count`, an odd number
// of 64-byte lines, so that a tile's alpha^2 values (one a plane) fall in 64 different
// L1 sets instead of a few (F(4, 5) on 32 tiles of 32 channels: exactly 4 KiB apart,
// every one in the same set; 2x slower transforms).
template <class T>
size_t plane(size_t count) {
    const size_t line = 64 / sizeof(T);
    const size_t lines = (count + line - 1) / line;
    return (lines | 1) * line;
}
int ceil_div(int v, int by) { return (v + by - 1) / by; }

class WinogradConv2d : public Kernel {
public:
    WinogradConv2d(const Step& s, const Step* pool, const KernelTable& table, const WinogradWeights& w)
        : s_(s), pool_(pool), table_(table), w_(w), exact_(w.exact), ldm_(round_up(s.out.c, kLanes)) {
        // With the pool fused, only the conv rows and columns it reads are computed.
        oh_ = pool ? 2 * pool->out.h : s.out.h;
        ow_ = pool ? 2 * pool->out.w : s.out.w;
        th_ = ceil_div(oh_, w_.m);
        tw_ = ceil_div(ow_, w_.m);
        // The image inside zeros: its padding, and past the last tile's window (or
        // the rows and columns after it that a fused pool drops).
        ph_ = std::max(w_.m * th_ + s.kh - 1, s.pad.top + s.in.h);
        pw_ = std::max(w_.m * tw_ + s.kw - 1, s.pad.left + s.in.w);
        const size_t positions = size_t(w.alpha) * w.alpha;
        const size_t tile_bytes = positions * (w.ci + ldm_) * (exact_ ? sizeof(double) : sizeof(float));
        const int per_image = th_ * tw_;
        const int cap = std::min(kChunk, std::max(8, int((exact_ ? kExactChunkBytes : kChunkBytes) / tile_bytes)));
        images_ = std::max(1, cap / per_image);
        const int chunk = std::min(cap, images_ * per_image);
        image_floats_ = size_t(ph_) * pw_ * w.ci;
        scratch_.assign(images_ * image_floats_, 0.f);
        if (exact_) {
            v_plane_ = plane<double>(size_t(chunk) * w.ci);
            m_plane_ = plane<double>(size_t(chunk) * ldm_);
            v64_.assign(positions * v_plane_, 0.0);
            m64_.assign(positions * m_plane_, 0.0);
        } else {
            v_plane_ = plane<float>(size_t(chunk) * w.ci);
            m_plane_ = plane<float>(size_t(chunk) * ldm_);
            v_.assign(positions * v_plane_, 0.f);
            m_.assign(positions * m_plane_, 0.f);
        }
        tiles_.resize(chunk);
    }

    void run(Inputs xs, float* y, int n, ThreadPool* spare) override {
        const Dims in = s_.in;
        const Dims out = pool_ ? pool_->out : s_.out;
        const int co = s_.out.c, ci = w_.ci, m = w_.m;
        const int per_image = th_ * tw_;
        // A tile's output pixels per side: m, or m / 2 pooled ones.
        const int side = pool_ ? m / 2 : m;
        WinogradArgs a{m,
                       w_.alpha,
                       exact_,
                       tiles_.data(),
                       0,
                       size_t(pw_) * ci,
                       ci,
                       exact_ ? nullptr : v_.data(),
                       exact_ ? v64_.data() : nullptr,
                       v_plane_,
                       exact_ ? nullptr : w_.u.data(),
                       exact_ ? w_.u64.data() : nullptr,
                       w_.stride,
                       exact_ ? nullptr : m_.data(),
                       exact_ ? m64_.data() : nullptr,
                       m_plane_,
                       co,
                       ldm_,
                       w_.bias.data(),
                       pool_ != nullptr,
                       s_.act.plain_relu(),
                       size_t(out.w) * co};
        for (int b0 = 0; b0 < n; b0 += images_) {
            const int images = std::min(images_, n - b0);
            for (int i = 0; i < images; ++i) load(xs[0] + size_t(b0 + i) * in.size(), i);
            const int count = images * per_image;
            for (int t0 = 0; t0 < count; t0 += int(tiles_.size())) {
                a.count = std::min(int(tiles_.size()), count - t0);
                for (int t = 0; t < a.count; ++t) {
                    const int image = (t0 + t) / per_image, k = (t0 + t) % per_image;
                    const int ty = k / tw_, tx = k % tw_;
                    WinogradTile& tile = tiles_[t];
                    tile.src = scratch_.data() + image * image_floats_ + (size_t(m * ty) * pw_ + m * tx) * ci;
                    tile.dst = y + size_t(b0 + image) * out.size() + (size_t(side * ty) * out.w + side * tx) * co;
                    tile.rows = std::min(side, out.h - side * ty);
                    tile.cols = std::min(side, out.w - side * tx);
                }
                table_.winograd_in(a);
                products(a, spare);
                table_.winograd_out(a);
            }
        }
        if (!s_.act.plain_relu()) apply_activation(s_.act, y, size_t(n) * out.size());
    }

    Facts facts() const override {
        return {{"algorithm", std::string("winograd")},
                {"tile", std::to_string(w_.m) + "x" + std::to_string(w_.m)},
                {"precision", std::string(exact_ ? "exact" : "fast")}};
    }

private:
    // One image into scratch slot `slot`'s interior, its channels padded with the zeros there.
    void load(const float* image, int slot) {
        const Dims in = s_.in;
        const int ci = w_.ci;
        float* dst = scratch_.data() + slot * image_floats_ + (size_t(s_.pad.top) * pw_ + s_.pad.left) * ci;
        if (in.c == ci) {
            for (int iy = 0; iy < in.h; ++iy)
                std::memcpy(dst + size_t(iy) * pw_ * ci, image + size_t(iy) * in.w * ci,
                            size_t(in.w) * ci * sizeof(float));
            return;
        }
        for (int iy = 0; iy < in.h; ++iy)
            for (int ix = 0; ix < in.w; ++ix)
                std::memcpy(dst + (size_t(iy) * pw_ + ix) * ci, image + (size_t(iy) * in.w + ix) * in.c,
                            size_t(in.c) * sizeof(float));
    }

    // m[p] = v[p] u[p] for every tile position p, the positions shared among threads.
    void products(const WinogradArgs& a, ThreadPool* spare) {
        const int positions = w_.alpha * w_.alpha;
        const double macs = double(positions) * a.count * w_.ci * ldm_;
        const int parts = spare ? std::min(positions, spare->workers() + 1) : 1;
        if (parts < 2 || macs < 2e6) {  // less is quicker than waking a thread (direct.cpp)
            table_.winograd_products(a, 0, positions);
            return;
        }
        spare->parallel_for(
            parts, [&](int i) { table_.winograd_products(a, positions * i / parts, positions * (i + 1) / parts); });
    }

    const Step& s_;
    const Step* pool_;
    const KernelTable& table_;
    const WinogradWeights& w_;
    const bool exact_;          // the weights' precision (WinogradArgs::exact)
    size_t v_plane_, m_plane_;  // values between tile positions in v_ and m_ (or m64_)
    const int ldm_;
    int oh_, ow_, th_, tw_, ph_, pw_;
    int images_;          // images whose tiles run in one pass
    size_t image_floats_;  // one padded image in scratch_
    AlignedFloats scratch_, v_, m_;
    AlignedDoubles v64_, m64_;
    std::vector<WinogradTile> tiles_;
};

}  // namespace

int winograd_tile(const Step& s, bool exact) {
    if (s.op != OpKind::conv2d || s.groups != 1 || s.dh != 1 || s.dw != 1 || s.sh != 1 || s.sw != 1) return 0;
    if (s.integers) return 0;  // its transforms do not keep integer sums exact
    // Below 16 input channels the transforms cost more than the products save
    // (PERFORMANCE.md, session 11).
    if (s.kh != s.kw || (s.kh != 3 && s.kh != 5) || s.out.h < 2 || s.out.w < 2 || s.in.c < 16) return 0;
    // F(4, r) where its products over the whole tiles, edges included, are fewer
    // than F(2, r)'s: F(4, 5) on every image of 3x3 outputs or more (14x14: 1,024
    // against 1,764), F(4, 3) on most (24x24: 1,296 against 2,304; not 2 x n).
    const int r = s.kh;
    auto products = [&](int m) {
        const int alpha = m + r - 1;
        return ceil_div(s.out.h, m) * ceil_div(s.out.w, m) * alpha * alpha;
    };
    const int m = products(4) < products(2) ? 4 : 2;
    // Against the direct kernel, multiply-adds per output and channel pair: alpha^2 / m^2
    // over the channels padded to 16, the transforms counted as a quarter more, twice that
    // where the sums are in double (exact), against r^2 over the real ones. The fast path
    // keeps F(2, r)'s test: F(4, r) passes wherever F(2, r) does.
    const int tested = exact ? m : 2, alpha = tested + r - 1;
    if ((exact ? 2 : 1) * 5 * alpha * alpha * round_up(s.in.c, kLanes) >= 4 * tested * tested * r * r * s.in.c)
        return 0;
    return m;
}

namespace {

template <int M, int R>
WinogradWeights pack_winograd_t(const Step& s, bool exact) {
    constexpr auto t = winograd_matrices<M, R>();
    constexpr int alpha = t.alpha;
    const int ci = s.in.c, co = s.out.c;
    WinogradWeights w;
    w.m = M;
    w.exact = exact;
    w.alpha = alpha;
    w.ci = round_up(ci, kLanes);
    constexpr size_t positions = size_t(alpha) * alpha;
    // G g G^T for every (input, output) channel pair, in double.
    std::vector<double> u(positions * ci * co, 0.0);
    std::array<double, alpha * R> gg{};  // G g, one channel pair
    for (int c = 0; c < ci; ++c)
        for (int o = 0; o < co; ++o) {
            auto g = [&](int ky, int kx) { return double(s.weights[((size_t(ky) * R + kx) * ci + c) * co + o]); };
            for (int i = 0; i < alpha; ++i)
                for (int kx = 0; kx < R; ++kx) {
                    double acc = 0.0;
                    for (int ky = 0; ky < R; ++ky) acc += t.g[i * R + ky] * g(ky, kx);
                    gg[i * R + kx] = acc;
                }
            for (int i = 0; i < alpha; ++i)
                for (int j = 0; j < alpha; ++j) {
                    double acc = 0.0;
                    for (int kx = 0; kx < R; ++kx) acc += gg[i * R + kx] * t.g[j * R + kx];
                    u[((size_t(i) * alpha + j) * ci + c) * co + o] = acc;
                }
        }
    // Each position's (padded ci, co) matrix packed as pack() packs a 1x1 convolution's: blocks
    // of 16 output channels, each (ci, 16); zeros in the padding. Double for exact; float
    // (rounded once) for fast.
    const int blocks = ceil_div(co, kLanes);
    w.stride = size_t(blocks) * w.ci * kLanes;
    auto fill = [&](auto& packed) {
        packed.assign(positions * w.stride, 0);
        for (size_t p = 0; p < positions; ++p)
            for (int c = 0; c < ci; ++c)
                for (int o = 0; o < co; ++o)
                    packed[p * w.stride + (size_t(o / kLanes) * w.ci + c) * kLanes + o % kLanes] =
                        static_cast<typename std::decay_t<decltype(packed)>::value_type>(u[(p * ci + c) * co + o]);
    };
    if (exact)
        fill(w.u64);
    else
        fill(w.u);
    w.bias.assign(size_t(round_up(co, kLanes)), 0.f);
    for (int o = 0; o < co && size_t(o) < s.bias.size(); ++o) w.bias[o] = s.bias[o];
    return w;
}

}  // namespace

WinogradWeights pack_winograd(const Step& s, bool exact) {
    switch (winograd_tile(s, exact)) {
        case 4: return s.kh == 3 ? pack_winograd_t<4, 3>(s, exact) : pack_winograd_t<4, 5>(s, exact);
        case 2: return s.kh == 3 ? pack_winograd_t<2, 3>(s, exact) : pack_winograd_t<2, 5>(s, exact);
        default: throw std::logic_error("pack_winograd: a convolution winograd_tile turned down");
    }
}

std::unique_ptr<Kernel> make_winograd_conv2d(const Step& conv, const Step* pool, const KernelTable& table,
                                             const WinogradWeights& weights) {
    return std::make_unique<WinogradConv2d>(conv, pool, table, weights);
}

}  // namespace lenet::cpu
