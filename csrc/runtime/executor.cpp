#include "executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "../net/layout.h"
#include "../support/errors.h"
#include "../support/finite.h"
#include "../support/format.h"

namespace lenet {

// One node per kernel (a fused pair of steps is one node). Node k reads the
// values `inputs` (-1: the walk's input, j: node j's output) and writes its own;
// the last node writes the walk's output, the others a slot of the plan.
struct Executor::Plan {
    int capacity = 0;
    struct Node {
        std::unique_ptr<Kernel> kernel;
        int first = 0, last = 0;         // the steps it runs
        std::vector<int> inputs;
        std::vector<const float*> args;  // the input pointers of the current call
        int slot = -1;
    };
    std::vector<Node> nodes;
    bool whole_network = false;  // one node runs every step
    std::string why;             // why not (Backend::network_kernel)
    std::vector<Buffer> slots;           // activation buffers, shared by nodes whose outputs do not overlap in time
    std::unique_ptr<Stream> stream;
    std::vector<float> staged_in, staged_out;  // host copies in the backend's order, when it differs
    std::vector<float> converted;              // uint8 inputs as float32 (Input::pixels)
};

namespace {

// Whether a tensor's memory order as Keras holds it differs from the backend's:
// Keras holds a channels_first image C, H, W and everything else H, W, C; an
// NCHW backend holds every tensor C, H, W. Trivial when one side has one element.
bool orders_differ(const Shape& s, Layout layout) {
    const bool keras_chw = s.rank == 3 && s.chw;
    const bool backend_chw = layout == Layout::nchw;
    return keras_chw != backend_chw && s.d.c > 1 && int64_t(s.d.h) * s.d.w > 1;
}

}  // namespace

Executor::Executor(std::shared_ptr<const Network> network, std::unique_ptr<Backend> backend, int threads)
    : network_(std::move(network)), backend_(std::move(backend)), threads_(std::max(1, threads)) {
    for (const Step& s : network_->steps()) constants_.push_back(backend_->prepare(s));
    transpose_input_ = orders_differ(network_->input(), backend_->layout());
    transpose_output_ = orders_differ(network_->output(), backend_->layout());
    const int workers = std::min(threads_, backend_->parallelism()) - 1;
    if (workers > 0) pool_ = std::make_unique<ThreadPool>(workers);
}

Executor::~Executor() = default;

// A kernel per step, or per fused adjacent pair where the backend has one.
void Executor::build_step_nodes(Plan& plan, int capacity, std::vector<int64_t>& out_size) {
    const auto& steps = network_->steps();
    const int count = int(steps.size());
    // Readers of each step's output, to know which adjacent pairs may be fused.
    std::vector<int> readers(count, 0);
    for (const Step& s : steps)
        for (int v : s.inputs)
            if (v >= 0) ++readers[v];

    std::vector<int> node_of(count, -1);  // step -> the node that produces its output
    for (int i = 0; i < count;) {
        std::unique_ptr<Kernel> k;
        const bool pair = i + 1 < count && readers[i] == 1 && steps[i + 1].inputs == std::vector<int>{i};
        if (pair) k = backend_->fused_kernel(steps[i], steps[i + 1], constants_[i].get(), capacity);
        const int last = k ? i + 1 : i;
        if (!k) k = backend_->kernel(steps[i], constants_[i].get(), capacity);
        Plan::Node node;
        node.kernel = std::move(k);
        node.first = i, node.last = last;
        for (int v : steps[i].inputs) node.inputs.push_back(v < 0 ? -1 : node_of[v]);
        node.args.resize(node.inputs.size());
        node_of[i] = node_of[last] = int(plan.nodes.size());
        out_size.push_back(steps[last].out.size());
        plan.nodes.push_back(std::move(node));
        i = last + 1;
    }
    // A value only the next node reads: the backend may pick its layout (Backend::link).
    for (size_t k = 0; k + 1 < plan.nodes.size(); ++k)
        if (readers[plan.nodes[k].last] == 1 && plan.nodes[k + 1].inputs == std::vector<int>{int(k)})
            backend_->link(*plan.nodes[k].kernel, *plan.nodes[k + 1].kernel);
}

namespace {

// What identifies a network's architecture to the choice between its whole-network
// kernel and a kernel per step: its steps' kinds, shapes and windows.
std::string architecture_key(const Backend& backend, const Network& net, int capacity) {
    std::string key = backend.name() + " " + std::to_string(capacity);
    for (const Step& s : net.steps()) {
        key += ";" + std::string(to_string(s.op)) + ":";
        for (int v : {s.in.h, s.in.w, s.in.c, s.out.h, s.out.w, s.out.c, s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.groups,
                      s.pad.top, s.pad.bottom, s.pad.left, s.pad.right, int(s.act.kind)})
            key += std::to_string(v) + ",";
        for (int v : s.inputs) key += std::to_string(v) + ",";
    }
    return key;
}

struct PathChoice {
    bool whole = false;
    std::string why;
};

// Choices made in this process, so that every engine of an architecture and capacity
// runs the same kernels and gives the same bits (as cuDNN's algorithm per shape).
std::mutex path_choices_mutex;
std::map<std::string, PathChoice> path_choices;

}  // namespace

std::unique_ptr<Executor::Plan> Executor::make_plan(int capacity) {
    // Where the backend times its whole-network kernel against a kernel per step, the
    // choice made for this architecture and capacity in the process (only networks the
    // kernel can run have one).
    std::string key;
    std::optional<PathChoice> known;
    if (backend_->time_paths()) {
        key = architecture_key(*backend_, *network_, capacity);
        std::lock_guard<std::mutex> lock(path_choices_mutex);
        if (auto it = path_choices.find(key); it != path_choices.end()) known = it->second;
    }
    std::unique_ptr<Kernel> whole;
    std::string why;
    if (!known || known->whole) {
        std::vector<const StepConstants*> constants;
        for (const auto& c : constants_) constants.push_back(c.get());
        whole = backend_->network_kernel(network_->steps(), constants, capacity, &why);
    }
    if (known) why = known->why;
    if (known || !whole || !backend_->time_paths()) {
        auto plan = build_plan(capacity, std::move(whole));
        plan->why = why;
        return plan;
    }
    // Both can run it: time both once, keep the faster.
    auto fused = build_plan(capacity, std::move(whole));
    auto layered = build_plan(capacity, nullptr);
    const double t_fused = time_plan(*fused), t_layered = time_plan(*layered);
    PathChoice c;
    c.whole = t_fused <= t_layered;
    c.why =
        std::string(c.whole ? "faster" : "slower") + " as one kernel: " + number_str(std::round(t_fused * 10) / 10) +
        " us against " + number_str(std::round(t_layered * 10) / 10) + " us a call with a kernel per layer (capacity " +
        std::to_string(capacity) + ", median of " + std::to_string(kTimedCalls) + " calls, timed when first planned)";
    {
        std::lock_guard<std::mutex> lock(path_choices_mutex);
        known = path_choices.emplace(key, c).first->second;  // another thread's choice, if it came first
    }
    auto& kept = known->whole ? fused : layered;
    kept->why = known->why;
    return std::move(kept);
}

double Executor::time_plan(Plan& plan) {
    const size_t rows = size_t(plan.capacity);
    std::vector<float> x(rows * network_->input().d.size(), 0.f), y(rows * network_->output_size());
    HostInput input;
    input.values = x.data();
    std::vector<double> times;
    for (int i = 0; i < kTimedCalls + 2; ++i) {  // two first: the graph's capture, first touches
        const auto start = std::chrono::steady_clock::now();
        run_chunk(plan, input, y.data(), plan.capacity, nullptr);
        const std::chrono::duration<double, std::micro> t = std::chrono::steady_clock::now() - start;
        if (i >= 2) times.push_back(t.count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    return times[times.size() / 2];
}

std::unique_ptr<Executor::Plan> Executor::build_plan(int capacity, std::unique_ptr<Kernel> whole) {
    auto plan = std::make_unique<Plan>();
    plan->capacity = capacity;
    const int count = int(network_->steps().size());
    std::vector<int64_t> out_size;  // per node: floats per image it writes
    if (whole) {
        Plan::Node node;
        node.kernel = std::move(whole);
        node.first = 0, node.last = count - 1;
        node.inputs = {-1};
        node.args.resize(1);
        out_size.push_back(network_->output_size());
        plan->nodes.push_back(std::move(node));
        plan->whole_network = true;
    } else {
        build_step_nodes(*plan, capacity, out_size);
    }

    // Slots: a node's output takes a free slot; a slot frees after its value's last reader.
    const int nodes = int(plan->nodes.size());
    std::vector<int> last_read(nodes, -1);
    for (int k = 0; k < nodes; ++k)
        for (int v : plan->nodes[k].inputs)
            if (v >= 0) last_read[v] = std::max(last_read[v], k);
    std::vector<int64_t> slot_size;
    std::vector<int> free_slots;
    for (int k = 0; k + 1 < nodes; ++k) {
        int slot;
        if (!free_slots.empty()) {
            slot = free_slots.back();
            free_slots.pop_back();
        } else {
            slot = int(slot_size.size());
            slot_size.push_back(0);
        }
        slot_size[slot] = std::max(slot_size[slot], out_size[k]);
        plan->nodes[k].slot = slot;
        for (int v : plan->nodes[k].inputs)
            if (v >= 0 && last_read[v] == k) {
                last_read[v] = -1;  // a node may read a value twice (add(x, x)): free its slot once
                free_slots.push_back(plan->nodes[v].slot);
            }
    }
    for (int64_t floats : slot_size) plan->slots.push_back(backend_->alloc(size_t(floats) * capacity));

    const int64_t in_size = network_->input().d.size(), out_size_floats = network_->output_size();
    plan->stream = plan->whole_network
                       ? backend_->network_stream(*plan->nodes[0].kernel, capacity, in_size, out_size_floats)
                       : backend_->stream(capacity, in_size, out_size_floats);
    if (transpose_input_) plan->staged_in.resize(size_t(network_->input().d.size()) * capacity);
    if (transpose_output_) plan->staged_out.resize(size_t(network_->output_size()) * capacity);
    return plan;
}

std::vector<Executor::PlanReport> Executor::describe() {
    std::lock_guard<std::mutex> lock(plans_mutex_);
    std::vector<PlanReport> out;
    for (const auto& [capacity, plans] : free_plans_)
        if (!plans.empty()) {
            const Plan& plan = *plans.front();
            PlanReport r;
            r.capacity = capacity;
            r.whole_network = plan.whole_network;
            r.why = plan.why;
            r.stream = plan.stream->facts();
            for (const Plan::Node& node : plan.nodes) r.nodes.push_back({node.first, node.last, node.kernel->facts()});
            out.push_back(std::move(r));
        }
    return out;
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

void Executor::run_chunk(Plan& plan, HostInput x, float* y, int n, ThreadPool* spare) {
    const Dims in = network_->input().d, out = network_->output().d;
    const bool nchw = backend_->layout() == Layout::nchw;
    if (transpose_input_) {  // (pixels are converted before: see run)
        float* t = plan.staged_in.data();
        if (nchw)
            nhwc_to_nchw(x.values, t, n, in);
        else
            nchw_to_nhwc(x.values, t, n, in);
        x.values = t;
    }
    float* result = transpose_output_ ? plan.staged_out.data() : y;
    plan.stream->forward(x, result, n, [&plan, spare](const float* src, float* dst, int m) {
        const int last = int(plan.nodes.size()) - 1;
        for (int k = 0; k <= last; ++k) {
            Plan::Node& node = plan.nodes[k];
            for (size_t i = 0; i < node.inputs.size(); ++i) {
                const int v = node.inputs[i];
                node.args[i] = v < 0 ? src : plan.slots[plan.nodes[v].slot].get();
            }
            node.kernel->run(node.args.data(), k == last ? dst : plan.slots[node.slot].get(), m, spare);
        }
    });
    if (transpose_output_) {
        if (nchw)
            nchw_to_nhwc(result, y, n, out);
        else
            nhwc_to_nchw(result, y, n, out);
    }
}

namespace {

InputError non_finite_input(int64_t image) {
    return InputError("image " + std::to_string(image) + " of the batch holds NaN or infinite values");
}

// Outputs -> a distribution per image, in place (see Executor::Output).
void to_probabilities(float* y, int64_t n, int64_t size, OutputKind kind) {
    if (kind == OutputKind::softmax) return;
    for (int64_t b = 0; b < n; ++b) {
        float* p = y + b * size;
        if (kind == OutputKind::log_softmax) {  // log-probabilities: their exponentials
            for (int64_t i = 0; i < size; ++i) p[i] = std::exp(p[i]);
            continue;
        }
        if (kind == OutputKind::sigmoid) {
            double sum = 0;
            for (int64_t i = 0; i < size; ++i) sum += p[i];
            const float inv = sum > 0 ? float(1 / sum) : 0.f;
            for (int64_t i = 0; i < size; ++i) p[i] = sum > 0 ? p[i] * inv : 1.f / float(size);
            continue;
        }
        const float top = *std::max_element(p, p + size);
        float sum = 0.f;
        for (int64_t i = 0; i < size; ++i) sum += p[i] = std::exp(p[i] - top);
        const float inv = 1.f / sum;
        for (int64_t i = 0; i < size; ++i) p[i] *= inv;
    }
}

}  // namespace

void Executor::run(Input input, float* y, int64_t n, Output output) {
    if (n < 0) throw InputError("negative batch size " + std::to_string(n));
    if (input.pixels && !std::isfinite(input.scale))
        throw InputError("the pixel scale is not finite: " + std::to_string(input.scale));
    if (output == Output::probabilities && network_->output().rank != 1)
        throw InputError("the model's output " + network_->output().str() +
                         " is not a vector of class scores: no probabilities to give (predict gives the outputs)");
    if (n == 0) return;
    const int64_t in_size = network_->input().d.size();
    const int64_t out_size = network_->output_size();
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
                HostInput xb;
                if (input.pixels && backend_->takes_pixels() && !transpose_input_) {
                    // Bytes to the backend's stream, which scales them (a GPU uploads 4x fewer bytes).
                    xb.pixels = input.pixels + b * in_size;
                    xb.scale = input.scale;
                } else if (input.pixels) {
                    // Finite by construction (bytes times a finite scale).
                    std::vector<float>& f = plan->converted;
                    f.resize(size_t(capacity) * in_size);
                    const uint8_t* p = input.pixels + b * in_size;
                    for (int64_t i = 0; i < m * in_size; ++i) f[i] = float(p[i]) * input.scale;
                    xb.values = f.data();
                } else {
                    xb.values = input.values + b * in_size;
                    // NaN or infinite inputs would come out as NaN: refused, never a silent
                    // answer (here, or by a stream that checks as it copies). So is an output
                    // that overflowed (inputs or weights too large for float32 activations).
                    if (!plan->stream->checks_values())
                        if (const int64_t bad = first_non_finite(xb.values, m, in_size); bad >= 0)
                            throw non_finite_input(b + bad);
                }
                float* yb = y + b * out_size;
                try {
                    run_chunk(*plan, xb, yb, m, spare);
                } catch (const NonFiniteInput& e) {
                    throw non_finite_input(b + e.image);
                }
                if (const int64_t bad = first_non_finite(yb, m, out_size); bad >= 0)
                    throw InputError("the network's output for image " + std::to_string(b + bad) +
                                     " of the batch is not finite: its activations overflowed float32 (input "
                                     "values or weights far too large; inputs are expected in the model's scale)");
                if (output == Output::probabilities) to_probabilities(yb, m, out_size, network_->output_kind());
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
