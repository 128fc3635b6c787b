// How fast one core reads weights that live in L1, L2 or L3: the floor of a dense
// layer at batch 1, where each weight is read once per call and used by one
// multiply-add (PERFORMANCE.md, issue 54). Each pass multiplies-adds every 64-byte
// vector of a buffer into 8 independent sums, as the engine's dense kernel does.
//
//   g++ -O3 -march=native -std=c++17 tools/probes/stream.cpp -o /tmp/stream && taskset -c 0 /tmp/stream
//
// Prints, per buffer size, the best of 5 timed runs of ~2 GB read: GB/s and ns per KB.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

int main() {
#if !defined(__AVX512F__)
    std::fprintf(stderr, "stream: build with -march=native on an AVX-512 CPU\n");
    return 1;
#else
    for (const int kb : {24, 48, 106, 256, 1024, 12800}) {
        const size_t floats = size_t(kb) * 1024 / sizeof(float);
        float* w = static_cast<float*>(std::aligned_alloc(64, floats * sizeof(float)));
        for (size_t i = 0; i < floats; ++i) w[i] = 1e-7f * float(i % 97);
        __m512 acc[8];
        for (auto& a : acc) a = _mm512_setzero_ps();
        const __m512 x = _mm512_set1_ps(1.0001f);
        const int passes = int(2e9 / double(floats * sizeof(float))) + 1;
        double best = 1e9;
        for (int r = 0; r < 5; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int p = 0; p < passes; ++p)
                for (size_t i = 0; i < floats; i += 128)
                    for (int k = 0; k < 8; ++k) acc[k] = _mm512_fmadd_ps(x, _mm512_load_ps(w + i + 16 * k), acc[k]);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        float sink = 0;  // keeps the sums alive
        for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
        std::printf("%6d KB: %6.1f GB/s = %5.2f ns per KB%s\n", kb, double(passes) * floats * 4 / best / 1e9,
                    best / passes / kb * 1e9, sink == 0 ? " " : "");
        std::free(w);
    }
    return 0;
#endif
}
