// The C++ core on its own, for the sanitizer job (tests/core/test_sanitizers.py): built
// with AddressSanitizer + UndefinedBehaviorSanitizer against the sanitized liblenet
// and run with LeakSanitizer on, so that any leak, bad access or undefined behaviour
// in csrc/net and the CPU backend fails the test.
//
//   core_cycles cycles N      N load -> infer -> release cycles over several networks
//                             (and N failed builds: the error paths must not leak)
//   core_cycles threads N     8 threads x N calls on one Executor, and 8 threads on
//                             their own Executors: every answer bit-identical to the
//                             serial one
//   core_cycles pool N        4 threads x N parallel_for jobs at once on one ThreadPool
//                             (every index run once, each job's writes seen by its
//                             caller; a throwing job rethrows in its caller only)
//
// Prints "ok ..." and exits 0; a wrong answer exits 1; a sanitizer report exits non-zero.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "net/network.h"
#include "runtime/executor.h"
#include "support/errors.h"
#include "support/thread_pool.h"

using namespace lenet;

namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale) {
    std::normal_distribution<float> d(0.f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(rng);
    return v;
}

Tensor tensor(std::vector<int64_t> shape, std::mt19937& rng, float scale) {
    size_t n = 1;
    for (auto v : shape) n *= size_t(v);
    return Tensor{std::move(shape), random_floats(n, rng, scale)};
}

LayerSpec simple(const char* kind, const char* name, const char* cls, std::vector<int> inputs = {}) {
    LayerSpec l;
    l.kind = kind, l.name = name, l.keras_class = cls, l.inputs = std::move(inputs);
    return l;
}

LayerSpec conv(const char* name, int kh, int kw, int in, int out, int stride, bool same, const char* act,
               std::mt19937& rng) {
    LayerSpec l = simple("conv2d", name, "Conv2D");
    l.kernel = {kh, kw}, l.strides = {stride, stride}, l.same_padding = same, l.filters = out, l.activation = act;
    l.set_weight("kernel", tensor({kh, kw, in, out}, rng, 0.3f));
    l.set_weight("bias", tensor({out}, rng, 0.1f));
    return l;
}

LayerSpec pool(const char* name, const char* kind, int k, int stride, bool same) {
    LayerSpec l = simple(kind, name, std::string(kind) == "max_pool2d" ? "MaxPooling2D" : "AveragePooling2D");
    l.kernel = {k, k}, l.strides = {stride, stride}, l.same_padding = same;
    return l;
}

LayerSpec dense(const char* name, int in, int out, const char* act, std::mt19937& rng, bool bias = true) {
    LayerSpec l = simple("dense", name, "Dense");
    l.units = out, l.activation = act, l.use_bias = bias;
    l.set_weight("kernel", tensor({in, out}, rng, 0.2f));
    if (bias) l.set_weight("bias", tensor({out}, rng, 0.1f));
    return l;
}

struct Model {
    std::vector<LayerSpec> layers;
    std::vector<int64_t> input;  // Keras' per-sample shape
};

// Each layer reads the one before it unless it says otherwise.
Model chain(std::vector<LayerSpec> layers, std::vector<int64_t> input) {
    for (size_t i = 0; i < layers.size(); ++i)
        if (layers[i].inputs.empty()) layers[i].inputs = {int(i) - 1};
    return Model{std::move(layers), std::move(input)};
}

// LeNet-5 as shipped; the KERAS-H5.md test net (odd 'same' pads, strides, same pools);
// a channels_first net with zero padding, tanh, average pools and CHW flatten rows; a
// graph with the layers of issue 13 (batch norm, depthwise, a residual add, concat,
// prelu, resizing, reshape, global pooling).
std::vector<Model> models() {
    std::mt19937 rng(7);
    std::vector<Model> out;
    out.push_back(chain({conv("c1", 5, 5, 1, 6, 1, true, "relu", rng), pool("s2", "max_pool2d", 2, 2, false),
                         conv("c3", 5, 5, 6, 16, 1, false, "relu", rng), pool("s4", "max_pool2d", 2, 2, false),
                         simple("flatten", "f", "Flatten"), dense("f5", 400, 120, "relu", rng),
                         dense("f6", 120, 84, "relu", rng), dense("out", 84, 10, "softmax", rng)},
                        {28, 28, 1}));
    out.push_back(chain(
        {conv("a", 3, 3, 1, 4, 2, true, "relu", rng), conv("b", 4, 4, 4, 5, 1, true, "linear", rng),
         pool("m", "max_pool2d", 3, 2, true), pool("v", "avg_pool2d", 2, 2, true), simple("flatten", "f", "Flatten"),
         dense("d1", 80, 7, "tanh", rng), dense("d2", 7, 3, "linear", rng)},   // logits
        {28, 28, 1}));
    {
        LayerSpec pad = simple("zero_pad2d", "zp", "ZeroPadding2D");
        pad.pad = {1, 2, 2, 1};
        LayerSpec resc = simple("rescaling", "r", "Rescaling");
        resc.scale = 0.5f, resc.offset = -0.25f;
        LayerSpec act = simple("activation", "sig", "Activation");
        act.activation = "sigmoid";
        LayerSpec c = conv("c", 3, 3, 3, 4, 1, false, "tanh", rng);
        c.data_format = "channels_first";
        LayerSpec a = pool("a", "avg_pool2d", 2, 2, true);
        a.data_format = "channels_first";
        out.push_back(chain({resc, pad, c, pad, a, act, simple("flatten", "f", "Flatten"),
                             dense("d", 4 * 7 * 8, 6, "linear", rng, false), dense("o", 6, 4, "softmax", rng)},
                            {3, 10, 12}));
    }
    {
        LayerSpec reshape = simple("reshape", "rs", "Reshape");
        reshape.target_shape = {12, 12, 2};
        LayerSpec bn = simple("batch_norm", "bn", "BatchNormalization");
        for (const char* w : {"gamma", "beta", "moving_mean"}) bn.set_weight(w, tensor({4}, rng, 0.3f));
        bn.set_weight("moving_variance", Tensor{{4}, {0.5f, 1.f, 1.5f, 2.f}});
        LayerSpec dw = simple("depthwise_conv2d", "dw", "DepthwiseConv2D");
        dw.kernel = {3, 3}, dw.same_padding = true, dw.depth_multiplier = 1, dw.activation = "gelu";
        dw.set_weight("depthwise_kernel", tensor({3, 3, 4, 1}, rng, 0.3f));
        dw.set_weight("bias", tensor({4}, rng, 0.1f));
        LayerSpec prelu = simple("prelu", "pr", "PReLU", {4});
        prelu.axes = {1, 2};
        prelu.set_weight("alpha", tensor({1, 1, 4}, rng, 0.2f));
        LayerSpec cat = simple("concatenate", "cat", "Concatenate", {5, 2});
        LayerSpec resize = simple("resizing", "rz", "Resizing");
        resize.size = {7, 9};
        LayerSpec gap = simple("global_avg_pool2d", "gap", "GlobalAveragePooling2D");
        out.push_back(
            chain({reshape, conv("c", 3, 3, 2, 4, 1, true, "linear", rng), bn, dw, simple("add", "add", "Add", {3, 2}),
                   prelu, cat, resize, gap, dense("o", 8, 5, "sigmoid", rng)},
                  {288}));
    }
    return out;
}

std::vector<float> inputs(const Network& net, int n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.f, 1.f);
    std::vector<float> x(size_t(n) * net.input().d.size());
    for (auto& v : x) v = u(rng);
    return x;
}

