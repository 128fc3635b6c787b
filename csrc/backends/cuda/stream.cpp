// A plan of layers' stream: the transfer of its input and answers (transfer.h), device
// input and output, and the CUDA graph of the whole forward pass (input copy, layers,
// output copy), captured on the first call and replayed after. Every copy runs on the
// engine's stream, never the legacy default stream (not ordered with it). uint8 pixels
// travel as bytes (a quarter of float32's) and are scaled on the device; each input
// kind has its own graph.
//
// Staged (the verified path): the host copies into pinned staging, the graph's copy
// nodes move it, the host synchronizes the stream. Mapped (cuda_path='fast', small
// batches; not run on a GPU yet): the host writes into mapped pinned memory, the graph's
// first kernel reads it from there and its last writes the answers there and raises a
// completion flag, on which the host spins.
#include <cstring>
#include <optional>

#include "elementwise.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

class GraphStream : public Stream {
public:
    GraphStream(Context& ctx, int capacity, int64_t input_size, int64_t output_size)
        : ctx_(ctx),
          capacity_(capacity),
          in_bytes_(size_t(input_size) * sizeof(float)),
          out_bytes_(size_t(output_size) * sizeof(float)),
          in_pixels_(size_t(input_size)),
          transfer_(choose_transfer({ctx.path, false, 1, capacity, input_size})),
          mapped_(transfer_.values == Transfer::mapped),
          pinned_in_(host_alloc(in_bytes_ * capacity)),
          pinned_pixels_(host_alloc(in_pixels_ * capacity)),
          pinned_out_(host_alloc(out_bytes_ * capacity)),
          dev_in_(device_alloc(in_bytes_ * capacity)),
          dev_pixels_(mapped_ ? DeviceMemory() : device_alloc(in_pixels_ * capacity)),
          dev_out_(device_alloc(out_bytes_ * capacity)),
          graphs_(ctx.graphs),
          why_(ctx.graphs ? "not run yet" : "CUDA graphs turned off (cuda_graphs=False)") {
        // Rows past a call's n are computed too: keep them finite.
        std::memset(pinned_in_.get(), 0, in_bytes_ * capacity);
        std::memset(pinned_pixels_.get(), 0, in_pixels_ * capacity);
        if (mapped_) {
            done_.emplace(ctx);
            in_at_ = device_pointer(pinned_in_);
            pixels_at_ = device_pointer(pinned_pixels_);
            out_at_ = device_pointer(pinned_out_);
        }
    }

    void forward(HostInput x, float* y, int n, const LayerWalk& layers) override {
        const Context::Use use(ctx_);
        const Kind kind = x.pixels ? Kind::pixels : Kind::values;
        if (x.pixels) {
            std::memcpy(pinned_pixels_.get(), x.pixels, in_pixels_ * n);
            if (x.scale != scale_) {
                scale_ = x.scale;
                exec_[int(Kind::pixels)].reset();  // the graph holds the scale: captured again
            }
        } else {
            std::memcpy(pinned_in_.get(), x.values, in_bytes_ * n);
        }
        cudaStream_t s = ctx_.stream.get();
        GraphExec& exec = exec_[int(kind)];
        if (!exec && graphs_) {
            enqueue(kind, layers);  // warm-up: first-touch costs stay out of the graph
            LENET_CHECK(cudaStreamSynchronize(s));
            capture(kind, layers);
        }
        if (mapped_) done_->next();  // the call's number, where the graph's last kernel reads it
        try {
            if (exec)
                LENET_CHECK(cudaGraphLaunch(exec.get(), s));
            else
                enqueue(kind, layers);
            if (mapped_)
                done_->wait(s);
            else
                LENET_CHECK(cudaStreamSynchronize(s));
        } catch (...) {
            drain();  // what was launched before the failure still reads and writes our buffers
            throw;
        }
        std::memcpy(y, pinned_out_.get(), out_bytes_ * n);
    }

    ~GraphStream() override { drain(); }  // nothing still running may touch the buffers freed here

    Facts facts() const override {
        const bool any = exec_[0] || exec_[1];
        return {{"execution", std::string(any       ? "graph"
                                          : graphs_ ? "pending"
                                                    : "eager")},
                {"why", why_},
                {"transfer", std::string(to_string(transfer_.values))},
                {"transfer_why", transfer_.why}};
    }

private:
    enum class Kind { values, pixels };

    void drain() noexcept { ignore_failure(cudaStreamSynchronize(ctx_.stream.get())); }

