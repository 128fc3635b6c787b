// Winograd F(2x2, r x r) convolutions (winograd.h); the matrices are in
// winograd_transforms.h.
#include "winograd.h"

#include <algorithm>
#include <cstring>

#include "ops.h"
#include "winograd_transforms.h"

namespace lenet::cpu {
namespace {

constexpr int kOut = 2;  // output pixels per tile side
// Tiles transformed at once: up to 64, fewer where their transformed windows and
// products would not stay within L2 (~1 MiB).
constexpr int kChunk = 64;
constexpr size_t kChunkBytes = 1 << 20;

int round_up(int v, int to) { return (v + to - 1) / to * to; }

class WinogradConv2d : public Kernel {
public:
    WinogradConv2d(const Step& s, const Step* pool, const KernelTable& table, const WinogradWeights& w)
        : s_(s), pool_(pool), table_(table), w_(w), ldm_(round_up(s.out.c, kLanes)) {
        // With the pool fused, only the conv rows and columns it reads are computed.
        oh_ = pool ? 2 * pool->out.h : s.out.h;
        ow_ = pool ? 2 * pool->out.w : s.out.w;
        th_ = (oh_ + 1) / 2;
        tw_ = (ow_ + 1) / 2;
        // The image inside zeros: its padding, and past the last tile's window (or
        // the rows and columns after it that a fused pool drops).
        ph_ = std::max(kOut * th_ + s.kh - 1, s.pad.top + s.in.h);
        pw_ = std::max(kOut * tw_ + s.kw - 1, s.pad.left + s.in.w);
        scratch_.assign(size_t(ph_) * pw_ * w.ci, 0.f);
        const size_t positions = size_t(w.alpha) * w.alpha;
        const size_t tile_bytes = positions * (w.ci + ldm_) * sizeof(float);
        const int chunk = std::min({kChunk, th_ * tw_, std::max(8, int(kChunkBytes / tile_bytes))});
        v_.assign(positions * chunk * w.ci, 0.f);
        m_.assign(positions * chunk * ldm_, 0.f);
        tiles_.resize(chunk);
    }

    void run(Inputs xs, float* y, int n, ThreadPool* spare) override {
        const Dims in = s_.in;
        const Dims out = pool_ ? pool_->out : s_.out;
        const int co = s_.out.c, ci = w_.ci;
        const int count = th_ * tw_;
        WinogradArgs a{w_.alpha,
                       tiles_.data(),
                       0,
                       size_t(pw_) * ci,
                       ci,
                       v_.data(),
                       m_.data(),
                       co,
                       ldm_,
                       w_.bias.data(),
                       pool_ != nullptr,
                       s_.act.plain_relu(),
                       size_t(out.w) * co};
        for (int b = 0; b < n; ++b) {
            load(xs[0] + b * in.size());
            float* image = y + b * out.size();
            for (int t0 = 0; t0 < count; t0 += int(tiles_.size())) {
                a.count = std::min(int(tiles_.size()), count - t0);
                for (int t = 0; t < a.count; ++t) {
                    const int ty = (t0 + t) / tw_, tx = (t0 + t) % tw_;
                    WinogradTile& tile = tiles_[t];
                    tile.src = scratch_.data() + (size_t(kOut * ty) * pw_ + kOut * tx) * ci;
                    tile.dst = pool_ ? image + (size_t(ty) * out.w + tx) * co
                                     : image + (size_t(kOut * ty) * out.w + kOut * tx) * co;
                    tile.rows = std::min(kOut, oh_ - kOut * ty);
                    tile.cols = std::min(kOut, ow_ - kOut * tx);
                }
                table_.winograd_in(a);
                products(a.count, spare);
                table_.winograd_out(a);
            }
        }
        if (!s_.act.plain_relu()) apply_activation(s_.act, y, size_t(n) * out.size());
    }

