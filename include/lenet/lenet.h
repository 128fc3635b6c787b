// lenet's C++ API: the engine without Python. Installed by a CMake-only build (<prefix>/include,
// find_package(lenet) with <prefix> in CMAKE_PREFIX_PATH, or pkg-config's lenet) or with the
// Python package (`python -m lenet --cmake-dir` gives its CMake package); then
// target_link_libraries(app PRIVATE lenet::lenet). docs/cpp.md shows a whole program.
//
// Header-only, over the C ABI of liblenet.so.1 (lenet/lenet_c.h): everything here is
// compiled into your program, so that these types (EngineOptions, ImageShape, the
// exceptions) may grow from release to release while a program built against an earlier
// one still runs on the library of a later one.
//
// A model reaches C++ as lenet's own file (.lenet), written by Python after its Keras or
// ONNX reader has read and checked it: `lenet.Engine("lenet5").save("lenet5.lenet")` or
// `lenet-cli --weights FILE --save OUT.lenet` (lenet5's ships: share/lenet/lenet5.lenet). The format is versioned, bounded and
// checksummed (csrc/net/model_file.h).
//
// Errors are exceptions (lenet/errors.h): ModelFileError, UnsupportedModelError,
// InputError, CudaError, all lenet::Error, each with the message Python's class of the
// same name carries for the same failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "errors.h"
#include "lenet_c.h"

