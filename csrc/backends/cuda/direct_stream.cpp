// The fused kernel's stream on cuda_path='fast' (transfer.h): no CUDA graph (a graph of
// one kernel saves nothing); the stream launches the kernel itself, with the transfer
// its plan chose for the kind of input: the input as the launch's parameter or read
// from mapped memory, the answers written to mapped memory and a completion flag the
// host spins on; or, for a large batch, chunks over several streams, the host's copies
// (over several threads, checking the values as they go) overlapping the GPU's work.
// None of it has run on a GPU yet (docs/gpu.md).
#include <algorithm>
#include <cstring>

#include "../../support/finite.h"
#include "fused.cuh"
#include "ops.h"

namespace lenet::cuda {
namespace {

constexpr int kStreams = 2;  // chunked: one uploads while the other computes

class DirectStream : public Stream {
public:
    DirectStream(Context& ctx, const FusedLaunch& fused, int capacity, int64_t input_size, int64_t output_size)
        : ctx_(ctx),
          fused_(fused),
          capacity_(capacity),
          in_size_(input_size),
          out_size_(output_size),
          transfer_(choose_transfer({ctx.path, true, fused.tile.images, capacity, input_size, kStreams})),
          done_(ctx),
          mapped_out_(mapped_alloc(size_t(output_size) * sizeof(float) * capacity)),
          out_at_(static_cast<float*>(device_pointer(mapped_out_))) {
        size_t mapped = 0, staged = 0;
        int chunks = 0;
        for (const bool pixels : {false, true}) {
            const size_t row = row_bytes(pixels), batch = row * size_t(capacity);
            const Transfer t = pixels ? transfer_.pixels : transfer_.values;
            if (t == Transfer::mapped) mapped = std::max(mapped, batch);
            if (t == Transfer::chunked) {
                staged = std::max(staged, batch);
                const int rows = chunk_rows(capacity, int64_t(row));
                chunks = std::max(chunks, (capacity + rows - 1) / rows);
            }
        }
        if (mapped) {
            mapped_in_ = mapped_alloc(mapped);
            in_at_ = device_pointer(mapped_in_);
        }
        if (staged) {
            pinned_in_ = pinned_alloc(staged);
            dev_in_ = device_alloc(staged);
            for (StreamHandle& s : streams_) {
                cudaStream_t created = nullptr;
                LENET_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
                s.reset(created);
            }
            events_.resize(size_t(chunks));
            for (EventHandle& e : events_) {
                cudaEvent_t created = nullptr;
                LENET_CHECK(cudaEventCreateWithFlags(&created, cudaEventDisableTiming));
                e.reset(created);
            }
        }
    }

    ~DirectStream() override { drain(); }  // nothing of ours may still be read or written

    bool checks_values() const override { return true; }

    void forward(HostInput x, float* y, int n, const LayerWalk&) override {
        const Context::Use use(ctx_);
        if (ctx_.poison_output) {  // tests: a call that returned before its answers were written returns NaN
            std::memset(mapped_out_.get(), 0xff, size_t(out_size_) * sizeof(float) * n);
            std::memset(y, 0xff, size_t(out_size_) * sizeof(float) * n);
        }
        const bool pixels = x.pixels != nullptr;
        const Transfer t = pixels ? transfer_.pixels : transfer_.values;
        if (t == Transfer::chunked) return chunked(x, y, n);
        const size_t bytes = row_bytes(pixels) * size_t(n);
        const void* src = pixels ? static_cast<const void*>(x.pixels) : x.values;
        if (!pixels)
            if (const int64_t bad = first_non_finite(x.values, n, in_size_); bad >= 0) throw NonFiniteInput{bad};
        cudaStream_t s = ctx_.stream.get();
        const Completion c = done_.next();
        const FusedLaunch& k = fused_;
        if (t == Transfer::parameter) {
            std::memcpy(blob_, src, bytes);
            LENET_CHECK(fused::launch_parameter(k.ops, k.op_count, k.tile, k.threads, k.shared_bytes, blob_,
                                                parameter_blob(int64_t(bytes)), pixels, x.scale, out_at_, n, s, c));
        } else {
            // A caller's mapped buffer (Engine.input_buffer) is read where it is.
            const void* in = find_host_buffer(src, bytes);
            if (!in) {
                std::memcpy(mapped_in_.get(), src, bytes);
                in = in_at_;
            }
            LENET_CHECK(fused::launch(k.ops, k.op_count, k.tile, k.threads, k.shared_bytes,
                                      pixels ? nullptr : static_cast<const float*>(in),
                                      pixels ? static_cast<const uint8_t*>(in) : nullptr, x.scale, out_at_, n, s, c));
        }
        done_.wait(s);
        std::memcpy(y, mapped_out_.get(), size_t(out_size_) * sizeof(float) * n);
    }

