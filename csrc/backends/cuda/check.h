// One check shape for every CUDA, cuDNN and cuBLAS call: LENET_CHECK(call)
// throws lenet::CudaError with the call's text, file:line and the library's own
// message. It never aborts: a library must not take its host process down.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "../../support/errors.h"

namespace lenet::cuda {

[[noreturn]] inline void fail(const char* call, const char* file, int line, const std::string& message) {
    throw CudaError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + message);
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
        cudnnGetLastErrorString(detail, sizeof(detail));
        fail(call, file, line, std::string(cudnnGetErrorString(s)) + (detail[0] ? std::string(" (") + detail + ")" : ""));
    }
}

inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        fail(call, file, line, std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s));
}

}  // namespace lenet::cuda

#define LENET_CHECK(call) ::lenet::cuda::check((call), #call, __FILE__, __LINE__)
