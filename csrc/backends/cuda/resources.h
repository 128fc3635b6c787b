// RAII owners for every CUDA, cuDNN and cuBLAS object the backend creates.
// Destructors release without throwing (a failure there has nowhere to go).
// Device and pinned memory are counted, so that a test can see what the engine
// itself holds whatever else shares the GPU (memory_held()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "check.h"

namespace lenet::cuda {

template <typename T, auto Destroy>
struct Deleter {
    void operator()(T p) const noexcept {
        if (p) ignore_failure(Destroy(p));
    }
};

template <typename T, auto Destroy>
using Owned = std::unique_ptr<std::remove_pointer_t<T>, Deleter<T, Destroy>>;

using CudnnHandle = Owned<cudnnHandle_t, lib::cudnnDestroy>;
using CublasHandle = Owned<cublasHandle_t, lib::cublasDestroy_v2>;
using StreamHandle = Owned<cudaStream_t, cudaStreamDestroy>;
using GraphHandle = Owned<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = Owned<cudaGraphExec_t, cudaGraphExecDestroy>;
using EventHandle = Owned<cudaEvent_t, cudaEventDestroy>;
using TensorDesc = Owned<cudnnTensorDescriptor_t, lib::cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, lib::cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, lib::cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Owned<cudnnPoolingDescriptor_t, lib::cudnnDestroyPoolingDescriptor>;
using ActDesc = Owned<cudnnActivationDescriptor_t, lib::cudnnDestroyActivationDescriptor>;

// Bytes of device and pinned host memory the backend holds right now (all engines).
struct MemoryHeld {
    int64_t device = 0, pinned = 0;
};
MemoryHeld memory_held();

// Memory with its size, so that the counters above stay exact.
struct Allocation {
    enum Kind { device, pinned };
    void* p = nullptr;
    size_t bytes = 0;
    Kind kind = device;
};
void release(const Allocation& a) noexcept;

class Memory {
public:
    Memory() = default;
    explicit Memory(Allocation a) : a_(a) {}
    Memory(Memory&& o) noexcept : a_(o.a_) { o.a_ = {}; }
    Memory& operator=(Memory&& o) noexcept {
        if (this != &o) {
            reset();
            a_ = o.a_;
            o.a_ = {};
        }
        return *this;
    }
    Memory(const Memory&) = delete;
    Memory& operator=(const Memory&) = delete;
    ~Memory() { reset(); }

    void* get() const { return a_.p; }
    size_t bytes() const { return a_.bytes; }
    explicit operator bool() const { return a_.p != nullptr; }
    void reset() noexcept {
        if (a_.p) release(a_);
        a_ = {};
    }
    // Gives up ownership (the counters still count it until release(allocation) is called).
    Allocation release_ownership() {
        Allocation a = a_;
        a_ = {};
        return a;
    }

private:
    Allocation a_;
};
using DeviceMemory = Memory;
using PinnedMemory = Memory;

DeviceMemory device_alloc(size_t bytes);
PinnedMemory pinned_alloc(size_t bytes);
// Pinned memory the GPU addresses too (cudaHostAllocMapped): a kernel reads or writes
// it over PCIe, no copy command between. Its device address: device_pointer.
PinnedMemory mapped_alloc(size_t bytes);
void* device_pointer(const PinnedMemory& mapped);

// Mapped pinned buffers handed out to callers (Engine.input_buffer): the memory lives
// while the returned pointer has an owner, whatever became of the engine that made it.
// A stream given an input inside one reads it where it is, with no copy of its own.
std::shared_ptr<void> host_buffer(size_t bytes);
// The device address of [p, p + bytes) when that lies inside a live host_buffer, else null.
const void* find_host_buffer(const void* p, size_t bytes);

template <typename Desc, auto Create>
Desc create() {
    typename Desc::pointer p = nullptr;
    LENET_CHECK(Create(&p));
    return Desc(p);
}

inline TensorDesc tensor_desc(int n, int c, int h, int w) {
    auto d = create<TensorDesc, lib::cudnnCreateTensorDescriptor>();
    LENET_CHECK(lib::cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    return d;
}

}  // namespace lenet::cuda