    Facts facts() const override {
        const std::string t =
            transfer_.values == transfer_.pixels
                ? to_string(transfer_.values)
                : std::string("float32 ") + to_string(transfer_.values) + ", uint8 " + to_string(transfer_.pixels);
        return {{"execution", std::string("launch")},
                {"why", std::string("cuda_path='fast': the fused kernel launched by the stream, no graph (one kernel: "
                                    "a graph saves nothing)")},
                {"transfer", t},
                {"transfer_why", transfer_.why}};
    }

private:
    size_t row_bytes(bool pixels) const { return size_t(in_size_) * (pixels ? 1 : sizeof(float)); }

    // Chunk by chunk: the host copies (and checks) chunk k over the copy threads while
    // the GPU uploads and runs the chunks before it on the other stream; chunk k's
    // answers are copied out once its event has passed.
    void chunked(HostInput x, float* y, int n) {
        const bool pixels = x.pixels != nullptr;
        const size_t row = row_bytes(pixels);
        const std::vector<Chunk> chunks = chunk_schedule(n, chunk_rows(capacity_, int64_t(row)), kStreams);
        const char* src = pixels ? reinterpret_cast<const char*>(x.pixels) : reinterpret_cast<const char*>(x.values);
        // A caller's pinned buffer is uploaded from where it is: checked, never copied.
        const bool in_place = find_host_buffer(src, row * size_t(n)) != nullptr;
        char* staging = static_cast<char*>(pinned_in_.get());
        char* device = static_cast<char*>(dev_in_.get());
        const FusedLaunch& k = fused_;
        size_t queued = 0;
        int64_t bad = -1;
        try {
            for (; queued < chunks.size(); ++queued) {
                const Chunk& c = chunks[queued];
                const size_t at = size_t(c.first) * row, bytes = size_t(c.count) * row;
                bad = copy_rows(ctx_.copy_pool(), in_place ? nullptr : staging + at, src + at, c.count, row,
                                pixels ? 0 : in_size_);
                if (bad >= 0) {
                    bad += c.first;
                    break;
                }
                cudaStream_t s = streams_[size_t(c.stream)].get();
                LENET_CHECK(
                    cudaMemcpyAsync(device + at, in_place ? src + at : staging + at, bytes, cudaMemcpyHostToDevice, s));
                LENET_CHECK(fused::launch(k.ops, k.op_count, k.tile, k.threads, k.shared_bytes,
                                          pixels ? nullptr : reinterpret_cast<const float*>(device + at),
                                          pixels ? reinterpret_cast<const uint8_t*>(device + at) : nullptr, x.scale,
                                          out_at_ + int64_t(c.first) * out_size_, c.count, s));
                LENET_CHECK(cudaEventRecord(events_[queued].get(), s));
            }
            const float* answers = static_cast<const float*>(mapped_out_.get());
            for (size_t i = 0; i < queued; ++i) {  // also after bad input: the staging is read until then
                LENET_CHECK(cudaEventSynchronize(events_[i].get()));
                const int64_t at = int64_t(chunks[i].first) * out_size_;
                if (bad < 0) std::memcpy(y + at, answers + at, size_t(chunks[i].count * out_size_) * sizeof(float));
            }
        } catch (...) {
            drain();
            throw;
        }
        if (bad >= 0) throw NonFiniteInput{bad};
    }

    void drain() noexcept {
        ignore_failure(cudaStreamSynchronize(ctx_.stream.get()));
        for (StreamHandle& s : streams_)
            if (s) ignore_failure(cudaStreamSynchronize(s.get()));
    }

    Context& ctx_;
    const FusedLaunch fused_;
    const int capacity_;
    const int64_t in_size_, out_size_;  // values per image
    const TransferPlan transfer_;
    CompletionFlag done_;
    PinnedMemory mapped_out_;  // every transfer: the kernel writes the answers here
    float* out_at_ = nullptr;  // its device address
    PinnedMemory mapped_in_;   // mapped
    const void* in_at_ = nullptr;
    PinnedMemory pinned_in_;  // chunked: staging, and its copy on the device
    DeviceMemory dev_in_;
    StreamHandle streams_[kStreams];
    std::vector<EventHandle> events_;  // one per chunk
    alignas(16) unsigned char blob_[kParameterBlobs[2]];  // parameter: the launch copies it
};

}  // namespace

std::unique_ptr<Stream> make_direct_stream(Context& ctx, const FusedLaunch& fused, int capacity, int64_t input_size,
                                           int64_t output_size) {
    return std::make_unique<DirectStream>(ctx, fused, capacity, input_size, output_size);
}

}  // namespace lenet::cuda
