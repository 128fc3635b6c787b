// The one place backends are registered. The CPU backend is built in; the CUDA backend
// is a library of its own (liblenet_cuda.so, beside the core's library), loaded here the
// first time a program asks for device "cuda" (provider.h), so the core never links CUDA.
#include <dlfcn.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "../support/errors.h"
#include "backend.h"
#include "cpu/cpu_backend.h"
#include "provider.h"

namespace lenet {
namespace {
std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
}
std::map<std::string, BackendFactory>& registry() {
    static std::map<std::string, BackendFactory> r{{"cpu", cpu::make_cpu_backend}};
    return r;
}

// The CUDA backend's factory from liblenet_cuda.so beside this binary, its libraries
// loaded; CudaError naming what is missing. A failure is tried again on the next ask (a
// library installed since may be there).
BackendFactoryFunction load_cuda_provider() {
    Dl_info self{};
    if (!dladdr(reinterpret_cast<void*>(&load_cuda_provider), &self) || !self.dli_fname)
        throw CudaError("the CUDA backend is not available: lenet cannot tell where its own library is");
    std::string path = self.dli_fname;
    path = path.substr(0, path.rfind('/') + 1) + kCudaProviderFile;
    if (::access(path.c_str(), F_OK) != 0)
        throw CudaError("the CUDA backend is not available: lenet was built without it (no " + path +
                        "); to build it: LENET_CUDA=ON pip install \".[cuda]\" (needs nvcc)");
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        const char* e = dlerror();
        throw CudaError("the CUDA backend cannot be loaded: " + std::string(e ? e : path + ": dlopen failed"));
    }
    const auto entry = reinterpret_cast<BackendProviderEntry>(dlsym(library, kCudaProviderEntry));
    if (!entry) throw CudaError(path + ": no " + kCudaProviderEntry + " (not a lenet backend library)");
    const BackendProvider* provider = entry();
    if (std::strcmp(provider->build, kBackendBuild) != 0)
        throw CudaError(path + ": a CUDA backend of another build (" + provider->build + "; this one is " +
                        kBackendBuild + "): install lenet again");
    if (const char* missing = provider->load(); *missing) throw CudaError(missing);
    return provider->make;
}

void register_backend(const std::string& name, BackendFactory factory) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry()[name] = std::move(factory);
}

}  // namespace

bool backend_registered(const std::string& name) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    return registry().count(name) > 0;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
    BackendFactory factory;
    {
        std::lock_guard<std::mutex> lock(registry_mutex());
        auto it = registry().find(name);
        if (it != registry().end())
            factory = it->second;
        else if (name != "cuda")
            throw InputError("unknown device '" + name + "' (expected 'cpu' or 'cuda')");
    }
    if (!factory) {
        // Outside the registry's lock: loading cuDNN takes a while, and the CPU need not wait.
        static std::mutex loading;
        std::lock_guard<std::mutex> lock(loading);
        factory = load_cuda_provider();
        register_backend(name, factory);
    }
    return factory(options);
}

}  // namespace lenet
