// OpenBLAS from the scipy-openblas32 wheel: every symbol carries the scipy_ prefix.
#pragma once

#include <cblas.h>

namespace lenet::cpu::blas {

inline void sgemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                     int ldc) {
    scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
}

// y = A^T x + beta*y for a row-major A of shape (rows, cols).
inline void sgemv_t(int rows, int cols, const float* a, const float* x, float beta, float* y) {
    scipy_cblas_sgemv(CblasRowMajor, CblasTrans, rows, cols, 1.f, a, cols, x, 1, beta, y, 1);
}

inline void set_threads(int n) { scipy_openblas_set_num_threads(n); }
inline const char* config() { return scipy_openblas_get_config(); }

}  // namespace lenet::cpu::blas