std::unique_ptr<Executor> executor(const Model& m, int threads) {
    auto net = std::make_shared<Network>(m.layers, m.input, "core_cycles");
    BackendOptions o;
    o.threads = threads;
    return std::make_unique<Executor>(net, make_backend("cpu", o), threads);
}

bool check_probabilities(const std::vector<float>& y, int classes) {
    for (size_t r = 0; r < y.size() / classes; ++r) {
        double s = 0;
        for (int c = 0; c < classes; ++c) {
            const float p = y[r * classes + c];
            if (!std::isfinite(p) || p < 0 || p > 1) return false;
            s += p;
        }
        if (std::fabs(s - 1) > 1e-4) return false;
    }
    return true;
}

int cycles(int n) {
    const auto ms = models();
    long runs = 0, refused = 0;
    for (int i = 0; i < n; ++i) {
        const Model& m = ms[i % ms.size()];
        auto ex = executor(m, 1 + i % 3);
        const int batch = 1 + (i * 7) % 37;
        auto x = inputs(ex->network(), batch, i);
        const int classes = int(ex->network().output_size());
        std::vector<float> y(size_t(batch) * classes);
        ex->run(x.data(), y.data(), batch, Executor::Output::probabilities);
        if (!check_probabilities(y, classes)) {
            std::fprintf(stderr, "cycle %d: bad probabilities\n", i);
            return 1;
        }
        ++runs;
        // The error paths: a kernel of the wrong shape, an absurd filter count, a bad argument.
        Model bad = m;
        const int which = i % 3;
        LayerSpec& first =
            *std::find_if(bad.layers.begin(), bad.layers.end(), [](const LayerSpec& l) { return l.kind == "conv2d"; });
        if (which == 0) first.weights.at(0).second.shape[0] += 1;
        if (which == 1) first.filters = 1 << 30;
        try {
            if (which == 2) {
                ex->run(x.data(), y.data(), -1);
            } else {
                executor(bad, 2);
            }
        } catch (const Error&) {
            ++refused;
        }
    }
    if (refused != n) {
        std::fprintf(stderr, "only %ld of %d bad cases refused\n", refused, n);
        return 1;
    }
    std::printf("ok cycles=%d runs=%ld refused=%ld\n", n, runs, refused);
    return 0;
}

