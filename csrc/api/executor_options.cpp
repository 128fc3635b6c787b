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

void check_device(const std::string& device) {
    if (device != "cpu" && device != "cuda")
        throw InputError("unknown device '" + device + "' (expected 'cpu' or 'cuda')");
}

void check_threads(int threads) {
    if (threads < 0 || threads > 1024)
        throw InputError("threads must be an integer in [1, 1024] (or 0: the CPUs this process may run on), got " +
                         number_str(threads));
}

void check_cpu_kernels(const std::string& kernels) {
    // The sets any build may hold (csrc/backends/cpu/direct.cpp), the BLAS path, and the CUDA
    // backend's layout on the CPU.
    static constexpr const char* kKnown[] = {"auto", "avx512", "avx2", "neon", "generic", "blas", "nchw"};
    for (const char* k : kKnown)
        if (kernels == k) return;
    throw InputError("unknown CPU kernels '" + kernels +
                     "' (expected 'auto', 'avx512', 'avx2', 'neon', 'generic', 'blas' or 'nchw')");
}

void check_precision(const std::string& precision) {
    if (precision != "exact" && precision != "fast")
        throw InputError("precision must be 'exact' or 'fast', not '" + precision + "'");
}

void check_cuda_path(const std::string& path) {
    if (path != "auto" && path != "fused" && path != "library" && path != "fast")
        throw InputError("cuda_path must be 'auto', 'fused', 'library' or 'fast', not '" + path + "'");
}

std::unique_ptr<Executor> executor_open(std::shared_ptr<const Network> network, ExecutorOptions options) {
    if (options.threads == 0) options.threads = std::min(available_cpus(), 1024);
    if (options.threads < 1 || options.threads > 1024)
        throw InputError("threads must be an integer in [1, 1024], got " + number_str(options.threads));
    check_device(options.device);
    check_cpu_kernels(options.cpu_kernels);
    check_precision(options.precision);
    check_cuda_path(options.cuda_path);
    BackendOptions b;
    b.threads = options.threads;
    b.allow_tf32 = options.allow_tf32;
    b.cuda_graphs = options.cuda_graphs;
    b.cpu_kernels = options.cpu_kernels;
    b.precision = options.precision;
    b.cuda_path = options.cuda_path;
    return std::make_unique<Executor>(std::move(network), make_backend(options.device, b), options.threads);
}

}  // namespace lenet::api
