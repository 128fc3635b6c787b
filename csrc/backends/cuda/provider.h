// Where the CUDA backend's libraries are found: one search, for the core's provider entry
// (provider.cpp, backends/provider.h) and for Python's lenet._cuda alike.
#pragma once

#include <string>
#include <vector>

#include "libraries.h"

namespace lenet::cuda {

// The candidates for load_libraries, in the order tried:
//   1. LENET_CUDA_LIBRARY_PATH, when set: its folders (':' between them), and nothing else;
//   2. the NVIDIA wheels beside the lenet package (nvidia-cudnn-cu13, nvidia-cublas:
//      site-packages/nvidia/cudnn/lib and nvidia/cu13/lib, found from this library's own
//      folder, site-packages/lenet);
//   3. the files the build compiled against (builds against CUDNN_ROOT or the toolkit);
//   4. the system's search by soname (LD_LIBRARY_PATH, then ld.so.cache).
struct Candidates {
    std::vector<std::string> cudnn, cublas;
};
Candidates library_candidates();

// load_libraries(library_candidates()): CudaError naming every candidate tried.
LoadReport load_found_libraries();

// What Python's lenet._cuda reports of the CUDA runtime, asked of the one linked into this
// library (the module links none of its own: one runtime in the process).
struct RuntimeFacts {
    int runtime_version = 0, driver_version = 0;  // 13000 for 13.0; 0: none
    std::string gpu;                              // device 0's name; empty: none
    size_t free_bytes = 0, total_bytes = 0;       // device 0's memory; 0 without one
};
RuntimeFacts runtime_facts(bool with_memory);

}  // namespace lenet::cuda
