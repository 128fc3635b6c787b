// The matrices of Winograd's F(2x2, r x r), computed at compile time from the
// interpolation points, so that the transforms (direct_kernels.cpp) skip the zeros
// and ones of B^T and A^T and the packing (winograd.cpp) uses the same G.
//
// Toom-Cook at alpha - 1 finite points and infinity, alpha = r + 1: A^T evaluates
// the output polynomial, G the kernel's (divided by the Lagrange denominators), B^T
// the data's; Y = A^T [(G g) . (B^T d)] is the correlation of d with g, and in 2-D
// Y = A^T [(G g G^T) . (B^T d B)] A. The points are chosen for float32 rounding:
// 0, 1, -1 for 3x3; 0, 1, -1, 1/2, -2 for 5x5 (0, 1, -1, 2, -2 rounds twice as
// badly on lenet-tf's second layer: PERFORMANCE.md).
#pragma once

#include <array>

namespace lenet::cpu {

template <int R>
struct WinogradMatrices {
    static constexpr int alpha = R + 1;
    std::array<double, 2 * alpha> at{};      // 2 x alpha, row-major
    std::array<double, alpha * R> g{};       // alpha x r
    std::array<double, alpha * alpha> bt{};  // alpha x alpha
};

template <int R>
constexpr WinogradMatrices<R> winograd_matrices() {
    static_assert(R == 3 || R == 5, "F(2x2, r x r) is defined here for r = 3 and 5");
    constexpr int alpha = R + 1, finite = alpha - 1;
    std::array<double, finite> points{};
    if constexpr (R == 3)
        points = {0, 1, -1};
    else
        points = {0, 1, -1, 0.5, -2};
    WinogradMatrices<R> m;
    // B^T's rows: the coefficients (lowest power first) of prod (x - p_l) over the
    // finite points but p_j; the last row over all of them.
    for (int j = 0; j <= finite; ++j) {
        std::array<double, alpha> c{};
        c[0] = 1;
        int degree = 0;
        for (int l = 0; l < finite; ++l) {
            if (l == j) continue;
            for (int k = degree + 1; k > 0; --k) c[k] = c[k - 1] - points[l] * c[k];
            c[0] = -points[l] * c[0];
            ++degree;
        }
        for (int k = 0; k < alpha; ++k) m.bt[j * alpha + k] = c[k];
    }
    for (int j = 0; j < finite; ++j) {
        const double p = points[j];
        double f = 1;
        for (int l = 0; l < finite; ++l)
            if (l != j) f *= p - points[l];
        double power = 1;
        for (int k = 0; k < R; ++k, power *= p) m.g[j * R + k] = power / f;
        m.at[j] = 1;
        m.at[alpha + j] = p;
    }
    m.at[2 * alpha - 1] = 1;
    m.g[(alpha - 1) * R + R - 1] = 1;
    return m;
}

}  // namespace lenet::cpu
