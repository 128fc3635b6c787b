#include "executor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "errors.h"
#include "layout.h"

namespace lenet {

struct Executor::Plan {
    int capacity = 0;
    std::vector<std::unique_ptr<Kernel>> kernels;
    Buffer ping, pong;                 // activations between steps
    std::unique_ptr<Stream> stream;
    std::vector<float> transposed;     // host input in the backend's layout, when it differs
};

Executor::Executor(std::shared_ptr<const Network> network, std::unique_ptr<Backend> backend, int threads)
    : network_(std::move(network)), backend_(std::move(backend)), threads_(std::max(1, threads)) {
    for (const Step& s : network_->steps()) constants_.push_back(backend_->prepare(s));
    const Dims in = network_->input();
    const bool model_nchw = network_->input_format() == DataFormat::channels_first;
    transpose_input_ = in.c > 1 && model_nchw != (backend_->layout() == Layout::nchw);
    const int workers = std::min(threads_, backend_->parallelism()) - 1;
    if (workers > 0) pool_ = std::make_unique<ThreadPool>(workers);
}

Executor::~Executor() = default;

std::unique_ptr<Executor::Plan> Executor::make_plan(int capacity) {
    auto plan = std::make_unique<Plan>();
    plan->capacity = capacity;
    const auto& steps = network_->steps();
    int64_t largest = 0;  // the largest tensor a kernel hands to the next one
    for (size_t i = 0; i < steps.size();) {
        std::unique_ptr<Kernel> k;
        if (i + 1 < steps.size()) k = backend_->fused_kernel(steps[i], steps[i + 1], constants_[i].get(), capacity);
        const size_t last = k ? i + 1 : i;
        if (!k) k = backend_->kernel(steps[i], constants_[i].get(), capacity);
        plan->kernels.push_back(std::move(k));
        if (last + 1 < steps.size()) largest = std::max(largest, steps[last].out.size());
        i = last + 1;
    }
    if (largest > 0) {
        plan->ping = backend_->alloc(size_t(largest) * capacity);
        if (plan->kernels.size() > 2) plan->pong = backend_->alloc(size_t(largest) * capacity);
    }
    plan->stream = backend_->stream(capacity, network_->input().size(), network_->classes());
    if (transpose_input_) plan->transposed.resize(size_t(network_->input().size()) * capacity);
    return plan;
}

std::unique_ptr<Executor::Plan> Executor::acquire(int capacity) {
    {
        std::lock_guard<std::mutex> lock(plans_mutex_);
        auto& free = free_plans_[capacity];
        if (!free.empty()) {
            auto plan = std::move(free.back());
            free.pop_back();
            return plan;
        }
    }
    return make_plan(capacity);
}

void Executor::release(std::unique_ptr<Plan> plan) {
    std::lock_guard<std::mutex> lock(plans_mutex_);
    free_plans_[plan->capacity].push_back(std::move(plan));
}

void Executor::run_chunk(Plan& plan, const float* x, float* y, int n, ThreadPool* spare) {
    const Dims in = network_->input();
    if (transpose_input_) {
        float* t = plan.transposed.data();
        if (backend_->layout() == Layout::nhwc)
            nchw_to_nhwc(x, t, n, in);
        else
            nhwc_to_nchw(x, t, n, in);
        x = t;
    }
    // The walk: step i reads what step i-1 wrote; ping-pong between two buffers,
    // the first step reading the input and the last writing the output.
    const size_t last = plan.kernels.size() - 1;
    plan.stream->forward(x, y, n, [&plan, last, spare](const float* src, float* dst, int m) {
        float* bufs[2] = {plan.ping.get(), plan.pong.get()};
        const float* cur = src;
        for (size_t i = 0; i <= last; ++i) {
            float* out = i == last ? dst : bufs[i % 2];
            plan.kernels[i]->run(cur, out, m, spare);
            cur = out;
        }
    });
}

namespace {

// The first of n vectors of `size` floats that holds a NaN or an infinity, or -1.
// An OR of comparisons, not a sum: it vectorizes without reassociating floats.
int64_t first_non_finite(const float* v, int64_t n, int64_t size) {
    const float most = std::numeric_limits<float>::max();
    for (int64_t b = 0; b < n; ++b) {
        const float* p = v + b * size;
        int bad = 0;
        for (int64_t i = 0; i < size; ++i) bad |= !(std::fabs(p[i]) <= most);
        if (bad) return b;
    }
    return -1;
}

}  // namespace

void Executor::run(const float* x, float* y, int64_t n) {
    if (n < 0) throw InputError("negative batch size " + std::to_string(n));
    if (n == 0) return;
    const int64_t in_size = network_->input().size();
    const int classes = network_->classes();
    const int tasks = int(std::min<int64_t>(n, pool_ ? pool_->workers() + 1 : 1));
    const int64_t per_task = (n + tasks - 1) / tasks;

    // One task leaves the workers idle: kernels may split their own work over them.
    ThreadPool* spare = tasks == 1 ? pool_.get() : nullptr;
    auto work = [&](int t) {
        const int64_t begin = t * per_task, end = std::min(n, begin + per_task);
        if (begin >= end) return;
        const int capacity = backend_->plan_capacity(int(std::min<int64_t>(end - begin, backend_->max_batch())));
        std::unique_ptr<Plan> plan = acquire(capacity);
        try {
            for (int64_t b = begin; b < end; b += capacity) {
                const int m = int(std::min<int64_t>(capacity, end - b));
                // NaN or infinite inputs would come out as NaN probabilities: refused,
                // never a silent answer. So is an output that overflowed (inputs or
                // weights too large for float32 activations).
                if (const int64_t bad = first_non_finite(x + b * in_size, m, in_size); bad >= 0)
                    throw InputError("image " + std::to_string(b + bad) +
                                     " of the batch holds NaN or infinite values");
                run_chunk(*plan, x + b * in_size, y + b * classes, m, spare);
                if (const int64_t bad = first_non_finite(y + b * classes, m, classes); bad >= 0)
                    throw InputError("the network's output for image " + std::to_string(b + bad) +
                                     " of the batch is not finite: its activations overflowed float32 (input "
                                     "values or weights far too large; inputs are expected in the model's scale)");
            }
        } catch (...) {
            release(std::move(plan));
            throw;
        }
        release(std::move(plan));
    };
    if (tasks == 1)
        work(0);
    else
        pool_->parallel_for(tasks, work);
}

}  // namespace lenet
