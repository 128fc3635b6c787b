// The matrices of Winograd's F(m x m, r x r), computed at compile time from the
// interpolation points, so that the transforms (direct_kernels.cpp) skip the zeros
// and ones of B^T and A^T and the packing (winograd.cpp) uses the same G.
//
// Toom-Cook at alpha - 1 finite points and infinity, alpha = m + r - 1: A^T evaluates
// the output polynomial, G the kernel's (divided by the Lagrange denominators), B^T
// the data's; Y = A^T [(G g) . (B^T d)] is the correlation of d with g, and in 2-D
// Y = A^T [(G g G^T) . (B^T d B)] A. The points are chosen for float32 rounding:
// 0, 1, -1 for F(2, 3); 0, 1, -1, 1/2, -2 for F(2, 5) (0, 1, -1, 2, -2 rounds twice
// as badly on lenet-tf's second layer: PERFORMANCE.md) and for F(4, 3) (0, +-1, +-2 and
// 0, +-1, +-1/2 round about 2.4x as badly on a 3x3 32 -> 64 layer); 0, +-1, +-2, +-1/2
// for F(4, 5), whose rounding is about 5x F(2, 5)'s (PERFORMANCE.md, issue 61).
#pragma once

#include <array>

namespace lenet::cpu {

template <int M, int R>
struct WinogradMatrices {
    static constexpr int m = M;
    static constexpr int alpha = M + R - 1;
    std::array<double, M * alpha> at{};      // m x alpha, row-major
    std::array<double, alpha * R> g{};       // alpha x r
    std::array<double, alpha * alpha> bt{};  // alpha x alpha
};

template <int M, int R>
constexpr WinogradMatrices<M, R> winograd_matrices() {
    static_assert((M == 2 || M == 4) && (R == 3 || R == 5),
                  "F(m x m, r x r) is defined here for F(2, 3), F(2, 5), F(4, 3) and F(4, 5)");
    constexpr int alpha = M + R - 1, finite = alpha - 1;
    std::array<double, finite> points{};
    if constexpr (M == 2 && R == 3)
        points = {0, 1, -1};
    else if constexpr (alpha == 6)  // F(2, 5) and F(4, 3)
        points = {0, 1, -1, 0.5, -2};
    else
        points = {0, 1, -1, 2, -2, 0.5, -0.5};
    WinogradMatrices<M, R> w;
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
        for (int k = 0; k < alpha; ++k) w.bt[j * alpha + k] = c[k];
    }
    for (int j = 0; j < finite; ++j) {
        const double p = points[j];
        double f = 1;
        for (int l = 0; l < finite; ++l)
            if (l != j) f *= p - points[l];
        double power = 1;
        for (int k = 0; k < R; ++k, power *= p) w.g[j * R + k] = power / f;
        power = 1;
        for (int k = 0; k < M; ++k, power *= p) w.at[k * alpha + j] = power;
    }
    w.at[(M - 1) * alpha + alpha - 1] = 1;
    w.g[(alpha - 1) * R + R - 1] = 1;
    return w;
}

}  // namespace lenet::cpu
