#include "layout.h"

namespace lenet {

std::vector<float> dense_rows_unpermute(const std::vector<float>& w, Dims in, const std::array<int, 3>& perm,
                                        int units) {
    std::vector<float> out(w.size());
    const int ext[3] = {in.h, in.w, in.c};
    const int o1 = ext[perm[1]], o2 = ext[perm[2]];
    for (int y = 0; y < in.h; ++y)
        for (int x = 0; x < in.w; ++x)
            for (int c = 0; c < in.c; ++c) {
                const int pos[3] = {y, x, c};
                const size_t from = (size_t(pos[perm[0]]) * o1 + pos[perm[1]]) * o2 + pos[perm[2]];
                const size_t to = (size_t(y) * in.w + x) * in.c + c;
                for (int u = 0; u < units; ++u) out[to * units + u] = w[from * units + u];
            }
    return out;
}

std::vector<float> dense_rows_hwc_to_chw(const std::vector<float>& w, Dims in, int units) {
    std::vector<float> out(w.size());
    for (int c = 0; c < in.c; ++c)
        for (int y = 0; y < in.h; ++y)
            for (int x = 0; x < in.w; ++x) {
                const float* src = &w[size_t((y * in.w + x) * in.c + c) * units];
                float* dst = &out[size_t((c * in.h + y) * in.w + x) * units];
                for (int u = 0; u < units; ++u) dst[u] = src[u];
            }
    return out;
}

std::vector<float> conv_hwio_to_oihw(const std::vector<float>& w, int kh, int kw, int ci, int co) {
    std::vector<float> out(w.size());
    for (int y = 0; y < kh; ++y)
        for (int x = 0; x < kw; ++x)
            for (int i = 0; i < ci; ++i)
                for (int o = 0; o < co; ++o)
                    out[((size_t(o) * ci + i) * kh + y) * kw + x] = w[((size_t(y) * kw + x) * ci + i) * co + o];
    return out;
}

void nhwc_to_nchw(const float* src, float* dst, int n, Dims d) {
    const size_t plane = size_t(d.h) * d.w, image = plane * d.c;
    for (int b = 0; b < n; ++b)
        for (size_t p = 0; p < plane; ++p)
            for (int c = 0; c < d.c; ++c) dst[b * image + c * plane + p] = src[b * image + p * d.c + c];
}

void nchw_to_nhwc(const float* src, float* dst, int n, Dims d) {
    const size_t plane = size_t(d.h) * d.w, image = plane * d.c;
    for (int b = 0; b < n; ++b)
        for (size_t p = 0; p < plane; ++p)
            for (int c = 0; c < d.c; ++c) dst[b * image + p * d.c + c] = src[b * image + c * plane + p];
}

}  // namespace lenet
