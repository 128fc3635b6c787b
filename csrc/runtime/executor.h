// The executor: runs a Network on a Backend. It prepares every Step once, keeps
// a pool of plans (kernels + activation buffers + stream) per batch capacity,
// splits a call's batch across plans and threads, and walks the steps.
// Thread-safe: each call takes plans from the pool, so concurrent calls never
// share per-call state.
//
// Inputs and outputs are in the model's own layout (Keras': (n, c, h, w) for a
// channels_first model's images), whatever the backend's; the executor
// transposes on the host where the two differ.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../backends/backend.h"
#include "../net/network.h"
#include "../support/thread_pool.h"

namespace lenet {

class Executor {
public:
    Executor(std::shared_ptr<const Network> network, std::unique_ptr<Backend> backend, int threads);
    ~Executor();

    // What run() writes.
    enum class Output {
        raw,            // the model's outputs, as Keras' predict gives them
        probabilities,  // a distribution per image (see Network::OutputKind): softmax outputs as they are,
                        // log-softmax outputs exponentiated, sigmoid outputs divided by their sum,
                        // anything else through a softmax
    };

    // The inputs of a call: float32 values, or uint8 pixels multiplied by `scale` as
    // they are converted (float(p) * scale, as NumPy's astype(float32) then a float32
    // multiply gives it: the same bits), so that images travel as bytes to the core.
    struct Input {
        const float* values = nullptr;
        const uint8_t* pixels = nullptr;
        float scale = 1.f;
    };

    // x: n inputs in the model's layout (Keras' per-sample input shape);
    // y: n x output_size values.
    void run(Input x, float* y, int64_t n, Output output = Output::raw);
    void run(const float* x, float* y, int64_t n, Output output = Output::raw) {
        run(Input{x, nullptr, 1.f}, y, n, output);
    }

    // What the plans made so far decided (those not running a call right now).
    struct PlanReport {
        int capacity = 0;
        bool whole_network = false;  // one kernel runs every step (Backend::network_kernel)
        std::string why;  // why not, when the backend has such a kernel
        Facts stream;
        struct Node {
            int first = 0, last = 0;  // the steps this kernel runs (a fused pair: two)
            Facts kernel;
        };
        std::vector<Node> nodes;
    };
    std::vector<PlanReport> describe();

    // Host memory for `bytes` of inputs that run() takes without a copy of its own where
    // the backend can (see Backend::host_buffer); owned by the pointer's last holder.
    std::shared_ptr<void> host_buffer(size_t bytes) { return backend_->host_buffer(bytes); }

    const Network& network() const { return *network_; }
    const Backend& backend() const { return *backend_; }
    int threads() const { return threads_; }

private:
    struct Plan;
    // A new plan of `capacity`: the backend's whole-network kernel or a kernel per step;
    // where both can run and the backend asks for it (time_paths), the faster one.
    std::unique_ptr<Plan> make_plan(int capacity);
    std::unique_ptr<Plan> build_plan(int capacity, std::unique_ptr<Kernel> whole);
    void build_step_nodes(Plan& plan, int capacity, std::vector<int64_t>& out_size);
    static constexpr int kTimedCalls = 5;
    double time_plan(Plan& plan);  // median microseconds of a call on zeros
    std::unique_ptr<Plan> acquire(int capacity);
    void release(std::unique_ptr<Plan> plan);
    void run_chunk(Plan& plan, HostInput x, float* y, int n, ThreadPool* spare);

    std::shared_ptr<const Network> network_;
    std::unique_ptr<Backend> backend_;
    std::vector<std::shared_ptr<const StepConstants>> constants_;
    int threads_;
    bool transpose_input_, transpose_output_;  // the model's memory order differs from the backend's
    std::unique_ptr<ThreadPool> pool_;
    std::mutex plans_mutex_;
    std::map<int, std::vector<std::unique_ptr<Plan>>> free_plans_;
};

}  // namespace lenet
