// The fused path's kernel: one block per tile of images, every op of the program
// in turn over shared memory, a barrier between phases (fused_program.h holds the
// work; the host emulation runs the same code).

#include "fused.cuh"

namespace lenet::cuda::fused {
namespace {

// One image a block: 1024 threads share its work (small batches); a tile of several:
// 256 threads, the registers for the tile's sums.
template <int IPB>
__global__ void __launch_bounds__(IPB == 1 ? 1024 : 256)
    forward(const Op* __restrict__ ops, int op_count, Tile tile, const float* values, const uint8_t* pixels,
            float scale, float* y, int n) {
    extern __shared__ float smem[];
    const int first = blockIdx.x * IPB;
    const int count = min(IPB, n - first);
    const int64_t in_at = int64_t(first) * tile.input_size;
    load_tile(tile, values ? values + in_at : nullptr, pixels ? pixels + in_at : nullptr, scale, count, smem,
              threadIdx.x, blockDim.x);
    __syncthreads();
    for (int k = 0; k < op_count; ++k) {
        const Op& op = ops[k];
        const int phases = op.phases();
        for (int phase = 0; phase < phases; ++phase) {
            run_phase<IPB>(op, phase, smem, threadIdx.x, blockDim.x);
            __syncthreads();
        }
    }
    store_tile(tile, smem, y + int64_t(first) * tile.output_size, count, threadIdx.x, blockDim.x);
}

template <int IPB>
cudaError_t launch_tiles(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes,
                         const float* values, const uint8_t* pixels, float scale, float* y, int n,
                         cudaStream_t stream) {
    const unsigned blocks = unsigned((n + IPB - 1) / IPB);
    forward<IPB><<<blocks, threads, shared_bytes, stream>>>(ops, op_count, tile, values, pixels, scale, y, n);
    return cudaGetLastError();
}

}  // namespace

cudaError_t allow_shared_memory(int images, int shared_bytes) {
    switch (images) {
        case 1: return cudaFuncSetAttribute(forward<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
        case 2: return cudaFuncSetAttribute(forward<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
        case 4: return cudaFuncSetAttribute(forward<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
        case 8: return cudaFuncSetAttribute(forward<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes);
    }
    return cudaErrorInvalidValue;
}

cudaError_t launch(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes, const float* values,
                   const uint8_t* pixels, float scale, float* y, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    switch (tile.images) {
        case 1: return launch_tiles<1>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream);
        case 2: return launch_tiles<2>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream);
        case 4: return launch_tiles<4>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream);
        case 8: return launch_tiles<8>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream);
    }
    return cudaErrorInvalidValue;
}

}  // namespace lenet::cuda::fused
