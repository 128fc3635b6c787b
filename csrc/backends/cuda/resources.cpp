#include "resources.h"

#include "transfer.h"

namespace lenet::cuda {
namespace {

std::atomic<int64_t> g_device_bytes{0}, g_pinned_bytes{0};

}  // namespace

void clear_last_error() noexcept { (void)cudaGetLastError(); }

MemoryHeld memory_held() { return {g_device_bytes.load(), g_pinned_bytes.load()}; }

void release(const Allocation& a) noexcept {
    if (!a.p) return;
    if (a.kind == Allocation::device) {
        ignore_failure(cudaFree(a.p));
        g_device_bytes -= int64_t(a.bytes);
    } else {
        ignore_failure(cudaFreeHost(a.p));
        g_pinned_bytes -= int64_t(a.bytes);
    }
}

DeviceMemory device_alloc(size_t bytes) {
    bytes = bytes ? bytes : 16;
    void* p = nullptr;
    LENET_CHECK(cudaMalloc(&p, bytes));
    g_device_bytes += int64_t(bytes);
    return DeviceMemory({p, bytes, Allocation::device});
}

PinnedMemory pinned_alloc(size_t bytes) {
    bytes = bytes ? bytes : 16;
    void* p = nullptr;
    LENET_CHECK(cudaMallocHost(&p, bytes));
    g_pinned_bytes += int64_t(bytes);
    return PinnedMemory({p, bytes, Allocation::pinned});
}

PinnedMemory mapped_alloc(size_t bytes) {
    bytes = bytes ? bytes : 16;
    void* p = nullptr;
    LENET_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped));
    g_pinned_bytes += int64_t(bytes);
    return PinnedMemory({p, bytes, Allocation::pinned});
}

void* device_pointer(const PinnedMemory& mapped) {
    void* d = nullptr;
    LENET_CHECK(cudaHostGetDevicePointer(&d, mapped.get(), 0));
    return d;
}

namespace {

HostBuffers g_buffers;  // what host_buffer handed out and is still owned

}  // namespace

std::shared_ptr<void> host_buffer(size_t bytes) {
    PinnedMemory m = mapped_alloc(bytes);
    const void* device = device_pointer(m);
    const Allocation a = m.release_ownership();
    g_buffers.add(a.p, a.bytes, device);
    return std::shared_ptr<void>(a.p, [a](void*) {
        g_buffers.remove(a.p);
        release(a);
    });
}

const void* find_host_buffer(const void* p, size_t bytes) { return g_buffers.find(p, bytes); }

}  // namespace lenet::cuda
