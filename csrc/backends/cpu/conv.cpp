// Convolution as im2col + SGEMM over NHWC: each output pixel becomes one row of
// kh*kw*ci input values, and rows times the HWIO kernel matrix give NHWC output.
#include <algorithm>
#include <cstring>
#include <vector>

#include "blas.h"
#include "ops.h"

namespace lenet::cpu {
namespace {

// Rows of the im2col matrix per GEMM call: keeps the patch tile within ~1 MiB (L2).
constexpr size_t kTileFloats = 1 << 18;

class Conv2d : public Kernel {
public:
    Conv2d(const Step& s, int capacity) : s_(s), k_(s.kh * s.kw * s.in.c) {
        direct_ = s.kh == 1 && s.kw == 1 && s.sh == 1 && s.sw == 1 && s.pad.top == 0 && s.pad.bottom == 0 &&
                  s.pad.left == 0 && s.pad.right == 0;
        const size_t rows = size_t(capacity) * s.out.h * s.out.w;
        tile_rows_ = int(std::min(rows, std::max<size_t>(1, kTileFloats / k_)));
        if (!direct_) patches_.resize(size_t(tile_rows_) * k_);
    }

    void run(const float* x, float* y, int n) override {
        const int co = s_.out.c;
        const int64_t rows = int64_t(n) * s_.out.h * s_.out.w;
        for (int64_t r0 = 0; r0 < rows; r0 += tile_rows_) {
            const int m = int(std::min<int64_t>(tile_rows_, rows - r0));
            float* out = y + r0 * co;
            for (int r = 0; r < m; ++r) std::memcpy(out + size_t(r) * co, s_.bias.data(), co * sizeof(float));
            const float* a = direct_ ? x + r0 * k_ : patches_.data();
            if (!direct_) im2col(x, r0, m);
            blas::sgemm_nn(m, co, k_, a, k_, s_.weights.data(), co, 1.f, out, co);
            apply_activation(s_.act, out, size_t(m) * co);
        }
    }

private:
    // Patch rows [r0, r0 + m) of the whole batch into patches_.
    void im2col(const float* x, int64_t r0, int m) {
        const Dims in = s_.in, out = s_.out;
        const int ci = in.c, row_run = s_.kw * ci;
        const int64_t pixels = int64_t(out.h) * out.w;
        for (int r = 0; r < m; ++r) {
            const int64_t p = r0 + r;
            const int64_t b = p / pixels;
            const int oy = int((p % pixels) / out.w), ox = int(p % out.w);
            const float* image = x + b * in.size();
            float* row = patches_.data() + size_t(r) * k_;
            const int x0 = ox * s_.sw - s_.pad.left;
            const bool inside_x = x0 >= 0 && x0 + s_.kw <= in.w;
            for (int ky = 0; ky < s_.kh; ++ky, row += row_run) {
                const int iy = oy * s_.sh - s_.pad.top + ky;
                if (iy < 0 || iy >= in.h) {
                    std::memset(row, 0, row_run * sizeof(float));
                    continue;
                }
                const float* src = image + (size_t(iy) * in.w) * ci;
                if (inside_x) {
                    std::memcpy(row, src + size_t(x0) * ci, row_run * sizeof(float));
                    continue;
                }
                for (int kx = 0; kx < s_.kw; ++kx) {
                    const int ix = x0 + kx;
                    if (ix < 0 || ix >= in.w)
                        std::memset(row + kx * ci, 0, ci * sizeof(float));
                    else
                        std::memcpy(row + kx * ci, src + size_t(ix) * ci, ci * sizeof(float));
                }
            }
        }
    }

    const Step& s_;
    const int k_;
    bool direct_;
    int tile_rows_;
    std::vector<float> patches_;
};

}  // namespace

std::unique_ptr<Kernel> make_conv2d(const Step& s, int capacity) { return std::make_unique<Conv2d>(s, capacity); }

}  // namespace lenet::cpu