    Facts facts() const override { return {{"algorithm", std::string("winograd")}}; }

private:
    // One image into the scratch's interior, its channels padded with the zeros there.
    void load(const float* image) {
        const Dims in = s_.in;
        const int ci = w_.ci;
        float* dst = scratch_.data() + (size_t(s_.pad.top) * pw_ + s_.pad.left) * ci;
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

    // m[p] = v[p] u[p] for every tile position p: a dense layer over `count` tiles each.
    void products(int count, ThreadPool* spare) {
        const int positions = w_.alpha * w_.alpha;
        auto run = [&](int first, int last) {
            for (int p = first; p < last; ++p) {
                const ConvArgs g{v_.data() + size_t(p) * count * w_.ci,
                                 1,
                                 count,
                                 w_.ci,
                                 1,
                                 count,
                                 1,
                                 1,
                                 1,
                                 1,
                                 w_.u.data() + p * w_.stride,
                                 nullptr,
                                 w_.zeros.data(),
                                 s_.out.c,
                                 false,
                                 m_.data() + size_t(p) * count * ldm_,
                                 ldm_,
                                 0,
                                 1,
                                 false};
                table_.conv(g);
            }
        };
        const double macs = double(positions) * count * w_.ci * ldm_;
        const int parts = spare ? std::min(positions, spare->workers() + 1) : 1;
        if (parts < 2 || macs < 2e6) {  // less is quicker than waking a thread (direct.cpp)
            run(0, positions);
            return;
        }
        spare->parallel_for(parts, [&](int i) { run(positions * i / parts, positions * (i + 1) / parts); });
    }

    const Step& s_;
    const Step* pool_;
    const KernelTable& table_;
    const WinogradWeights& w_;
    const int ldm_;
    int oh_, ow_, th_, tw_, ph_, pw_;
    AlignedFloats scratch_, v_, m_;
    std::vector<WinogradTile> tiles_;
};

}  // namespace

bool winograd_fits(const Step& s) {
    if (s.op != OpKind::conv2d || s.groups != 1 || s.dh != 1 || s.dw != 1 || s.sh != 1 || s.sw != 1) return false;
    if (s.integers) return false;  // its transforms do not keep integer sums exact
    // Below 16 input channels the transforms cost more than the products save
    // (PERFORMANCE.md, session 11).
    if (s.kh != s.kw || (s.kh != 3 && s.kh != 5) || s.out.h < 2 || s.out.w < 2 || s.in.c < 16) return false;
    // Multiply-adds per tile and output channel, the transforms counted as a quarter
    // more: alpha^2 over the channels padded to 16 against 4 r^2 over the real ones.
    const int alpha = s.kh + kOut - 1;
    return 5 * alpha * alpha * round_up(s.in.c, kLanes) < 16 * s.kh * s.kw * s.in.c;
}

namespace {

template <int R>
WinogradWeights pack_winograd_t(const Step& s) {
    constexpr auto t = winograd_matrices<R>();
    constexpr int alpha = t.alpha;
    const int ci = s.in.c, co = s.out.c;
    WinogradWeights w;
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
    std::vector<float> matrix(size_t(w.ci) * co, 0.f);  // one position, (padded ci, co)
    for (size_t p = 0; p < positions; ++p) {
        for (int c = 0; c < ci; ++c)
            for (int o = 0; o < co; ++o) matrix[size_t(c) * co + o] = float(u[(p * ci + c) * co + o]);
        const PackedWeights packed = pack(matrix, {}, 1, 1, w.ci, co);
        if (p == 0) {
            w.stride = packed.w.size();
            w.u.assign(positions * w.stride, 0.f);
            w.zeros = packed.bias;
        }
        std::copy(packed.w.begin(), packed.w.end(), w.u.begin() + p * w.stride);
    }
    w.bias.assign(size_t(round_up(co, kLanes)), 0.f);
    for (int o = 0; o < co && size_t(o) < s.bias.size(); ++o) w.bias[o] = s.bias[o];
    return w;
}

}  // namespace

WinogradWeights pack_winograd(const Step& s) { return s.kh == 3 ? pack_winograd_t<3>(s) : pack_winograd_t<5>(s); }

std::unique_ptr<Kernel> make_winograd_conv2d(const Step& conv, const Step* pool, const KernelTable& table,
                                             const WinogradWeights& weights) {
    return std::make_unique<WinogradConv2d>(conv, pool, table, weights);
}

}  // namespace lenet::cpu