    PinnedMemory host_alloc(size_t bytes) const { return mapped_ ? mapped_alloc(bytes) : pinned_alloc(bytes); }

    void enqueue(Kind kind, const LayerWalk& layers) {
        cudaStream_t s = ctx_.stream.get();
        if (mapped_) {  // kernels read the input from mapped memory and write the answers there
            const int64_t count = int64_t(in_pixels_) * capacity_;
            if (kind == Kind::pixels)
                launch_scale_pixels(static_cast<const uint8_t*>(pixels_at_), f(dev_in_), count, scale_, s);
            else
                launch_copy(static_cast<const float*>(in_at_), f(dev_in_), count, s);
            LENET_CHECK(cudaGetLastError());
            layers(f(dev_in_), f(dev_out_), capacity_);
            launch_finish(f(dev_out_), static_cast<float*>(out_at_), int64_t(out_bytes_ / sizeof(float)) * capacity_,
                          done_->signal(), done_->request(), s);
            LENET_CHECK(cudaGetLastError());
            return;
        }
        if (kind == Kind::pixels) {
            const size_t bytes = in_pixels_ * capacity_;
            LENET_CHECK(cudaMemcpyAsync(dev_pixels_.get(), pinned_pixels_.get(), bytes, cudaMemcpyHostToDevice, s));
            launch_scale_pixels(static_cast<const uint8_t*>(dev_pixels_.get()), f(dev_in_), int64_t(bytes), scale_, s);
            LENET_CHECK(cudaGetLastError());
        } else {
            LENET_CHECK(
                cudaMemcpyAsync(dev_in_.get(), pinned_in_.get(), in_bytes_ * capacity_, cudaMemcpyHostToDevice, s));
        }
        layers(f(dev_in_), f(dev_out_), capacity_);
        LENET_CHECK(
            cudaMemcpyAsync(pinned_out_.get(), dev_out_.get(), out_bytes_ * capacity_, cudaMemcpyDeviceToHost, s));
    }

    // Records the forward pass into a graph. If this CUDA/cuDNN cannot capture it
    // (an uncapturable call, a driver that refuses), the plan runs eagerly from
    // then on, this call included, and facts() says why.
    void capture(Kind kind, const LayerWalk& layers) {
        cudaStream_t s = ctx_.stream.get();
        std::string failed;
        cudaGraph_t graph = nullptr;
        if (const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
            failed = "cudaStreamBeginCapture: " + error_text(e);
        } else {
            try {
                if (ctx_.capture_fault) LENET_CHECK(cudaStreamSynchronize(s));  // not allowed while capturing
                enqueue(kind, layers);
            } catch (const CudaError& e) {
                failed = e.what();
            }
            // Always ends the capture, so that the stream leaves capture mode.
            const cudaError_t end = cudaStreamEndCapture(s, &graph);
            if (failed.empty() && end != cudaSuccess) failed = "cudaStreamEndCapture: " + error_text(end);
        }
        GraphHandle owned(graph);
        if (failed.empty()) {
            cudaGraphExec_t exec = nullptr;
            if (const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
                failed = "cudaGraphInstantiate: " + error_text(e);
            else
                exec_[int(kind)].reset(exec);
        }
        if (!failed.empty()) {
            (void)cudaGetLastError();
            graphs_ = false;
            why_ = "graph capture failed, running eagerly: " + failed;
        } else {
            why_ = "captured on the first call, replayed since";
        }
    }

    Context& ctx_;
    const int capacity_;
    const size_t in_bytes_, out_bytes_, in_pixels_;  // per image
    const TransferPlan transfer_;
    const bool mapped_;  // transfer_ is mapped (else staged): the pinned buffers are mapped too
    PinnedMemory pinned_in_, pinned_pixels_, pinned_out_;
    std::optional<CompletionFlag> done_;  // mapped
    void *in_at_ = nullptr, *pixels_at_ = nullptr, *out_at_ = nullptr;  // their device addresses, when mapped
    DeviceMemory dev_in_, dev_pixels_, dev_out_;
    float scale_ = 1.f;
    GraphExec exec_[2];  // per Kind
    bool graphs_;  // still to try, or in use; false after a failed capture
    std::string why_;
};

}  // namespace

std::unique_ptr<Stream> make_graph_stream(Context& ctx, int capacity, int64_t input_size, int64_t output_size) {
    return std::make_unique<GraphStream>(ctx, capacity, input_size, output_size);
}

}  // namespace lenet::cuda
