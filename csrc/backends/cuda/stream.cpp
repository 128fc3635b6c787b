// A plan's stream: pinned staging, device input and output, and the CUDA graph of
// the whole forward pass (input copy, layers, output copy), captured on the first
// call and replayed after. Every copy runs on the engine's stream, never the legacy
// default stream (not ordered with it).
#include <cstring>

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
          pinned_in_(pinned_alloc(in_bytes_ * capacity)),
          pinned_out_(pinned_alloc(out_bytes_ * capacity)),
          dev_in_(device_alloc(in_bytes_ * capacity)),
          dev_out_(device_alloc(out_bytes_ * capacity)),
          graphs_(ctx.graphs),
          why_(ctx.graphs ? "not run yet" : "CUDA graphs turned off (cuda_graphs=False)") {
        // Rows past a call's n are computed too: keep them finite.
        std::memset(pinned_in_.get(), 0, in_bytes_ * capacity);
    }

    void forward(const float* x, float* y, int n, const LayerWalk& layers) override {
        std::lock_guard<std::mutex> lock(ctx_.mutex);
        std::memcpy(pinned_in_.get(), x, in_bytes_ * n);
        cudaStream_t s = ctx_.stream.get();
        if (!exec_ && graphs_) {
            enqueue(layers);  // warm-up: first-touch costs stay out of the graph
            LENET_CHECK(cudaStreamSynchronize(s));
            capture(layers);
        }
        if (exec_)
            LENET_CHECK(cudaGraphLaunch(exec_.get(), s));
        else
            enqueue(layers);
        LENET_CHECK(cudaStreamSynchronize(s));
        std::memcpy(y, pinned_out_.get(), out_bytes_ * n);
    }

    Facts facts() const override {
        return {{"execution", std::string(exec_ ? "graph" : graphs_ ? "pending" : "eager")}, {"why", why_}};
    }

private:
    void enqueue(const LayerWalk& layers) {
        cudaStream_t s = ctx_.stream.get();
        LENET_CHECK(cudaMemcpyAsync(dev_in_.get(), pinned_in_.get(), in_bytes_ * capacity_, cudaMemcpyHostToDevice, s));
        layers(f(dev_in_), f(dev_out_), capacity_);
        LENET_CHECK(
            cudaMemcpyAsync(pinned_out_.get(), dev_out_.get(), out_bytes_ * capacity_, cudaMemcpyDeviceToHost, s));
    }

    // Records the forward pass into a graph. If this CUDA/cuDNN cannot capture it
    // (an uncapturable call, a driver that refuses), the plan runs eagerly from
    // then on, this call included, and facts() says why.
    void capture(const LayerWalk& layers) {
        cudaStream_t s = ctx_.stream.get();
        std::string failed;
        cudaGraph_t graph = nullptr;
        if (const cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal); e != cudaSuccess) {
            failed = "cudaStreamBeginCapture: " + error_text(e);
        } else {
            try {
                if (ctx_.capture_fault) LENET_CHECK(cudaStreamSynchronize(s));  // not allowed while capturing
                enqueue(layers);
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
                exec_.reset(exec);
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
    const size_t in_bytes_, out_bytes_;
    PinnedMemory pinned_in_, pinned_out_;
    DeviceMemory dev_in_, dev_out_;
    GraphExec exec_;
    bool graphs_;  // still to try, or in use; false after a failed capture
    std::string why_;
};

}  // namespace

std::unique_ptr<Stream> make_graph_stream(Context& ctx, int capacity, int64_t input_size, int64_t output_size) {
    return std::make_unique<GraphStream>(ctx, capacity, input_size, output_size);
}

}  // namespace lenet::cuda
