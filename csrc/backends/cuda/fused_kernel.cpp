// The fused path as one Kernel of the executor's (fused_program.h): the program
// is planned and its ops uploaded once per plan, then each call is one launch.
#include <cstdint>
#include <limits>
#include <optional>

#include "fused.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

class FusedKernel : public Kernel {
public:
    FusedLaunch launch() const {
        return {static_cast<const fused::Op*>(ops_.get()), int(program_.ops.size()), program_.tile, program_.threads,
                shared_bytes_};
    }

    FusedKernel(Context& ctx, fused::Program program) : ctx_(ctx), program_(std::move(program)) {
        shared_bytes_ = program_.shared_floats * int(sizeof(float));
        LENET_CHECK(fused::allow_shared_memory(program_.tile.images, shared_bytes_));
        const size_t bytes = program_.ops.size() * sizeof(fused::Op);
        ops_ = device_alloc(bytes);
        cudaStream_t s = ctx_.stream.get();
        LENET_CHECK(cudaMemcpyAsync(ops_.get(), program_.ops.data(), bytes, cudaMemcpyHostToDevice, s));
        LENET_CHECK(cudaStreamSynchronize(s));
    }

    void run(Inputs x, float* y, int n, ThreadPool*) override {
        LENET_CHECK(fused::launch(static_cast<const fused::Op*>(ops_.get()), int(program_.ops.size()), program_.tile,
                                  program_.threads, shared_bytes_, x[0], nullptr, 1.f, y, n, ctx_.stream.get()));
    }

    Facts facts() const override {
        return {{"algorithm", std::string("fused")},
                {"program", program_.summary()},
                {"images_per_block", int64_t(program_.tile.images)},
                {"threads_per_block", int64_t(program_.threads)}};
    }

private:
    Context& ctx_;
    fused::Program program_;
    DeviceMemory ops_;
    int shared_bytes_ = 0;
};

}  // namespace

std::optional<FusedLaunch> fused_launch_of(const Kernel& k) {
    if (const auto* fused = dynamic_cast<const FusedKernel*>(&k)) return fused->launch();
    return std::nullopt;
}

std::unique_ptr<Kernel> make_network_kernel(Context& ctx, const std::vector<Step>& steps,
                                            const std::vector<const StepConstants*>& constants, int capacity,
                                            std::string* why) {
    if (ctx.path == "library") {
        *why = "cuda_path='library'";
        return nullptr;
    }
    fused::Limits limits;
    limits.shared_bytes = ctx.shared_optin;
    limits.column_blocks = ctx.path == "fast";  // the verified paths keep the verified kernel
    if (ctx.path == "fused") {  // wherever it can run, whatever its speed
        limits.max_macs = std::numeric_limits<int64_t>::max();
        limits.max_weight_bytes = std::numeric_limits<int64_t>::max();
    }
    const int launch_rows = fused_launch_rows(ctx.path, capacity, steps.front().in.size());
    fused::Program program = fused::fused_plan(steps, launch_rows, 2 * ctx.sm_count, limits, why);
    if (program.ops.empty()) return nullptr;
    for (fused::Op& op : program.ops) {
        const auto& k = *static_cast<const DeviceConstants*>(constants.at(size_t(op.step)));
        op.weights = f(k.weights);
        op.bias = f(k.bias);
    }
    return std::make_unique<FusedKernel>(ctx, std::move(program));
}

}  // namespace lenet::cuda
