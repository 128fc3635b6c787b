// The fused path's kernel (fused.cu) as the host calls it. See fused_program.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fused_program.h"

namespace lenet::cuda::fused {

// Lets the kernel of a tile of `images` use `shared_bytes` of dynamic shared
// memory (above 48 KiB it must be asked for). Once per plan.
cudaError_t allow_shared_memory(int images, int shared_bytes);

// Runs the program over n images: `values` (float32) or `pixels` (uint8 times
// scale) in, n x tile.output_size floats out. `ops`: the program's ops in device
// memory, their weights device pointers.
cudaError_t launch(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes, const float* values,
                   const uint8_t* pixels, float scale, float* y, int n, cudaStream_t stream);

}  // namespace lenet::cuda::fused
