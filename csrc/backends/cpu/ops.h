// CPU kernels, NHWC float32. One function family per file: conv.cpp, dense.cpp,
// pool.cpp, elementwise.cpp. Convolutions and dense layers run on OpenBLAS
// SGEMM/SGEMV; everything else is plain loops the compiler vectorizes.
#pragma once

#include <memory>

#include "../backend.h"

namespace lenet::cpu {

// Kernels read the Step's weights in place: the canonical layouts of network.h are
// exactly what SGEMM wants for NHWC (a HWIO conv kernel is the (kh*kw*ci, co)
// matrix the im2col rows multiply; a dense kernel is (in, out)). The Network
// owns the Steps and outlives every plan.
std::unique_ptr<Kernel> make_conv2d(const Step& s, int capacity);
std::unique_ptr<Kernel> make_dense(const Step& s);
std::unique_ptr<Kernel> make_pool2d(const Step& s);
std::unique_ptr<Kernel> make_elementwise(const Step& s);  // pad2d, affine, activation, softmax

// y[i] = act(y[i]) over n values, in place.
void apply_activation(Act act, float* y, size_t n);

}  // namespace lenet::cpu
