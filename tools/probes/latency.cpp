// Batch-n latency of a .lenet model through the C++ API against the core's FMA floor, both
// timed in the same process, block after block (PERFORMANCE.md, issue 61): on a shared or
// virtual machine whose speed wanders, the two minima are taken in the same conditions.
//
//   c++ -O2 -std=c++17 -I include -I BUILD/generated/include tools/probes/latency.cpp
//       -L BUILD -llenet -Wl,-rpath,BUILD -o /tmp/latency
//   taskset -c 1 /tmp/latency weights/lenet5.lenet avx2 416520 [BATCH] [SECONDS] [THREADS] [PRECISION]
//
// (PRECISION: "exact", the default, or "fast"; a library before LENET_1.1 has no such option:
// build with -DLENET_PROBE_NO_PRECISION to time one.)
// (BUILD: a CMake-only build of the library, cmake -S . -B /tmp/b -G Ninja -DLENET_CUDA=OFF
// && ninja -C /tmp/b lenet; or, installed, $(pkg-config --cflags --libs lenet) for the -I and
// -L (docs/cpp.md); MACS: the model's multiply-adds per image, as lenet-bench's header gives them:
// lenet5 416,520, lenet-keras 193,856, lenet-tf 13,883,904.) Prints per image: the minimum and median over blocks of
// 200 calls, the FMA floor (the model's multiply-adds at the rate of one thread's independent vfmadd231ps, 8 lanes on
// AVX2, measured after every block) and the ratios. x86-64 with AVX2 only.
#include <lenet/lenet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

// Seconds for `iters` rounds of 12 independent 8-lane multiply-adds: the FMA units' rate.
double fma_seconds(long iters) {
    const auto t0 = std::chrono::steady_clock::now();
    asm volatile(
        "vxorps %%ymm0,%%ymm0,%%ymm0\n vxorps %%ymm1,%%ymm1,%%ymm1\n vxorps %%ymm2,%%ymm2,%%ymm2\n"
        "vxorps %%ymm3,%%ymm3,%%ymm3\n vxorps %%ymm4,%%ymm4,%%ymm4\n vxorps %%ymm5,%%ymm5,%%ymm5\n"
        "vxorps %%ymm6,%%ymm6,%%ymm6\n vxorps %%ymm7,%%ymm7,%%ymm7\n vxorps %%ymm8,%%ymm8,%%ymm8\n"
        "vxorps %%ymm9,%%ymm9,%%ymm9\n vxorps %%ymm10,%%ymm10,%%ymm10\n vxorps %%ymm11,%%ymm11,%%ymm11\n"
        "vxorps %%ymm12,%%ymm12,%%ymm12\n vxorps %%ymm13,%%ymm13,%%ymm13\n"
        "1:\n"
        "vfmadd231ps %%ymm12,%%ymm13,%%ymm0\n vfmadd231ps %%ymm12,%%ymm13,%%ymm1\n"
        "vfmadd231ps %%ymm12,%%ymm13,%%ymm2\n vfmadd231ps %%ymm12,%%ymm13,%%ymm3\n"
        "vfmadd231ps %%ymm12,%%ymm13,%%ymm4\n vfmadd231ps %%ymm12,%%ymm13,%%ymm5\n"
        "vfmadd231ps %%ymm12,%%ymm13,%%ymm6\n vfmadd231ps %%ymm12,%%ymm13,%%ymm7\n"
        "vfmadd231ps %%ymm12,%%ymm13,%%ymm8\n vfmadd231ps %%ymm12,%%ymm13,%%ymm9\n"
        "vfmadd231ps %%ymm12,%%ymm13,%%ymm10\n vfmadd231ps %%ymm12,%%ymm13,%%ymm11\n"
        "dec %0\n jnz 1b\n"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
          "xmm13", "cc");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr, "latency MODEL.lenet KERNELS MACS [BATCH] [SECONDS] [THREADS] [PRECISION]\n");
        return 2;
    }
    lenet::EngineOptions options;
    options.cpu_kernels = argv[2];
    const double macs = std::atof(argv[3]);
    const int batch = argc > 4 ? std::atoi(argv[4]) : 1;
    const double seconds = argc > 5 ? std::atof(argv[5]) : 3.0;
    options.threads = argc > 6 ? std::atoi(argv[6]) : 1;
#ifndef LENET_PROBE_NO_PRECISION
    if (argc > 7) options.precision = argv[7];
#endif
    lenet::Engine engine(argv[1], options);
    const size_t per = size_t(engine.input_size());
    // 64 different images at batch 1 (their pixels change the branches nowhere, the caches a little).
    std::vector<float> x(per * std::max(batch, 64));
    std::mt19937 rng(1);
    for (auto& v : x) v = float(rng() % 256) / 255.f;
    std::vector<float> out(size_t(engine.output_size()) * batch);
    std::vector<double> call_us, floor_us;
    constexpr int kCalls = 200;
    const auto start = std::chrono::steady_clock::now();
    for (int k = 0; std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds;) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < kCalls; ++i, k = (k + 1) % 64)
            engine.predict_proba(x.data() + (batch == 1 ? size_t(k) * per : 0), per * batch, out.data(), out.size());
        call_us.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kCalls /
                          batch * 1e6);
        const long iters = 20000;
        floor_us.push_back(macs / (double(iters) * 12 * 8 / fma_seconds(iters)) * 1e6);
    }
    const double call_min = *std::min_element(call_us.begin(), call_us.end());
    const double floor_min = *std::min_element(floor_us.begin(), floor_us.end());
    std::printf(
        "%s %s%s b%d, %d thread(s): %.2f us min, %.2f median per image; FMA floor %.2f min, %.2f median "
        "(%.0f multiply-adds); %.2fx (min / min), %.2fx (median / median); %zu blocks\n",
        argv[1], argv[2], argc > 7 ? (std::string(" ") + argv[7]).c_str() : "", batch, options.threads, call_min, median(call_us), floor_min, median(floor_us), macs,
        call_min / floor_min, median(call_us) / median(floor_us), call_us.size());
}
