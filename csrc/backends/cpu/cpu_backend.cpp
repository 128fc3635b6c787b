// The CPU backend: host memory, NHWC; direct kernels for the instruction set
// of this CPU (direct.h), OpenBLAS for large GEMMs and as the reference path,
// single-threaded inside each kernel. cpu_kernels="nchw" runs it in the CUDA
// backend's layout instead (nchw_kernels.cpp), to test the GPU path on a CPU. Parallelism comes from the executor
// running one plan per thread on its share of the batch, so BLAS threads and
// ours never multiply.
#include <cstdlib>
#include <mutex>
#include <new>

#include "../../support/errors.h"
#include "blas.h"
#include "cpu_backend.h"
#include "ops.h"

namespace lenet::cpu {
namespace {

// Largest batch one plan runs: keeps the activations of a plan within cache-sized
// buffers; bigger calls are run as several chunks.
constexpr int kMaxBatch = 64;

class HostStream : public Stream {
public:
    void forward(HostInput x, float* y, int n, const LayerWalk& layers) override { layers(x.values, y, n); }
};

class CpuBackend : public Backend {
public:
    explicit CpuBackend(const BackendOptions& options)
        : threads_(std::max(1, options.threads)),
          nchw_(options.cpu_kernels == "nchw"),
          exact_(options.precision != "fast"),
          table_(options.cpu_kernels == "blas" || nchw_ ? nullptr : table_named(options.cpu_kernels)),
          pool_table_(table_ ? table_ : supported_tables().front()) {
        // BLAS runs inside our own threads: one BLAS thread each.
        static std::once_flag once;
        std::call_once(once, [] { blas::set_threads(1); });
    }

    std::string name() const override { return "cpu"; }
    std::string description() const override {
        return "CPU, " + std::to_string(threads_) + " thread" + (threads_ > 1 ? "s" : "") + ", " +
               (nchw_    ? std::string("NCHW kernels (the CUDA backend's layout), ")
                : table_ ? std::string(table_->isa) + " kernels, "
                         : std::string("BLAS kernels, ")) +
               blas::config();
    }
    Layout layout() const override { return nchw_ ? Layout::nchw : Layout::nhwc; }
    int max_batch() const override { return kMaxBatch; }
    // Kernels run any n <= capacity: a few plans serve every batch size.
    int plan_capacity(int n) const override { return pow2_capacity(n, kMaxBatch); }
    int parallelism() const override { return threads_; }

    // Conv and dense weights packed once for the direct kernels; the BLAS path and
    // the grouped or dilated convolutions read the Step's canonical weights.
    std::shared_ptr<const StepConstants> prepare(const Step& s) override {
        if (nchw_) return prepare_nchw(s);
        if (!table_ || (s.op != OpKind::conv2d && s.op != OpKind::dense)) return nullptr;
        if (s.op == OpKind::conv2d && (s.groups != 1 || s.dh != 1 || s.dw != 1)) return nullptr;
        auto p = std::make_shared<PackedStep>();
        if (s.op == OpKind::conv2d && winograd_tile(s, exact_))
            p->winograd = pack_winograd(s, exact_);
        else if (s.op == OpKind::conv2d)
            p->packed = pack(s.weights, s.bias, s.kh, s.kw, s.in.c, s.out.c);
        else
            p->packed = pack(s.weights, s.bias, 1, 1, int(s.in.size()), s.out.c);
        return p;
    }

    std::unique_ptr<Kernel> kernel(const Step& step, const StepConstants* constants, int capacity) override {
        if (nchw_) return make_nchw_kernel(step, constants, capacity);
        const auto* packed_step = static_cast<const PackedStep*>(constants);
        if (packed_step && packed_step->winograd.alpha)
            return make_winograd_conv2d(step, nullptr, *table_, packed_step->winograd);
        const auto* packed = packed_step ? &packed_step->packed : nullptr;
        switch (step.op) {
            case OpKind::conv2d: return make_conv2d(step, table_, packed, capacity);
            case OpKind::dense: return make_dense(step, table_, packed);
            case OpKind::max_pool2d:
            case OpKind::avg_pool2d: return make_pool2d(step, *pool_table_);
            case OpKind::reshape:
            case OpKind::permute:
            case OpKind::concat:
            case OpKind::resize: return make_tensor_op(step);
            default: return make_elementwise(step);
        }
    }

    // A direct convolution swallows the 2x2 / 2 max pool that follows it (every
    // LeNet's pattern): the convolution's output is never written. The pool runs
    // before the activation, exact for a monotonic one.
    std::unique_ptr<Kernel> fused_kernel(const Step& step, const Step& next, const StepConstants* constants,
                                         int) override {
        const bool pool2x2 = next.op == OpKind::max_pool2d && next.kh == 2 && next.kw == 2 && next.sh == 2 &&
                             next.sw == 2 && !next.pad.top && !next.pad.bottom && !next.pad.left && !next.pad.right;
        if (!table_ || !constants || step.op != OpKind::conv2d || !pool2x2 || next.out.h < 1 || next.out.w < 1 ||
            !step.act.monotonic())
            return nullptr;
        const auto& packed = *static_cast<const PackedStep*>(constants);
        if (packed.winograd.alpha) return make_winograd_conv2d(step, &next, *table_, packed.winograd);
        return make_conv2d_pool(step, next, *table_, packed.packed);
    }

    void link(Kernel& producer, Kernel& consumer) override { link_planar(producer, consumer); }

    // With a vector of slack past the end: conv_rows_pool reads whole vectors past
    // a row's last column, which for a linked kernel's input may be the buffer's last.
    Buffer alloc(size_t floats) override {
        const size_t bytes = (((floats + kLanes) * sizeof(float) + 63) / 64) * 64;
        void* p = std::aligned_alloc(64, bytes ? bytes : 64);
        if (!p) throw std::bad_alloc();
        return Buffer(static_cast<float*>(p), [](float* q) { std::free(q); });
    }

    std::unique_ptr<Stream> stream(int, int64_t, int64_t) override { return std::make_unique<HostStream>(); }

private:
    int threads_;
    bool nchw_;                      // cpu_kernels="nchw"
    bool exact_;                     // precision="exact" (BackendOptions::precision)
    const KernelTable* table_;       // null: cpu_kernels="blas" or "nchw"
    const KernelTable* pool_table_;  // pooling has no BLAS form: the best table
};

}  // namespace

std::string blas_info() { return blas::config(); }

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
    return std::make_unique<CpuBackend>(options);
}

}  // namespace lenet::cpu
