// RAII owners for every CUDA, cuDNN and cuBLAS object the backend creates.
// Destructors release without throwing (a failure there has nowhere to go).
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>

#include "check.h"

namespace lenet::cuda {

template <typename T, auto Destroy>
struct Deleter {
    void operator()(T p) const noexcept {
        if (p) (void)Destroy(p);
    }
};

template <typename T, auto Destroy>
using Owned = std::unique_ptr<std::remove_pointer_t<T>, Deleter<T, Destroy>>;

using CudnnHandle = Owned<cudnnHandle_t, cudnnDestroy>;
using CublasHandle = Owned<cublasHandle_t, cublasDestroy>;
using StreamHandle = Owned<cudaStream_t, cudaStreamDestroy>;
using GraphHandle = Owned<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = Owned<cudaGraphExec_t, cudaGraphExecDestroy>;
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Owned<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;
using ActDesc = Owned<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;
using OpTensorDesc = Owned<cudnnOpTensorDescriptor_t, cudnnDestroyOpTensorDescriptor>;

inline void device_free(void* p) noexcept { (void)cudaFree(p); }
inline void host_free(void* p) noexcept { (void)cudaFreeHost(p); }
using DeviceMemory = std::unique_ptr<void, Deleter<void*, device_free>>;
using PinnedMemory = std::unique_ptr<void, Deleter<void*, host_free>>;

inline DeviceMemory device_alloc(size_t bytes) {
    void* p = nullptr;
    LENET_CHECK(cudaMalloc(&p, bytes ? bytes : 16));
    return DeviceMemory(p);
}

inline PinnedMemory pinned_alloc(size_t bytes) {
    void* p = nullptr;
    LENET_CHECK(cudaMallocHost(&p, bytes ? bytes : 16));
    return PinnedMemory(p);
}

template <typename Desc, auto Create>
Desc create() {
    typename Desc::pointer p = nullptr;
    LENET_CHECK(Create(&p));
    return Desc(p);
}

inline TensorDesc tensor_desc(int n, int c, int h, int w) {
    auto d = create<TensorDesc, cudnnCreateTensorDescriptor>();
    LENET_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    return d;
}

}  // namespace lenet::cuda
