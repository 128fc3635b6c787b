#include <chrono>
#include <cstring>
#include <thread>

#include "ops.h"

namespace lenet::cuda {

std::string error_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

DeviceMemory upload(Context& ctx, const std::vector<float>& host) {
    const size_t bytes = host.size() * sizeof(float);
    DeviceMemory d = device_alloc(bytes);
    PinnedMemory staging = pinned_alloc(bytes);
    std::memcpy(staging.get(), host.data(), bytes);
    LENET_CHECK(cudaMemcpyAsync(d.get(), staging.get(), bytes, cudaMemcpyHostToDevice, ctx.stream.get()));
    LENET_CHECK(cudaStreamSynchronize(ctx.stream.get()));  // before the staging buffer goes
    return d;
}

std::vector<float> download(Context& ctx, const float* device, size_t n) {
    PinnedMemory staging = pinned_alloc(n * sizeof(float));
    LENET_CHECK(cudaMemcpyAsync(staging.get(), device, n * sizeof(float), cudaMemcpyDeviceToHost, ctx.stream.get()));
    LENET_CHECK(cudaStreamSynchronize(ctx.stream.get()));
    const float* p = static_cast<const float*>(staging.get());
    return std::vector<float>(p, p + n);
}

CompletionFlag::CompletionFlag(Context& ctx) : arrived_(device_alloc(sizeof(unsigned))), words_(mapped_alloc(64)) {
    device_words_ = static_cast<unsigned*>(device_pointer(words_));
    std::memset(words_.get(), 0, words_.bytes());
    LENET_CHECK(cudaMemsetAsync(arrived_.get(), 0, sizeof(unsigned), ctx.stream.get()));
    LENET_CHECK(cudaStreamSynchronize(ctx.stream.get()));
}

Completion CompletionFlag::next() {
    if (++seq_ == 0) seq_ = 1;  // 0 is the flag before any call
    unsigned* host = static_cast<unsigned*>(words_.get());
    __atomic_store_n(host + 1, seq_, __ATOMIC_RELEASE);
    return signal();
}

void CompletionFlag::wait(cudaStream_t s) const {
    const auto* flag = static_cast<const uint32_t*>(words_.get());
    const auto start = std::chrono::steady_clock::now();
    wait_for_flag(
        [flag] { return read_flag(flag); }, seq_,
        [s](std::string* error) {
            const cudaError_t e = cudaStreamQuery(s);
            if (e == cudaErrorNotReady) {
                // "Not ready" is an answer, but the runtime may also leave it as this
                // thread's last error, where the next launch's cudaGetLastError check
                // would throw it: take it back off.
                if (cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
                return StreamState::running;
            }
            if (e == cudaSuccess) return StreamState::idle;
            (void)cudaGetLastError();
            *error = "cudaStreamQuery, waiting for a call's completion flag: " + error_text(e);
            return StreamState::failed;
        },
        [start] { return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count(); },
        [] { std::this_thread::yield(); });
}

void Prepad::init(Context& ctx, const StepPlan& p) {
    if (!p.padding.prepadded()) return;
    const Step& s = *p.step;
    const size_t floats = size_t(p.n) * s.in.c * (s.in.h + p.padding.prepad.top + p.padding.prepad.bottom) *
                          (s.in.w + p.padding.prepad.left + p.padding.prepad.right);
    buffer = device_alloc(floats * sizeof(float));
    LENET_CHECK(lib::cudnnSetTensor(ctx.cudnn.get(), p.padded.get(), buffer.get(), &p.pad_value));
}

const float* Prepad::apply(Context& ctx, const StepPlan& p, const float* x) {
    if (!p.padding.prepadded()) return x;
    const float one = 1.f, zero = 0.f;
    LENET_CHECK(lib::cudnnTransformTensor(ctx.cudnn.get(), &one, p.x.get(), x, &zero, p.padded_view.get(),
                                          f(buffer) + p.padded_offset));
    return f(buffer);
}

}  // namespace lenet::cuda