int threads(int n) {
    const auto ms = models();
    const int kThreads = 8;
    for (const Model& m : ms) {
        auto shared = executor(m, 2);
        const int classes = int(shared->network().output_size());
        std::vector<std::vector<float>> x(kThreads), want(kThreads);
        for (int t = 0; t < kThreads; ++t) {
            const int batch = 1 + t * 5;
            x[t] = inputs(shared->network(), batch, 100 + t);
            want[t].resize(size_t(batch) * classes);
            shared->run(x[t].data(), want[t].data(), batch);
        }
        std::vector<int> wrong(kThreads, 0);
        auto worker = [&](int t, Executor* ex) {
            std::vector<float> y(want[t].size());
            const int batch = int(want[t].size() / classes);
            for (int k = 0; k < n; ++k) {
                std::fill(y.begin(), y.end(), -1.f);
                ex->run(x[t].data(), y.data(), batch);
                if (std::memcmp(y.data(), want[t].data(), y.size() * sizeof(float)) != 0) ++wrong[t];
            }
        };
        std::vector<std::thread> pool;
        for (int t = 0; t < kThreads; ++t) pool.emplace_back(worker, t, shared.get());
        for (auto& th : pool) th.join();
        // Each thread on its own Executor of the same model (1 or 2 CPU threads); the
        // reference is that Executor's serial answer (a batch split over 2 threads runs
        // other GEMM shapes, whose last bits may differ).
        std::vector<std::unique_ptr<Executor>> own;
        for (int t = 0; t < kThreads; ++t) {
            own.push_back(executor(m, 1 + t % 2));
            own[t]->run(x[t].data(), want[t].data(), int(want[t].size() / classes));
        }
        pool.clear();
        for (int t = 0; t < kThreads; ++t) pool.emplace_back(worker, t, own[t].get());
        for (auto& th : pool) th.join();
        for (int t = 0; t < kThreads; ++t)
            if (wrong[t]) {
                std::fprintf(stderr, "thread %d: %d of %d answers differ from the serial ones\n", t, wrong[t], 2 * n);
                return 1;
            }
    }
    std::printf("ok threads=%d calls=%d models=%zu\n", kThreads, n, ms.size());
    return 0;
}

int pool(int n) {
    ThreadPool workers(3);
    const int kCallers = 4;
    std::vector<int> wrong(kCallers, 0), rethrown(kCallers, 0);
    auto caller = [&](int c) {
        for (int k = 0; k < n; ++k) {
            // Plain writes, one index each: the pool's hand-over must order them before
            // parallel_for returns (TSan checks it).
            std::vector<int> hits(size_t(1 + (k + c) % 17), 0);
            workers.parallel_for(int(hits.size()), [&](int i) { hits[size_t(i)] += i + 1; });
            for (size_t i = 0; i < hits.size(); ++i)
                if (hits[i] != int(i) + 1) ++wrong[c];
            if (k % 10 == c) {
                try {
                    workers.parallel_for(5, [&](int i) {
                        if (i == 3) throw InputError("job " + std::to_string(c));
                    });
                } catch (const InputError& e) {
                    rethrown[c] += std::string(e.what()) == "job " + std::to_string(c);
                }
            }
        }
    };
    std::vector<std::thread> threads;
    for (int c = 0; c < kCallers; ++c) threads.emplace_back(caller, c);
    for (auto& t : threads) t.join();
    for (int c = 0; c < kCallers; ++c) {
        const int throws = (n - c + 9) / 10;  // the k < n with k % 10 == c
        if (wrong[c] || rethrown[c] != throws) {
            std::fprintf(stderr, "caller %d: %d wrong jobs, %d of %d exceptions rethrown\n", c, wrong[c], rethrown[c],
                         throws);
            return 1;
        }
    }
    std::printf("ok pool callers=%d jobs=%d\n", kCallers, n);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s cycles|threads|pool N\n", argv[0]);
        return 2;
    }
    const int n = std::atoi(argv[2]);
    try {
        if (std::string(argv[1]) == "cycles") return cycles(n);
        if (std::string(argv[1]) == "threads") return threads(n);
        if (std::string(argv[1]) == "pool") return pool(n);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "unexpected exception: %s\n", e.what());
        return 1;
    }
    return 2;
}
