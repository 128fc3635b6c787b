// The CUDA backend's entry points, used by the _cuda extension module.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../backend.h"

namespace lenet::cuda {

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& options);

// Number of usable CUDA devices; 0 (never an exception) when there is no GPU or
// driver, with the runtime's reason in *why.
int device_count(std::string* why);

// Bytes of device memory this process uses on device 0, from NVML; -1 when NVML
// cannot say (no driver, a pid it does not list), with the reason in *why.
int64_t process_memory_used(std::string* why);

}  // namespace lenet::cuda
