// The cuDNN planner: for one Step and batch size, every descriptor the kernel
// needs and how padding is realised. It makes no device call (cuDNN's
// descriptor and shape functions run without a GPU), so CI checks it.
//
// How padding is realised is nchw/plan.h's choice, shared with the CPU
// backend's NCHW mode.
#pragma once

#include <array>
#include <vector>

#include "../../net/network.h"
#include "../nchw/plan.h"
#include "resources.h"

namespace lenet::cuda {

using nchw::PaddingChoice;

struct StepPlan {
    const Step* step = nullptr;
    int n = 0;
    PaddingChoice padding;
    TensorDesc x;            // the input as it arrives, (n, c, h, w) packed
    TensorDesc padded;       // the pre-padded input, packed (when prepadded)
    TensorDesc padded_view;  // the unpadded interior of `padded`, strided (when prepadded)
    size_t padded_offset = 0;  // floats from the start of `padded` to the interior
    float pad_value = 0.f;
    TensorDesc y;            // the output, (n, c, h, w) packed
    TensorDesc bias;         // (1, c, 1, 1)
    FilterDesc w;
    ConvDesc conv;
    PoolDesc pool;
    ActDesc act;             // for the fused conv: ReLU (NaN propagating) or identity
    std::vector<float> avg_factor;  // (out.h * out.w), average pooling over pre-padded input
    int cudnn_out[4] = {0, 0, 0, 0};  // n, c, h, w as cuDNN computes them (conv and pooling)
};

// A ReLU activation descriptor for cuDNN's fused conv + bias + activation.
ActDesc relu_desc(cudnnNanPropagation_t nan);

// Builds the descriptors and checks cuDNN's output shape against the Step's
// (throws CudaError on a mismatch). `allow_tf32` sets the conv math type.
StepPlan plan_step(const Step& step, int n, bool allow_tf32);

// What identifies a convolution to cuDNN's algorithm search: the backend caches
// one choice per key, so that every plan of a shape (eager or graph) runs the
// same algorithm and gives the same bits.
using ConvKey = std::array<int, 16>;
ConvKey conv_key(const StepPlan& plan, bool allow_tf32);

// One result of cudnnFindConvolutionForwardAlgorithmEx, fastest first.
struct AlgoCandidate {
    int algo = 0;
    bool ok = false;             // status == CUDNN_STATUS_SUCCESS
    float time_ms = 0.f;
    size_t memory = 0;           // workspace bytes
    bool deterministic = false;
    bool tensor_math = false;    // TF32 tensor cores (refused unless allowed)
};
// The candidate to run, or -1: among those that succeeded within `workspace_limit`
// bytes and the math mode, the fastest deterministic one, else the fastest.
int pick_algorithm(const std::vector<AlgoCandidate>& candidates, bool allow_tf32, size_t workspace_limit);
const char* algorithm_name(int algo);  // "IMPLICIT_PRECOMP_GEMM", ...

// The cuBLAS workspace for a GPU of compute capability `major`: NVIDIA recommends
// 32 MiB on Hopper and later (its best kernels need it), 4 MiB before. Fixed per
// engine before any graph capture, which records its address.
size_t cublas_workspace_bytes(int major);

}  // namespace lenet::cuda
