// How fast one core reads weights that live in L1, L2 or L3: the floor of a dense
// layer at batch 1, where each weight is read once per call and used by one
// multiply-add (PERFORMANCE.md, issue 54). Each pass multiplies-adds every 64-byte
// vector of a buffer into 8 independent sums, as the engine's dense kernel does.
//
//   g++ -O3 -march=native -std=c++17 tools/probes/stream.cpp -o /tmp/stream && taskset -c 0 /tmp/stream
//
// Prints, per buffer size, the best of 5 timed runs of ~2 GB read: GB/s and ns per KB. With
// the widest vectors -march=native gives (AVX-512, AVX2 or SSE), so that an AVX2 machine
// measures its own floor.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// The widest vector this build targets: AVX-512 (16 floats), AVX2 (8) or SSE (4).
#if defined(__AVX512F__)
constexpr int kWidth = 16;
constexpr const char* kIsa = "AVX-512";
#elif defined(__AVX2__)
constexpr int kWidth = 8;
constexpr const char* kIsa = "AVX2";
#else
constexpr int kWidth = 4;
constexpr const char* kIsa = "SSE";
#endif
using V = float __attribute__((vector_size(kWidth * sizeof(float))));

int main() {
    std::printf("%s, %d-float vectors, 8 sums\n", kIsa, kWidth);
    for (const int kb : {24, 48, 106, 256, 1024, 12800}) {
        const size_t floats = size_t(kb) * 1024 / sizeof(float);
        float* w = static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float)));
        for (size_t i = 0; i < floats; ++i) w[i] = 1e-7f * float(i % 97);
        V acc[8] = {};
        V x;
        for (int l = 0; l < kWidth; ++l) x[l] = 1.0001f;
        const int passes = int(2e9 / double(floats * sizeof(float))) + 1;
        double best = 1e9;
        for (int r = 0; r < 5; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int p = 0; p < passes; ++p)
                for (size_t i = 0; i < floats; i += 8 * kWidth)
                    for (int k = 0; k < 8; ++k) {
                        V v;
                        std::memcpy(&v, w + i + kWidth * k, sizeof v);
                        acc[k] += x * v;
                    }
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        float sink = 0;  // keeps the sums alive
        for (auto& a : acc)
            for (int l = 0; l < kWidth; ++l) sink += a[l];
        std::printf("%6d KB: %6.1f GB/s = %5.2f ns per KB%s\n", kb, double(passes) * floats * 4 / best / 1e9,
                    best / passes / kb * 1e9, sink == 0 ? " " : "");
        std::free(w);
    }
    return 0;
}
