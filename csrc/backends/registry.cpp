// The one place backends are registered. The CPU backend is built in; the CUDA
// backend lives in its own extension module (lenet._cuda), which registers
// itself here when Python imports it, so the core never links CUDA.
#include <map>
#include <mutex>

#include "../support/errors.h"
#include "backend.h"
#include "cpu/cpu_backend.h"

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
}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry()[name] = std::move(factory);
}

bool backend_registered(const std::string& name) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    return registry().count(name) > 0;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
    BackendFactory factory;
    {
        std::lock_guard<std::mutex> lock(registry_mutex());
        auto it = registry().find(name);
        if (it == registry().end()) {
            if (name == "cuda")
                throw CudaError(
                    "the CUDA backend is not available: lenet was built without it, or its module "
                    "could not be loaded (see lenet.info())");
            throw InputError("unknown device '" + name + "' (expected 'cpu' or 'cuda')");
        }
        factory = it->second;
    }
    return factory(options);
}

}  // namespace lenet
