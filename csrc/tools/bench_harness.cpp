// lenet-bench-cpp: the engine timed from C++, for lenet-bench's lenet-cpp contender
// (python/lenet/bench/child.py, Harness). A client of the public API only.
//
//   lenet-bench-cpp MODEL.lenet THREADS [DEVICE]
//
// DEVICE: "cpu" (the default) or "cuda" (lenet-cpp-cuda: the GPU from C++, the core
// loading the CUDA backend's library itself).
//
// Prints "ready PID VERSION" once the engine is made (or "error MESSAGE" and exits 1),
// then answers one command per line on stdin with one line on stdout:
//
//   data PATH N            N inputs, raw float32 in the model's input shape -> "ok"
//   predict IN OUT N       probabilities of the N inputs in IN written to OUT (raw float32) -> "ok"
//   block B BUDGET_S MIN [OUT]
//                          calls on consecutive batches of B of the data (cycled as
//                          bench/workload.py's batches()) until MIN calls and BUDGET_S
//                          seconds: "ok WALL_S CPU_S IMAGES NS NS ..." (each call's ns);
//                          with OUT, the outputs of the first pass over the batches
//                          written there (raw float32): what the timed calls answered
//   exit
//
// Any failure answers "error MESSAGE" and the harness goes on. The timing is what
// bench/measure.py's block() does in Python, with steady_clock and the process's CPU
// clock, so that the rows compare.
#include <lenet/lenet.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

template <class T>
std::string text(T v) {
    char buf[64];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

template <class T>
T parse(std::string_view s, const char* what) {
    T v{};
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size())
        throw lenet::InputError(std::string("bad ") + what + ": '" + std::string(s) + "'");
    return v;
}

std::vector<std::string_view> words(std::string_view line) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && line[i] == ' ') ++i;
        size_t j = i;
        while (j < line.size() && line[j] != ' ') ++j;
        if (j > i) out.push_back(line.substr(i, j - i));
        i = j;
    }
    return out;
}

std::vector<float> read_floats(const std::string& path, size_t count) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    std::vector<float> x(count);
    if (!f || std::fread(x.data(), sizeof(float), count, f.get()) != count)
        throw lenet::InputError(path + ": cannot read " + text(count) + " floats");
    return x;
}

double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

struct Harness {
    lenet::Engine engine;
    std::vector<float> data;
    int64_t inputs = 0;
    std::map<int64_t, std::vector<float>> cycled;  // per batch size: the data repeated to hold one batch

    std::string run(const std::vector<std::string_view>& w) {
        const int64_t size = engine.input_size();
        if (w[0] == "data" && w.size() == 3) {
            inputs = parse<int64_t>(w[2], "count");
            data = read_floats(std::string(w[1]), size_t(inputs * size));
            cycled.clear();
            return "ok";
        }
        if (w[0] == "predict" && w.size() == 4) {
            const auto n = parse<int64_t>(w[3], "count");
            const auto x = read_floats(std::string(w[1]), size_t(n * size));
            const auto p = engine.predict_proba(x);
            std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(std::string(w[2]).c_str(), "wb"), std::fclose);
            if (!f || std::fwrite(p.data(), sizeof(float), p.size(), f.get()) != p.size())
                throw lenet::InputError(std::string(w[2]) + ": cannot write the probabilities");
            return "ok";
        }
        if (w[0] == "block" && (w.size() == 4 || w.size() == 5))
            return block(parse<int64_t>(w[1], "batch"), parse<double>(w[2], "budget"), parse<int64_t>(w[3], "calls"),
                         w.size() == 5 ? std::string(w[4]) : std::string());
        throw lenet::InputError("unknown command '" + std::string(w[0]) + "'");
    }

    // bench/workload.py's batches(): consecutive batches of `batch` inputs, the data
    // repeated first when it holds fewer.
    std::string block(int64_t batch, double budget_s, int64_t min_calls, const std::string& keep) {
        if (inputs < 1 || batch < 1) throw lenet::InputError("block: no data, or a batch of " + text(batch));
        const int64_t size = engine.input_size();
        auto& items = cycled[batch];
        if (items.empty()) {
            const int64_t reps = (batch + inputs - 1) / inputs;
            for (int64_t r = 0; r < reps; ++r) items.insert(items.end(), data.begin(), data.end());
        }
        const int64_t count = int64_t(items.size()) / size / batch;  // whole batches
        const size_t answer = size_t(batch * engine.classes());
        std::vector<float> probs(answer);
        // With `keep`, the first pass writes each call's answer into its own place here (no copy
        // in the timed loop); later calls reuse `probs`.
        std::vector<float> kept(keep.empty() ? 0 : size_t(count) * answer);
        std::vector<int64_t> calls;
        using clock = std::chrono::steady_clock;
        const double cpu0 = cpu_seconds();
        const auto start = clock::now();
        const auto deadline =
            start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(budget_s));
        auto end = start;
        while (int64_t(calls.size()) < min_calls || end < deadline) {
            const float* x = items.data() + (int64_t(calls.size()) % count) * batch * size;
            const int64_t i = int64_t(calls.size());
            float* y = !kept.empty() && i < count ? kept.data() + size_t(i) * answer : probs.data();
            const auto t0 = clock::now();
            engine.predict_proba(x, size_t(batch * size), y, answer);
            end = clock::now();
            calls.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(end - t0).count());
        }
        const double cpu = cpu_seconds() - cpu0;
        if (!keep.empty()) {
            const size_t n = std::min(size_t(calls.size()), size_t(count)) * answer;
            std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(keep.c_str(), "wb"), std::fclose);
            if (!f || std::fwrite(kept.data(), sizeof(float), n, f.get()) != n)
                throw lenet::InputError(keep + ": cannot write the timed calls' outputs");
        }
        std::string out = "ok " + text(std::chrono::duration<double>(end - start).count()) + " " + text(cpu) + " " +
                          text(batch * int64_t(calls.size()));
        for (auto ns : calls) out += " " + text(ns);
        return out;
    }
};

void reply(const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
}

std::string one_line(std::string s) {
    for (auto& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 && argc != 4) {
        std::fputs("usage: lenet-bench-cpp MODEL.lenet THREADS [DEVICE]\n", stderr);
        return 2;
    }
    std::unique_ptr<Harness> h;
    try {
        lenet::EngineOptions options;
        options.threads = parse<int>(argv[2], "threads");
        if (argc == 4) options.device = argv[3];
        h.reset(new Harness{lenet::Engine(argv[1], options), {}, 0, {}});
    } catch (const lenet::Error& e) {
        reply("error " + one_line(e.what()));
        return 1;
    }
    reply("ready " + text(int64_t(getpid())) + " " + lenet::version());
    char buf[1 << 16];
    while (std::fgets(buf, sizeof buf, stdin)) {
        std::string line(buf);
        while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
        const auto w = words(line);
        if (w.empty()) continue;
        if (w[0] == "exit") break;
        try {
            reply(h->run(w));
        } catch (const std::exception& e) {
            reply("error " + one_line(e.what()));
        }
    }
    return 0;
}
