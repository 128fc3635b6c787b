// The cuDNN planner: for one Step and batch size, every descriptor the kernel
// needs and how padding is realised. It makes no device call (cuDNN's
// descriptor and shape functions run without a GPU), so CI checks it.
//
// How padding is realised is nchw/plan.h's choice, shared with the CPU
// backend's NCHW mode.
#pragma once

#include <array>
#include <string>
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
    ActDesc act;             // for the fused conv (when fusion.tried): ReLU, NaN propagating
    std::vector<float> avg_factor;  // (out.h * out.w), average pooling over pre-padded input
    int cudnn_out[4] = {0, 0, 0, 0};  // n, c, h, w as cuDNN computes them (conv and pooling)
    struct Fusion {
        bool tried = false;  // whether cuDNN's conv + bias + activation call is tried for this step
        std::string why;     // the reason, for describe()
    } fusion;
};

// Whether cuDNN's fused conv + bias + activation call (cudnnConvolutionBiasActivationForward)
// is tried for a convolution with this activation: plain ReLU only. cuDNN 9 answers
// CUDNN_STATUS_BAD_PARAM for every other mode, and takes IDENTITY only with the
// IMPLICIT_PRECOMP_GEMM algorithm; the rest runs as the convolution, then bias and
// activation in one kernel of ours. Decided here, without a device, so that a plan never
// meets a refusal at run time; the backend still checks a tried fusion once per shape
// (cuDNN may refuse it, or give other numbers) before using it.
StepPlan::Fusion conv_fusion(const Activation& act);

// A ReLU activation descriptor for cuDNN's fused conv + bias + activation.
ActDesc relu_desc(cudnnNanPropagation_t nan);

// Builds the descriptors and checks cuDNN's output shape against the Step's
// (throws CudaError on a mismatch). The conv math type is CUDNN_FMA_MATH unless
// `allow_tf32` (CUDNN_DEFAULT_MATH, which lets cuDNN use TF32 tensor cores on Ampere
// and later: FMA_MATH is what keeps FP32 convolutions FP32 there).
StepPlan plan_step(const Step& step, int n, bool allow_tf32);

// What identifies a convolution to cuDNN's algorithm search: the backend caches
// one choice per key, so that every plan of a shape (eager or graph) runs the
// same algorithm and gives the same bits. The key holds whether the fused call is
// tried: a choice made for a ReLU convolution (fused) is never reused for a tanh
// one of the same shape.
using ConvKey = std::array<int, 17>;
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
// The candidates worth running, best first: those that succeeded within
// `workspace_limit` bytes and the math mode, deterministic ones (fastest first), then
// the others. The backend runs the first whose numbers agree with a reference
// convolution (see conv.cpp).
std::vector<int> rank_algorithms(const std::vector<AlgoCandidate>& candidates, bool allow_tf32, size_t workspace_limit);
// The first of rank_algorithms, or -1.
int pick_algorithm(const std::vector<AlgoCandidate>& candidates, bool allow_tf32, size_t workspace_limit);
const char* algorithm_name(int algo);  // "IMPLICIT_PRECOMP_GEMM", ...

// The cuBLAS workspace for a GPU of compute capability `major`: NVIDIA recommends
// 32 MiB on Hopper and later (its best kernels need it), 4 MiB before. Fixed per
// engine before any graph capture, which records its address.
size_t cublas_workspace_bytes(int major);

}  // namespace lenet::cuda
