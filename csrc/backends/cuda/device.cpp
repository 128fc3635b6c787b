// What can be asked about the GPU without an engine: how many there are, and how
// much device memory this process uses (through NVML, which sees every allocation
// of the process, cuDNN's and cuBLAS's included, and none of other processes').
#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "cuda_backend.h"
#include "resources.h"

namespace lenet::cuda {

int device_count(std::string* why) {
    int n = 0;
    const cudaError_t s = cudaGetDeviceCount(&n);
    if (s != cudaSuccess) {
        if (why) *why = std::string(cudaGetErrorName(s)) + ": " + cudaGetErrorString(s);
        cudaGetLastError();
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA device found";
    return n;
}

namespace {

// The few NVML declarations used (nvml.h is not in the CUDA toolkit's wheels);
// NVML's ABI is stable: these are the versioned entry points of its header.
using nvmlReturn = int;
using nvmlDevice = struct nvmlDeviceOpaque*;
struct NvmlProcessInfo {  // nvmlProcessInfo_v2_t
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};
constexpr nvmlReturn kNvmlSuccess = 0, kNvmlInsufficientSize = 7;

struct Nvml {
    nvmlReturn (*init)() = nullptr;
    nvmlReturn (*by_bus_id)(const char*, nvmlDevice*) = nullptr;
    nvmlReturn (*processes)(nvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
    bool ok = false;
    std::string why;
};

const Nvml& nvml() {
    static Nvml n = [] {
        Nvml r;
        void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            r.why = "NVML (libnvidia-ml.so.1) not found";
            return r;
        }
        r.init = reinterpret_cast<decltype(r.init)>(dlsym(h, "nvmlInit_v2"));
        r.by_bus_id = reinterpret_cast<decltype(r.by_bus_id)>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
        r.processes = reinterpret_cast<decltype(r.processes)>(dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
        if (!r.init || !r.by_bus_id || !r.processes) {
            r.why = "NVML lacks nvmlDeviceGetComputeRunningProcesses_v3";
            return r;
        }
        if (r.init() != kNvmlSuccess) {
            r.why = "nvmlInit_v2 failed";
            return r;
        }
        r.ok = true;
        return r;
    }();
    return n;
}

}  // namespace

int64_t process_memory_used(std::string* why) {
    const Nvml& n = nvml();
    if (!n.ok) {
        if (why) *why = n.why;
        return -1;
    }
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, 0) != cudaSuccess) {
        cudaGetLastError();
        if (why) *why = "no CUDA device";
        return -1;
    }
    nvmlDevice device = nullptr;
    if (n.by_bus_id(bus, &device) != kNvmlSuccess) {
        if (why) *why = std::string("NVML does not know the device at ") + bus;
        return -1;
    }
    std::vector<NvmlProcessInfo> infos(64);
    unsigned int count = unsigned(infos.size());
    nvmlReturn st = n.processes(device, &count, infos.data());
    if (st == kNvmlInsufficientSize) {
        infos.resize(count + 16);
        count = unsigned(infos.size());
        st = n.processes(device, &count, infos.data());
    }
    if (st != kNvmlSuccess) {
        if (why) *why = "nvmlDeviceGetComputeRunningProcesses_v3 failed (" + std::to_string(st) + ")";
        return -1;
    }
    const unsigned int pid = unsigned(getpid());
    for (unsigned int i = 0; i < count; ++i)
        if (infos[i].pid == pid) return int64_t(infos[i].usedGpuMemory);
    if (why) *why = "NVML lists no process with this pid (a container's pid namespace?)";
    return -1;
}

}  // namespace lenet::cuda
