// The fused path's kernel: one block per tile of images, every op of the program
// in turn over shared memory, a barrier between phases (fused_program.h holds the
// work; the host emulation runs the same code).

#include <map>
#include <mutex>
#include <utility>

#include "fused.cuh"

namespace lenet::cuda::fused {
namespace {

template <int IPB>
__device__ void run_tile(const Op* __restrict__ ops, int op_count, const Tile& tile, const float* values,
                         const uint8_t* pixels, float scale, float* y, int n, const Completion& done) {
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
    signal_block_done(done);
}

// One image a block: 1024 threads share its work (small batches); a tile of several:
// 256 threads, the registers for the tile's sums.
template <int IPB>
__global__ void __launch_bounds__(IPB == 1 ? 1024 : 256)
    forward(const Op* __restrict__ ops, int op_count, Tile tile, const float* values, const uint8_t* pixels,
            float scale, float* y, int n, Completion done) {
    run_tile<IPB>(ops, op_count, tile, values, pixels, scale, y, n, done);
}

// The input as the launch's own parameter (transfer.h, "parameter"): no copy command
// before the kernel. __grid_constant__: read in place, never copied per thread.
template <int Bytes>
struct Blob {
    alignas(16) unsigned char b[Bytes];
};
constexpr int kLargestBlob = kParameterBlobs[sizeof(kParameterBlobs) / sizeof(int) - 1];
// CUDA 12.1+ (Volta and later) takes 32,764 bytes of parameters; the blob's neighbours
// (ops, op_count, tile, pixels, scale, y, n, done) take well under the margin.
static_assert(sizeof(Blob<kLargestBlob>) + sizeof(Tile) + sizeof(Completion) + 64 <= 32764,
              "the fused kernel's parameters must stay within CUDA's 32,764 bytes");

template <int Bytes>
__global__ void __launch_bounds__(1024)
    forward_parameter(const Op* __restrict__ ops, int op_count, Tile tile, const __grid_constant__ Blob<Bytes> x,
                      bool pixels, float scale, float* y, int n, Completion done) {
    run_tile<1>(ops, op_count, tile, pixels ? nullptr : reinterpret_cast<const float*>(x.b), pixels ? x.b : nullptr,
                scale, y, n, done);
}

template <int IPB>
cudaError_t launch_tiles(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes,
                         const float* values, const uint8_t* pixels, float scale, float* y, int n, cudaStream_t stream,
                         const Completion& done) {
    const unsigned blocks = unsigned((n + IPB - 1) / IPB);
    forward<IPB><<<blocks, threads, shared_bytes, stream>>>(ops, op_count, tile, values, pixels, scale, y, n, done);
    return cudaGetLastError();
}

template <int Bytes>
cudaError_t launch_blob(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes, const void* blob,
                        bool pixels, float scale, float* y, int n, cudaStream_t stream, const Completion& done) {
    forward_parameter<Bytes><<<unsigned(n), threads, shared_bytes, stream>>>(
        ops, op_count, tile, *static_cast<const Blob<Bytes>*>(blob), pixels, scale, y, n, done);
    return cudaGetLastError();
}

}  // namespace

cudaError_t allow_shared_memory(int images, int shared_bytes) {
    // The attribute belongs to the kernel, for the whole process on a device, not to a
    // plan: engines planned for different models share it. It only ever rises, so that
    // a second engine that needs less does not fail the first's launches.
    static std::mutex mutex;
    static std::map<std::pair<int, int>, int> allowed;  // (device, images per block) -> bytes
    int device = 0;
    if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
    std::lock_guard<std::mutex> lock(mutex);
    int& now = allowed[{device, images}];
    if (shared_bytes <= now) return cudaSuccess;
    const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaErrorInvalidValue;
    switch (images) {
        case 1:
            e = cudaSuccess;
            for (cudaError_t blob : {cudaFuncSetAttribute(forward_parameter<kParameterBlobs[0]>, a, shared_bytes),
                                     cudaFuncSetAttribute(forward_parameter<kParameterBlobs[1]>, a, shared_bytes),
                                     cudaFuncSetAttribute(forward_parameter<kParameterBlobs[2]>, a, shared_bytes)})
                if (e == cudaSuccess) e = blob;
            if (e == cudaSuccess) e = cudaFuncSetAttribute(forward<1>, a, shared_bytes);
            break;
        case 2: e = cudaFuncSetAttribute(forward<2>, a, shared_bytes); break;
        case 4: e = cudaFuncSetAttribute(forward<4>, a, shared_bytes); break;
        case 8: e = cudaFuncSetAttribute(forward<8>, a, shared_bytes); break;
    }
    if (e == cudaSuccess) now = shared_bytes;
    return e;
}

cudaError_t launch(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes, const float* values,
                   const uint8_t* pixels, float scale, float* y, int n, cudaStream_t stream, const Completion& done) {
    if (n <= 0) return cudaSuccess;
    switch (tile.images) {
        case 1:
            return launch_tiles<1>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream,
                                   done);
        case 2:
            return launch_tiles<2>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream,
                                   done);
        case 4:
            return launch_tiles<4>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream,
                                   done);
        case 8:
            return launch_tiles<8>(ops, op_count, tile, threads, shared_bytes, values, pixels, scale, y, n, stream,
                                   done);
    }
    return cudaErrorInvalidValue;
}

cudaError_t launch_parameter(const Op* ops, int op_count, const Tile& tile, int threads, int shared_bytes,
                             const void* blob, int blob_bytes, bool pixels, float scale, float* y, int n,
                             cudaStream_t stream, const Completion& done) {
    if (n <= 0) return cudaSuccess;
    if (tile.images != 1) return cudaErrorInvalidValue;  // one image a block: blockIdx.x is the image
    switch (blob_bytes) {
        case kParameterBlobs[0]:
            return launch_blob<kParameterBlobs[0]>(ops, op_count, tile, threads, shared_bytes, blob, pixels, scale, y,
                                                   n, stream, done);
        case kParameterBlobs[1]:
            return launch_blob<kParameterBlobs[1]>(ops, op_count, tile, threads, shared_bytes, blob, pixels, scale, y,
                                                   n, stream, done);
        case kParameterBlobs[2]:
            return launch_blob<kParameterBlobs[2]>(ops, op_count, tile, threads, shared_bytes, blob, pixels, scale, y,
                                                   n, stream, done);
    }
    return cudaErrorInvalidValue;
}

}  // namespace lenet::cuda::fused
