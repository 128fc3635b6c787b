// The fused path's kernel (fused.cu) as the host calls it. See fused_program.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "fused_program.h"
#include "transfer.h"

namespace lenet::cuda::fused {

// Lets the kernel of a tile of `images` use `shared_bytes` of dynamic shared
// memory (above 48 KiB it must be asked for). Once per plan; the allowance is the
// process's and only rises (a smaller ask leaves it as it is).
cudaError_t allow_shared_memory(int images, int shared_bytes);

// Runs the program over n images: `values` (float32) or `pixels` (uint8 times
// scale) in, n x tile.output_size floats out. `ops`: the program's ops in device
// memory, their weights device pointers. `done`: the completion flag to raise once
// every answer is stored (none by default: the caller synchronizes the stream).
cudaError_t launch(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes, const float* values,
                   const uint8_t* pixels, float scale, float* y, int n, cudaStream_t stream,
                   const Completion& done = {});

// The same, with the n images' input (float32 values, or uint8 pixels when `pixels`)
// at the start of `blob`, host memory of blob_bytes (one of kParameterBlobs), passed as
// the launch's parameter. Only for programs of one image a block.
cudaError_t launch_parameter(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes,
                             const void* blob, int blob_bytes, bool pixels, float scale, float* y, int n,
                             cudaStream_t stream, const Completion& done);

}  // namespace lenet::cuda::fused
