// liblenet_cuda.so's entry point (backends/provider.h) and the one search for cuDNN and
// cuBLAS (provider.h).
#include "provider.h"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <string>

#include "../../support/errors.h"
#include "../provider.h"
#include "cuda_backend.h"
#include "cuda_libraries.h"

namespace lenet::cuda {
namespace {

// The folder that holds this library's folder (site-packages/ for site-packages/lenet/),
// with its '/'; "" where it cannot be told.
std::string package_parent() {
    Dl_info self{};
    if (!dladdr(reinterpret_cast<void*>(&library_candidates), &self) || !self.dli_fname) return "";
    char real[PATH_MAX];
    std::string path = realpath(self.dli_fname, real) ? real : self.dli_fname;
    for (int up = 0; up < 2; ++up) {
        const size_t slash = path.rfind('/');
        if (slash == std::string::npos || slash == 0) return "";
        path.resize(slash);
    }
    return path + "/";
}

// The driver first: without it no GPU can be used, and cuDNN and cuBLAS (hundreds of MB)
// are not loaded for nothing.
std::string driver_missing() {
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) return "";  // kept open: the runtime uses it
    const char* e = dlerror();
    return std::string("no NVIDIA driver: libcuda.so.1 cannot be loaded (") + (e ? e : "dlopen failed") +
           "); device 'cuda' needs an NVIDIA GPU and its driver";
}

const char* provider_load() {
    static std::once_flag once;
    static std::string missing;
    std::call_once(once, [] {
        missing = driver_missing();
        if (!missing.empty()) return;
        try {
            load_found_libraries();
        } catch (const std::exception& e) {
            missing = std::string("the CUDA backend is built, but ") + e.what() +
                      " (pip install nvidia-cudnn-cu13 nvidia-cublas beside lenet, or set LENET_CUDA_LIBRARY_PATH)";
        }
    });
    return missing.c_str();
}

const BackendProvider kProvider{kBackendBuild, provider_load, make_cuda_backend};

}  // namespace

Candidates library_candidates() {
    Candidates c;
    const char* sonames[2] = {"libcudnn.so.9", "libcublas.so.13"};
    std::vector<std::string>* lists[2] = {&c.cudnn, &c.cublas};
    if (const char* path = std::getenv("LENET_CUDA_LIBRARY_PATH"); path && *path) {
        const std::string folders = path;
        for (size_t start = 0; start <= folders.size();) {
            const size_t end = std::min(folders.find(':', start), folders.size());
            if (end > start)
                for (int k = 0; k < 2; ++k) lists[k]->push_back(folders.substr(start, end - start) + "/" + sonames[k]);
            start = end + 1;
        }
        return c;
    }
    const std::string site = package_parent();
    const char* wheels[2] = {"nvidia/cudnn/lib/", "nvidia/cu13/lib/"};
    const char* built[2] = {LENET_CUDNN_LIBRARY, LENET_CUBLAS_LIBRARY};
    for (int k = 0; k < 2; ++k) {
        if (!site.empty()) lists[k]->push_back(site + wheels[k] + sonames[k]);
        if (*built[k] && std::find(lists[k]->begin(), lists[k]->end(), built[k]) == lists[k]->end())
            lists[k]->push_back(built[k]);
        lists[k]->push_back(sonames[k]);
    }
    return c;
}

LoadReport load_found_libraries() {
    const Candidates c = library_candidates();
    return load_libraries(c.cudnn, c.cublas);
}

RuntimeFacts runtime_facts(bool with_memory) {
    RuntimeFacts f;
    cudaRuntimeGetVersion(&f.runtime_version);
    cudaDriverGetVersion(&f.driver_version);
    if (device_count(nullptr) > 0) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) f.gpu = prop.name;
        if (with_memory && cudaMemGetInfo(&f.free_bytes, &f.total_bytes) != cudaSuccess)
            f.free_bytes = f.total_bytes = 0;
    }
    cudaGetLastError();  // what failed here is said by what is empty
    return f;
}

}  // namespace lenet::cuda

extern "C" __attribute__((visibility("default"))) const lenet::BackendProvider* lenet_cuda_provider() {
    return &lenet::cuda::kProvider;
}
