// Executors made from ExecutorOptions (executor_options.h).
#include "executor_options.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "../support/errors.h"
#include "../support/format.h"

namespace lenet::api {

int available_cpus() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    const unsigned n = std::thread::hardware_concurrency();
    return n ? int(n) : 1;
}

std::unique_ptr<Executor> executor_open(std::shared_ptr<const Network> network, ExecutorOptions options) {
    if (options.threads == 0) options.threads = std::min(available_cpus(), 1024);
    if (options.threads < 1 || options.threads > 1024)
        throw InputError("threads must be an integer in [1, 1024], got " + number_str(options.threads));
    const auto& path = options.cuda_path;
    if (path != "auto" && path != "fused" && path != "library" && path != "fast")
        throw InputError("cuda_path must be 'auto', 'fused', 'library' or 'fast', not '" + path + "'");
    BackendOptions b;
    b.threads = options.threads;
    b.allow_tf32 = options.allow_tf32;
    b.cuda_graphs = options.cuda_graphs;
    b.cpu_kernels = options.cpu_kernels;
    b.cuda_path = path;
    return std::make_unique<Executor>(std::move(network), make_backend(options.device, b), options.threads);
}

}  // namespace lenet::api
