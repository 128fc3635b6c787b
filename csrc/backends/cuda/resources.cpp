#include "resources.h"

namespace lenet::cuda {
namespace {

std::atomic<int64_t> g_device_bytes{0}, g_pinned_bytes{0};

}  // namespace

MemoryHeld memory_held() { return {g_device_bytes.load(), g_pinned_bytes.load()}; }

void release(const Allocation& a) noexcept {
    if (!a.p) return;
    if (a.kind == Allocation::device) {
        (void)cudaFree(a.p);
        g_device_bytes -= int64_t(a.bytes);
    } else {
        (void)cudaFreeHost(a.p);
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

}  // namespace lenet::cuda
