// How a launch tells the host it is done without a stream synchronize (transfer.h):
// each block, once its answers are stored and fenced, counts itself in `arrived`
// (device memory, 0 between launches); the last block of the grid resets the count
// and writes `seq` to `flag`, mapped pinned memory the host spins on. Host and device
// code: the fused kernel's host emulation runs block_done() as the kernel does.
#pragma once

#if defined(__CUDACC__)
#define LENET_COMPLETION_FN __host__ __device__ inline
#else
#define LENET_COMPLETION_FN inline
#endif

namespace lenet::cuda {

struct Completion {
    unsigned* arrived = nullptr;  // device memory
    unsigned* flag = nullptr;     // mapped pinned memory, as the device addresses it; null: no signal
    unsigned seq = 0;             // the call's number: what the host waits to read
};

// Run by one thread of each block, after every thread of the block stored its
// answers, a barrier and that thread's system fence (signal_block_done).
LENET_COMPLETION_FN void block_done(const Completion& c, unsigned blocks) {
#if defined(__CUDA_ARCH__)
    const unsigned before = atomicAdd(c.arrived, 1u);
#else
    const unsigned before = (*c.arrived)++;
#endif
    if (before + 1 != blocks) return;
    // The last block: every other block fenced its answers before counting itself, so
    // they are visible to the host before the flag is.
    *c.arrived = 0;  // for the next launch, which the stream orders after this one
#if defined(__CUDA_ARCH__)
    __threadfence_system();
    *static_cast<volatile unsigned*>(c.flag) = c.seq;
#else
    *c.flag = c.seq;
#endif
}

#if defined(__CUDACC__)
// Every thread of a block, after its last store of the launch's answers. `request`:
// where the host wrote the call's number, for a kernel of a CUDA graph (whose
// arguments, c.seq among them, are fixed when it is captured); else c.seq.
__device__ inline void signal_block_done(const Completion& c, const unsigned* request = nullptr) {
    if (!c.flag) return;  // the same for every thread: the barrier below is reached by all or none
    __syncthreads();
    if (threadIdx.x != 0) return;
    // One fence, by the thread that counts the block: the barrier orders every thread's
    // stores before it, and a fence is cumulative (PTX memory model: it orders what its
    // thread observed, the other threads' stores through the barrier included), so the
    // block's answers reach the host before the block counts itself. It was every
    // thread's fence, on the batch-1 critical path (issue 67).
    __threadfence_system();
    Completion call = c;
    if (request) call.seq = *static_cast<const volatile unsigned*>(request);
    block_done(call, gridDim.x);
}
#endif

}  // namespace lenet::cuda
