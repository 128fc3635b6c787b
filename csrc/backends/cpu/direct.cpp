// Choosing a table of direct kernels for this CPU, packing weights for them, and
// measuring the CPU's multiply-add rate.
#include "direct.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>

#include "../../support/errors.h"

namespace lenet::cpu {

#if defined(LENET_KERNEL_SETS_X86)
extern const KernelTable kTable_avx512;
extern const KernelTable kTable_avx2;
#elif defined(LENET_KERNEL_SETS_NEON)
extern const KernelTable kTable_neon;
#endif
extern const KernelTable kTable_generic;

// LENET_MAX_CPU_ISA (avx512, avx2, neon or generic) caps the sets below at one this CPU
// runs, as ONEDNN_MAX_CPU_ISA does oneDNN's: an AVX-512 machine then runs, and tests, what
// an AVX2 laptop runs. Read on every call: a test may set it per process.
std::vector<const KernelTable*> supported_tables() {
    std::vector<const KernelTable*> tables;
#if defined(LENET_KERNEL_SETS_X86)
    __builtin_cpu_init();
    // GCC's checks include the OS saving the wider registers (XGETBV).
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma"))
        tables.push_back(&kTable_avx512);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) tables.push_back(&kTable_avx2);
#elif defined(LENET_KERNEL_SETS_NEON)
    tables.push_back(&kTable_neon);  // Advanced SIMD is part of every aarch64 CPU
#endif
    tables.push_back(&kTable_generic);
    const char* cap = std::getenv(kMaxIsaVariable);
    if (!cap || !*cap) return tables;
    static constexpr const char* kOrder[] = {"avx512", "avx2", "neon", "generic"};  // widest first
    int rank = -1;
    for (int i = 0; i < int(std::size(kOrder)); ++i)
        if (std::strcmp(cap, kOrder[i]) == 0) rank = i;
    if (rank < 0)
        throw InputError(std::string(kMaxIsaVariable) + "='" + cap +
                         "': not a CPU kernel set (avx512, avx2, neon or generic; unset for the best this CPU runs)");
    const auto above_cap = [&](const KernelTable* t) {
        for (int i = 0; i < rank; ++i)
            if (std::strcmp(t->isa, kOrder[i]) == 0) return true;
        return false;
    };
    tables.erase(std::remove_if(tables.begin(), tables.end(), above_cap), tables.end());
    return tables;
}

const KernelTable* table_named(const std::string& name) {
    const auto tables = supported_tables();
    if (name == "auto") return tables.front();
    std::string known;
    for (const KernelTable* t : tables) {
        if (name == t->isa) return t;
        known += std::string(known.empty() ? "" : ", ") + t->isa;
    }
    const char* cap = std::getenv(kMaxIsaVariable);
    throw InputError("CPU kernels '" + name + "' are not available on this CPU (available: auto, " + known +
                     ", blas, nchw" + (cap && *cap ? std::string("; capped by ") + kMaxIsaVariable + "=" + cap : "") +
                     ")");
}

PackedWeights pack(const std::vector<float>& hwio, const std::vector<float>& bias, int kh, int kw, int ci, int co) {
    const int blocks = (co + kLanes - 1) / kLanes;
    const size_t taps = size_t(kh) * kw * ci;
    PackedWeights p;
    p.w.assign(size_t(blocks) * taps * kLanes, 0.f);
    p.bias.assign(size_t(blocks) * kLanes, 0.f);
    for (size_t t = 0; t < taps; ++t)
        for (int o = 0; o < co; ++o) p.w[(size_t(o / kLanes) * taps + t) * kLanes + o % kLanes] = hwio[t * co + o];
    for (int o = 0; o < co && size_t(o) < bias.size(); ++o) p.bias[o] = bias[o];
    return p;
}

// Work below this many multiply-adds (~25 µs on one AVX-512 core) runs on the
// calling thread alone: waking another thread costs several microseconds.
constexpr double kSplitMacs = 2e6;

void conv_split(void (*kernel)(const ConvArgs&), const ConvArgs& a, ThreadPool* pool) {
    const int blocks = (a.co + kLanes - 1) / kLanes;
    const int rows = a.row_end - a.row_begin;
    const double macs = double(rows) * a.ow * a.kh * a.kw * a.ci * blocks * kLanes;
    const int parts = pool ? pool->workers() + 1 : 1;
    if (parts < 2 || macs < kSplitMacs) {
        kernel(a);
        return;
    }
    const int step = a.pool ? 2 : 1;  // a fused pool consumes rows in pairs
    if (rows >= parts * step) {
        const int units = rows / step;
        pool->parallel_for(parts, [&](int i) {
            ConvArgs part = a;
            part.row_begin = a.row_begin + step * int(int64_t(units) * i / parts);
            part.row_end = a.row_begin + step * int(int64_t(units) * (i + 1) / parts);
            if (part.row_begin < part.row_end) kernel(part);
        });
        return;
    }
    if (a.pool) {  // too few row pairs to share
        kernel(a);
        return;
    }
    // One row (a dense layer: its images are the row's pixels): slices of whole 4-block
    // groups, the dense kernel's widest pass on AVX-512.
    const int groups = (blocks + 3) / 4;
    const size_t block_floats = size_t(a.kh) * a.kw * a.ci * kLanes;
    pool->parallel_for(parts, [&](int i) {
        const int first = groups * i / parts * 4, last = std::min(blocks, groups * (i + 1) / parts * 4);
        if (first >= last) return;
        ConvArgs part = a;
        part.w += first * block_floats;
        part.bias += first * kLanes;
        part.y += first * kLanes;
        part.co = std::min(a.co - first * kLanes, (last - first) * kLanes);
        kernel(part);
    });
}

double measure_mac_rate(int threads, double seconds) {
    const KernelTable* best = supported_tables().front();
    threads = std::max(1, threads);
    // Calibrate one thread's rounds for ~10 ms, then run every thread for `seconds`.
    int64_t iters = 1 << 16;
    for (;;) {
        const auto t0 = std::chrono::steady_clock::now();
        best->mac_loop(iters);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (dt > 0.01 || iters > (int64_t(1) << 40)) {
            iters = std::max<int64_t>(1, int64_t(double(iters) * seconds / dt));
            break;
        }
        iters *= 4;
    }
    std::atomic<double> total{0.0};
    std::atomic<float> sink{0.f};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&] {
            const auto t0 = std::chrono::steady_clock::now();
            const float s = best->mac_loop(iters);
            const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            sink.store(s);
            double cur = total.load();
            const double rate = double(iters) * double(best->macs_per_iter) / dt / 1e9;
            while (!total.compare_exchange_weak(cur, cur + rate)) {}
        });
    for (auto& t : pool) t.join();
    return total.load() / threads;
}

}  // namespace lenet::cpu
