// The CPU backend's entry points (registered in backends/registry.cpp).
#pragma once

#include <memory>
#include <string>

#include "../backend.h"

namespace lenet::cpu {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);
// The OpenBLAS build in use (version, kernel set, threading).
std::string blas_info();

}  // namespace lenet::cpu
