// The finiteness check of a batch's values: the executor's, and the CUDA backend's
// where it checks while it copies (backends/cuda/transfer.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace lenet {

// The first of n vectors of `size` floats that holds a NaN or an infinity, or -1.
// An OR of comparisons, not a sum: it vectorizes without reassociating floats.
inline int64_t first_non_finite(const float* v, int64_t n, int64_t size) {
    const float most = std::numeric_limits<float>::max();
    for (int64_t b = 0; b < n; ++b) {
        const float* p = v + b * size;
        int bad = 0;
        for (int64_t i = 0; i < size; ++i) bad |= !(std::fabs(p[i]) <= most);
        if (bad) return b;
    }
    return -1;
}

}  // namespace lenet
