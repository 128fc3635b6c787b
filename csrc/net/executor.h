// The executor: runs a Network on a Backend. It prepares every Step once, keeps
// a pool of plans (kernels + ping-pong buffers + stream) per batch capacity,
// splits a call's batch across plans and threads, and walks the steps.
// Thread-safe: each call takes plans from the pool, so concurrent calls never
// share per-call state.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "../backends/backend.h"
#include "network.h"
#include "thread_pool.h"

namespace lenet {

class Executor {
public:
    Executor(std::shared_ptr<const Network> network, std::unique_ptr<Backend> backend, int threads);
    ~Executor();

    // x: n images in the model's input layout ((n, H, W, C), or (n, C, H, W) for a
    // channels_first model); y: (n, classes) probabilities.
    void run(const float* x, float* y, int64_t n);

    const Network& network() const { return *network_; }
    const Backend& backend() const { return *backend_; }
    int threads() const { return threads_; }

private:
    struct Plan;
    std::unique_ptr<Plan> make_plan(int capacity);
    std::unique_ptr<Plan> acquire(int capacity);
    void release(std::unique_ptr<Plan> plan);
    void run_chunk(Plan& plan, const float* x, float* y, int n, ThreadPool* spare);

    std::shared_ptr<const Network> network_;
    std::unique_ptr<Backend> backend_;
    std::vector<std::shared_ptr<const StepConstants>> constants_;
    int threads_;
    bool transpose_input_;  // model layout differs from the backend's and C > 1
    std::unique_ptr<ThreadPool> pool_;
    std::mutex plans_mutex_;
    std::map<int, std::vector<std::unique_ptr<Plan>>> free_plans_;
};

}  // namespace lenet
