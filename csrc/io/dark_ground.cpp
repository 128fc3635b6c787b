#include "dark_ground.h"

#include <algorithm>
#include <array>

namespace lenet {

void dark_ground(const uint8_t* pixels, size_t n, int height, int width, bool* out) {
    const size_t plane = size_t(height) * width;
    const int ring = 2 * (height + width) - 4;
    // The two middle values of the sorted ring, as positions: the median is their mean.
    const int lo = (ring - 1) / 2, hi = ring / 2;
    for (size_t i = 0; i < n; ++i) {
        const uint8_t* p = pixels + i * plane;
        std::array<int, 256> count{};
        for (int x = 0; x < width; ++x) ++count[p[x]], ++count[p[plane - width + x]];
        for (int y = 1; y + 1 < height; ++y) ++count[p[size_t(y) * width]], ++count[p[size_t(y) * width + width - 1]];
        int seen = 0, a = -1, b = -1;
        for (int v = 0; v < 256 && b < 0; ++v) {
            seen += count[v];
            if (a < 0 && seen > lo) a = v;
            if (seen > hi) b = v;
        }
        out[i] = a + b < 256;
    }
}

bool clean_drawing(const uint8_t* p, int height, int width, int paper) {
    const size_t plane = size_t(height) * width;
    int ring = 255, least = 255;
    for (int x = 0; x < width; ++x) ring = std::min({ring, int(p[x]), int(p[plane - width + x])});
    for (int y = 1; y + 1 < height; ++y)
        ring = std::min({ring, int(p[size_t(y) * width]), int(p[size_t(y) * width + width - 1])});
    if (ring < paper) return false;
    for (size_t i = 0; i < plane; ++i) least = std::min(least, int(p[i]));
    return least < 128;
}

}  // namespace lenet
