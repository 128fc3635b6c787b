// The kernels of another architecture against x86-64's answers (issue 66): a model's outputs
// on n inputs through every CPU kernel set this CPU runs, at 1 and 2 threads, compared with
// the outputs the x86-64 build gave on the same inputs (the avx2 set), read from files.
//
//   kernel_check MODEL.lenet INPUTS.f32 EXPECTED.f32 N [TOLERANCE]
//
// INPUTS.f32: N inputs of the model's input size, float32, native byte order; EXPECTED.f32:
// N outputs (predict: the model's own outputs). Prints a line per set and thread count: how
// many outputs are the same bits, the largest difference, whether every argmax agrees. Exits 1
// when an argmax differs or a difference exceeds TOLERANCE (default 1e-6), 2 on bad arguments.
// tests/cpp/test_aarch64.py runs it under qemu-aarch64.
#include <lenet/lenet.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::vector<float> read_floats(const char* path, size_t count) {
    std::ifstream f(path, std::ios::binary);
    std::vector<float> v(count);
    if (!f.read(reinterpret_cast<char*>(v.data()), std::streamsize(count * sizeof(float))))
        throw std::runtime_error(std::string(path) + ": fewer than " + std::to_string(count) + " floats");
    return v;
}

size_t argmax(const float* p, size_t n) { return size_t(std::max_element(p, p + n) - p); }

}  // namespace

int main(int argc, char** argv) {
    if (argc < 5 || argc > 6) {
        std::fprintf(stderr, "usage: %s MODEL.lenet INPUTS.f32 EXPECTED.f32 N [TOLERANCE]\n", argv[0]);
        return 2;
    }
    const size_t n = std::strtoul(argv[4], nullptr, 10);
    const double tolerance = argc == 6 ? std::strtod(argv[5], nullptr) : 1e-6;
    try {
        const lenet::Engine probe(argv[1]);
        const size_t in = size_t(probe.input_size()), out = size_t(probe.output_size());
        const std::vector<float> x = read_floats(argv[2], n * in), want = read_floats(argv[3], n * out);
        bool ok = true;
        int sets = 0;
        for (const char* set : {"avx512", "avx2", "neon", "generic"}) {
            for (int threads : {1, 2}) {
                lenet::EngineOptions options;
                options.cpu_kernels = set;
                options.threads = threads;
                std::vector<float> got;
                try {
                    got = lenet::Engine(argv[1], options).predict(x);
                } catch (const lenet::InputError& e) {
                    if (std::strstr(e.what(), "not available on this CPU")) break;  // a set of another CPU
                    throw;
                }
                size_t same = 0, argmax_differs = 0;
                double worst = 0;
                for (size_t i = 0; i < n * out; ++i) {
                    same += std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
                    worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])));
                }
                for (size_t b = 0; b < n; ++b)
                    argmax_differs += argmax(&got[b * out], out) != argmax(&want[b * out], out);
                const bool set_ok = argmax_differs == 0 && worst <= tolerance;
                ok = ok && set_ok;
                std::printf(
                    "%s threads=%d: %zu of %zu outputs the same bits as x86-64's, max |diff| %.3g, "
                    "%zu argmax differ: %s\n",
                    set, threads, same, n * out, worst, argmax_differs, set_ok ? "ok" : "FAILED");
                if (threads == 1) ++sets;
            }
        }
        if (sets == 0) {
            std::fprintf(stderr, "kernel_check: no kernel set ran\n");
            return 1;
        }
        return ok ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kernel_check: %s\n", e.what());
        return 1;
    }
}
