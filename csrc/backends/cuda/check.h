// One check shape for every CUDA, cuDNN and cuBLAS call: LENET_CHECK(call)
// throws lenet::CudaError with the call's text, file:line and the library's own
// message. It never aborts: a library must not take its host process down.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "../../support/errors.h"
#include "libraries.h"

namespace lenet::cuda {

[[noreturn]] inline void fail(const char* call, const char* file, int line, const std::string& message) {
    // "lib::cudnnCreate(&h)" is named as the library names it (see libraries.h).
    const std::string text = std::string(call).rfind("lib::", 0) == 0 ? call + 5 : call;
    throw CudaError(text + " failed at " + file + ":" + std::to_string(line) + ": " + message);
}

inline void check(cudaError_t s, const char* call, const char* file, int line) {
    if (s != cudaSuccess) {
        cudaGetLastError();  // reset the runtime's last error so later checks start clean
        fail(call, file, line, std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s));
    }
}

inline void check(cudnnStatus_t s, const char* call, const char* file, int line) {
    if (s != CUDNN_STATUS_SUCCESS) {
        char detail[512] = {0};
        lib::cudnnGetLastErrorString(detail, sizeof(detail));
        fail(call, file, line,
             std::string(lib::cudnnGetErrorString(s)) + (detail[0] ? std::string(" (") + detail + ")" : ""));
    }
}

inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        fail(call, file, line, std::string(lib::cublasGetStatusName(s)) + ": " + lib::cublasGetStatusString(s));
}

// A call whose failure is deliberately ignored (a release in a destructor, a drain after
// a failure): its error is taken back off the runtime's last error, where the next launch's
// cudaGetLastError() check would otherwise report it as that launch's. An error already
// pending (a launch not yet checked) is left as it was; a sticky one cannot be cleared.
void clear_last_error() noexcept;  // cudaGetLastError(), out of line: the runtime lives in liblenet_cuda.so
template <class Status>
inline void ignore_failure(Status s) noexcept {
    if (s != Status{}) clear_last_error();  // success is 0 for CUDA, cuDNN and cuBLAS
}

}  // namespace lenet::cuda

#define LENET_CHECK(call) ::lenet::cuda::check((call), #call, __FILE__, __LINE__)
