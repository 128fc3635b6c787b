// CPU kernels, NHWC float32. One family per file: conv.cpp (convolutions),
// dense.cpp, pool.cpp, elementwise.cpp (activations, softmax, affine, prelu,
// merges, padding), tensor.cpp (reshape, permute, concat, resize); the
// hand-written inner loops are in direct_kernels.cpp, behind the KernelTable of
// direct.h.
#pragma once

#include <memory>

#include "../backend.h"
#include "direct.h"
#include "winograd.h"

namespace lenet::cpu {

// A Step's weights packed for the direct kernels (CpuBackend::prepare).
// A convolution that winograd_tile takes has `winograd` packed instead (alpha > 0).
struct PackedStep : StepConstants {
    PackedWeights packed;
    WinogradWeights winograd;
};

// `table` null (cpu_kernels="blas") or `packed` null (grouped or dilated
// convolutions): the BLAS path, reading the Step's canonical weights in place (a
// HWIO conv kernel is the (kh*kw*ci, co) matrix im2col rows multiply; a dense
// kernel is (in, out)); a depthwise convolution gets loops of its own. The
// Network owns the Steps and the backend the packed weights; both outlive every
// plan.
std::unique_ptr<Kernel> make_conv2d(const Step& s, const KernelTable* table, const PackedWeights* packed, int capacity);
// A direct convolution followed by the 2x2 / 2 max pool `pool` (no padding).
std::unique_ptr<Kernel> make_conv2d_pool(const Step& conv, const Step& pool, const KernelTable& table,
                                         const PackedWeights& packed);
// Backend::link for the CPU: a direct convolution with vectors along the rows hands
// its (pooled) output to the direct convolution after it row-planar (direct.h's
// ConvArgs::planar_in). False, changing nothing, for any other pair.
bool link_planar(Kernel& producer, Kernel& consumer);
std::unique_ptr<Kernel> make_dense(const Step& s, const KernelTable* table, const PackedWeights* packed);
std::unique_ptr<Kernel> make_pool2d(const Step& s, const KernelTable& table);
std::unique_ptr<Kernel> make_elementwise(const Step& s);  // activation, softmax, affine, prelu, merge, pad2d
std::unique_ptr<Kernel> make_tensor_op(const Step& s);    // reshape, permute, concat, resize

// cpu_kernels="nchw": the CUDA backend's layout and decisions on the host
// (nchw_kernels.cpp). Constants from prepare_nchw, which make_nchw_kernel reads.
std::shared_ptr<const StepConstants> prepare_nchw(const Step& s);
std::unique_ptr<Kernel> make_nchw_kernel(const Step& s, const StepConstants* constants, int capacity);

// y[i] = act(y[i]) over n values, in place.
void apply_activation(const Activation& act, float* y, size_t n);

}  // namespace lenet::cpu
