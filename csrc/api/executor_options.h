// What the C API (include/lenet/lenet_c.h) and the Python binding share below the public
// headers: an Executor made from the same options, checked once, here, so that both say
// the same thing about a bad one.
#pragma once

#include <memory>
#include <string>

#include "../runtime/executor.h"

namespace lenet::api {

// How an engine runs: lenet_options behind the C ABI, Python's Engine arguments.
struct ExecutorOptions {
    std::string device = "cpu";  // "cpu" or "cuda"
    int threads = 0;             // 1..1024; 0: the CPUs this process may run on
    std::string cpu_kernels = "auto";  // "auto", "avx512", "avx2", "neon", "generic", "blas" or "nchw"
    std::string precision = "exact";   // "exact" or "fast" (BackendOptions::precision)
    bool allow_tf32 = false;
    bool cuda_graphs = true;
    std::string cuda_path = "auto";  // "auto", "fused", "library" or "fast"
};

// Each option's check, as the C ABI's setters and executor_open make it: InputError naming the
// option, its value and the values it takes. Whether this CPU runs the kernels named is
// known when the engine is made (LENET_MAX_CPU_ISA is read then).
void check_device(const std::string& device);
void check_threads(int threads);
void check_cpu_kernels(const std::string& kernels);
void check_precision(const std::string& precision);
void check_cuda_path(const std::string& path);

// The CPUs this process may run on (its affinity mask), as Python's default_threads().
int available_cpus();

// An Executor for `network` on the backend `options` name (threads 0: available_cpus()).
// InputError for a bad option, CudaError where the CUDA backend cannot be had.
std::unique_ptr<Executor> executor_open(std::shared_ptr<const Network> network, ExecutorOptions options);

}  // namespace lenet::api
