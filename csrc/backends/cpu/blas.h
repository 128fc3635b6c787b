// OpenBLAS, the one the build chose (CMake's LENET_BLAS): the scipy-openblas32 wheel's, every
// symbol carrying the scipy_ prefix (LENET_BLAS_SCIPY), or the system's (LENET_BLAS_SYSTEM).
#pragma once

#include <cblas.h>

#if defined(LENET_BLAS_SCIPY)
#define LENET_CBLAS(name) scipy_cblas_##name
#define LENET_OPENBLAS(name) scipy_openblas_##name
#elif defined(LENET_BLAS_SYSTEM)
#define LENET_CBLAS(name) cblas_##name
#define LENET_OPENBLAS(name) openblas_##name
#else
#error "lenet: the build names no OpenBLAS (LENET_BLAS_SCIPY or LENET_BLAS_SYSTEM)"
#endif

namespace lenet::cpu::blas {

inline void sgemm_nn(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta, float* c,
                     int ldc) {
    LENET_CBLAS(sgemm)(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
}

// The same on column-major matrices (the CUDA backend's cublasSgemm, argument for argument).
inline void sgemm_nn_col_major(int m, int n, int k, const float* a, int lda, const float* b, int ldb, float beta,
                               float* c, int ldc) {
    LENET_CBLAS(sgemm)(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc);
}

// y = A^T x + beta*y for a row-major A of shape (rows, cols).
inline void sgemv_t(int rows, int cols, const float* a, const float* x, float beta, float* y) {
    LENET_CBLAS(sgemv)(CblasRowMajor, CblasTrans, rows, cols, 1.f, a, cols, x, 1, beta, y, 1);
}

inline void set_threads(int n) { LENET_OPENBLAS(set_num_threads)(n); }
inline const char* config() { return LENET_OPENBLAS(get_config)(); }

}  // namespace lenet::cpu::blas

#undef LENET_CBLAS
#undef LENET_OPENBLAS