namespace lenet {

// The library's version, e.g. "0.1.0" (LENET_VERSION_STRING: these headers').
inline const char* version() { return lenet_version(); }

namespace detail {

// A failure of the C ABI as the exception of its class; nothing for success.
inline void check(lenet_error* error) {
    if (!error) return;
    const std::unique_ptr<lenet_error, void (*)(lenet_error*)> owned(error, lenet_error_free);
    std::string message = lenet_error_message(error);
    switch (lenet_error_status(error)) {
        case LENET_MODEL_FILE_ERROR: throw ModelFileError(message);
        case LENET_UNSUPPORTED_MODEL_ERROR: throw UnsupportedModelError(message);
        case LENET_INPUT_ERROR: throw InputError(message);
        case LENET_CUDA_ERROR: throw CudaError(message);
        default: throw Error(message);
    }
}

}  // namespace detail

// How an Engine runs. The defaults suit a program that classifies now and then.
struct EngineOptions {
    // Each value is checked when an Engine is made: InputError naming the option, the value
    // and the values it takes.
    // "cpu" or "cuda" (the GPU: the CUDA backend library, cuDNN and cuBLAS are loaded on
    // first use; CudaError naming what is missing where they or a GPU are not there).
    std::string device = "cpu";
    // CPU worker threads, 1..1024; 0: the CPUs this process may run on.
    int threads = 0;
    // "auto" (the best kernels this CPU runs, capped by $LENET_MAX_CPU_ISA where it is set),
    // "avx512", "avx2" or "generic" (a set this CPU runs: InputError listing them otherwise),
    // "blas" (im2col + OpenBLAS: the reference path) or "nchw" (the CUDA backend's layout and
    // algorithms on the CPU, to test the GPU path without a GPU).
    std::string cpu_kernels = "auto";
    // "exact" (every algorithm at least as close to a float64 evaluation as the direct kernels)
    // or "fast" (Winograd convolutions in float32: faster, several times further from it).
    // The CPU's; the GPU ignores it. Needs a library of ABI LENET_1.1 or later.
    std::string precision = "exact";
    // CUDA only, as Python's Engine takes them: TF32 tensor-core math, CUDA graphs, and
    // cuda_path "auto" (the faster of the fused whole-network kernel and cuDNN + cuBLAS, timed,
    // where the kernel can run the model), "fused" (the kernel wherever it can run), "library"
    // (cuDNN + cuBLAS) or "fast" (auto's kernels, the faster transfers) (docs/gpu.md).
    bool allow_tf32 = false;
    bool cuda_graphs = true;
    std::string cuda_path = "auto";
};

// How a model's images sit in its input.
enum class ImageLayout {
    none = LENET_LAYOUT_NONE,                      // the input is no image
    channels_last = LENET_LAYOUT_CHANNELS_LAST,    // (height, width, channels); flat and 2-D inputs too
    channels_first = LENET_LAYOUT_CHANNELS_FIRST,  // (channels, height, width)
};

// The image a model's input holds: what read_gray_png reads and predict_proba_pixels takes.
struct ImageShape {
    int height = 0, width = 0, channels = 0;
    ImageLayout layout = ImageLayout::none;
};

// A model ready to run. Immutable once made; every call may come from several threads
// at once. Movable, not copyable; a moved-from Engine holds no model, and any call on
// it is an Error saying so.
class Engine {
public:
    // Loads and checks the .lenet file at `model_path` (ModelFileError naming the file
    // and what is wrong; UnsupportedModelError for what the engine does not run).
    explicit Engine(const std::string& model_path, const EngineOptions& options = {}) {
        const Options o(options);
        detail::check(lenet_engine_load(model_path.c_str(), o.get(), &handle_));
    }
    // A .lenet file's bytes in memory (copied); `name` stands for the file in messages.
    static Engine from_memory(const void* data, size_t size, const std::string& name = "<memory>",
                              const EngineOptions& options = {}) {
        const Options o(options);
        Engine e;
        detail::check(lenet_engine_load_memory(data, size, name.c_str(), o.get(), &e.handle_));
        return e;
    }
    ~Engine() { lenet_engine_free(handle_); }
    Engine(Engine&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Engine& operator=(Engine&& other) noexcept {
        if (this != &other) {
            lenet_engine_free(handle_);
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Keras' per-input shape (no batch axis), e.g. {28, 28, 1}; input_size() floats per input.
    std::vector<int64_t> input_shape() const {
        const auto* e = get("input_shape");
        return shape(lenet_engine_input_shape(e), lenet_engine_input_rank(e));
    }
    int64_t input_size() const { return int64_t(lenet_engine_input_size(get("input_size"))); }
    // The output's per-input shape, e.g. {10}; output_size() floats per input.
    std::vector<int64_t> output_shape() const {
        const auto* e = get("output_shape");
        return shape(lenet_engine_output_shape(e), lenet_engine_output_rank(e));
    }
    int64_t output_size() const { return int64_t(lenet_engine_output_size(get("output_size"))); }
    // Values per input in the output: the classes of a classifier (output_size()).
    int64_t classes() const { return int64_t(lenet_engine_output_size(get("classes"))); }
    // The image the input holds; layout none (and zeros) for a flat input of a length
    // that is not a square.
    ImageShape image() const {
        const auto* e = get("image");
        return {lenet_engine_image_height(e), lenet_engine_image_width(e), lenet_engine_image_channels(e),
                ImageLayout(lenet_engine_image_layout(e))};
    }
    // What 0..255 pixels are multiplied by before the network (the model was trained so).
    float input_scale() const { return lenet_engine_input_scale(get("input_scale")); }
    // Then (x - mean[c]) / std[c] per channel c (one value: every channel), where the model
    // was trained on normalized pixels (PyTorch's Normalize); both empty where it was not.
    std::vector<double> mean() const {
        const auto* e = get("mean");
        const double* m = lenet_engine_mean(e);
        return std::vector<double>(m, m + lenet_engine_normalized(e));
    }
    std::vector<double> std_dev() const {
        const auto* e = get("std_dev");
        const double* s = lenet_engine_std(e);
        return std::vector<double>(s, s + lenet_engine_normalized(e));
    }
    // The model's name, and the file it was loaded from.
    std::string name() const { return lenet_engine_name(get("name")); }
    std::string source() const { return lenet_engine_source(get("source")); }
    // What the engine is, in lines of "key: value" (device, model, shapes, file format).
    std::string describe() const { return lenet_engine_describe(get("describe")); }

    // The model's outputs (Keras' predict) for n inputs: x holds n x input_size() floats
    // in the model's input shape, already prepared (pixels x input_scale(), then
    // normalized where mean() is not empty); n x output_size() floats back.
    std::vector<float> predict(const std::vector<float>& x) const {
        return run(lenet_engine_predict, "predict", x.data(), x.size());
    }
    // The same into your buffer: `values` floats at x, room for `capacity` at out
    // (InputError, nothing written, when it is too small).
    void predict(const float* x, size_t values, float* out, size_t capacity) const {
        detail::check(lenet_engine_predict(get("predict"), x, values, out, capacity));
    }
    // A distribution over the classes per input: the same numbers as Python's
    // Engine.predict_proba on the same values, to the bit.
    std::vector<float> predict_proba(const std::vector<float>& x) const {
        return run(lenet_engine_predict_proba, "predict_proba", x.data(), x.size());
    }
    void predict_proba(const float* x, size_t values, float* out, size_t capacity) const {
        detail::check(lenet_engine_predict_proba(get("predict_proba"), x, values, out, capacity));
    }
    // The same on 0..255 pixels (n x input_size() bytes, in the input's layout), prepared
    // in the core to the float32 values Python's infer prepares.
    std::vector<float> predict_proba_pixels(const std::vector<uint8_t>& pixels) const {
        return run(lenet_engine_predict_proba_pixels, "predict_proba_pixels", pixels.data(), pixels.size());
    }
    void predict_proba_pixels(const uint8_t* pixels, size_t values, float* out, size_t capacity) const {
        detail::check(lenet_engine_predict_proba_pixels(get("predict_proba_pixels"), pixels, values, out, capacity));
    }

    // The C handle, for code that calls the C ABI itself (null when moved from).
    const lenet_engine* handle() const { return handle_; }

private:
    // lenet_options made from EngineOptions, freed after the call, and when a setter throws
    // (held from its creation: a constructor that throws runs no destructor of its own).
    class Options {
    public:
        explicit Options(const EngineOptions& o) {
            lenet_options* created = nullptr;
            detail::check(lenet_options_create(&created));
            options_.reset(created);
            detail::check(lenet_options_set_device(get(), o.device.c_str()));
            detail::check(lenet_options_set_threads(get(), o.threads));
            detail::check(lenet_options_set_cpu_kernels(get(), o.cpu_kernels.c_str()));
            detail::check(lenet_options_set_precision(get(), o.precision.c_str()));
            detail::check(lenet_options_set_allow_tf32(get(), o.allow_tf32));
            detail::check(lenet_options_set_cuda_graphs(get(), o.cuda_graphs));
            detail::check(lenet_options_set_cuda_path(get(), o.cuda_path.c_str()));
        }
        lenet_options* get() const { return options_.get(); }

    private:
        std::unique_ptr<lenet_options, void (*)(lenet_options*)> options_{nullptr, lenet_options_free};
    };

    Engine() = default;

    const lenet_engine* get(const char* call) const {
        if (!handle_)
            throw Error(std::string("lenet::Engine::") + call + ": this Engine was moved from; it holds no model");
        return handle_;
    }
    static std::vector<int64_t> shape(const int64_t* dims, size_t rank) { return {dims, dims + rank}; }
    // A vector call: room for the outputs of the whole inputs in `values` (the call refuses the rest).
    template <class T, class Call>
    std::vector<float> run(Call call, const char* name, const T* x, size_t values) const {
        const auto* e = get(name);
        const size_t in = lenet_engine_input_size(e);
        std::vector<float> out(in ? values / in * lenet_engine_output_size(e) : 0);
        detail::check(call(e, x, values, out.data(), out.size()));
        return out;
    }

    lenet_engine* handle_ = nullptr;
};

// The core's PNG decoder (the one Python's lenet.infer uses for such files): the pixels,
// row by row, of an 8-bit grayscale, non-interlaced PNG of exactly height x width.
// InputError naming the file for anything else (another size, colour, a damaged file) or
// when this build has no PNG decoder (libpng was missing).
inline std::vector<uint8_t> read_gray_png(const std::string& path, int height, int width) {
    // Room only for a size the core takes: the call refuses any other, naming it.
    const bool in_range = height > 0 && width > 0 && height <= LENET_MAX_IMAGE_SIDE && width <= LENET_MAX_IMAGE_SIDE;
    std::vector<uint8_t> pixels(in_range ? size_t(height) * size_t(width) : 0);
    detail::check(lenet_read_gray_png(path.c_str(), height, width, pixels.data(), pixels.size()));
    return pixels;
}

// The same at the size of an engine's image (engine.image(); a gray PNG is one channel).
inline std::vector<uint8_t> read_gray_png(const std::string& path, const ImageShape& image) {
    return read_gray_png(path, image.height, image.width);
}

}  // namespace lenet
