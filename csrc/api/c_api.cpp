// The C ABI (include/lenet/lenet_c.h): the only symbols liblenet exports. Each call
// checks its arguments, runs the core, and turns whatever the core throws into a
// lenet_error of the same class and message: no exception crosses the boundary.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "../../include/lenet/lenet_c.h"
#include "../io/gray_png.h"
#include "../net/limits.h"
#include "../support/errors.h"
#include "../support/format.h"
#include "engine.h"

static_assert(LENET_MAX_IMAGE_SIDE == lenet::limits::kDim, "the C header's image limit is the core's");

struct lenet_error {
    lenet_status status;
    std::string message;
};

struct lenet_options {
    lenet::api::ExecutorOptions options;
};

struct lenet_engine {
    lenet::api::Engine engine;
    std::vector<int64_t> input_shape, output_shape;
};

namespace {

using namespace lenet;

// What a failure allocates cannot itself fail: memory running out is this one error,
// never freed.
lenet_error out_of_memory{LENET_ERROR, "out of memory"};

lenet_error* error(lenet_status status, const char* message) {
    try {
        return new lenet_error{status, message};
    } catch (...) {
        return &out_of_memory;
    }
}

// Runs `body`, the exception it throws made a lenet_error of its class.
template <class Body>
lenet_error* guarded(Body&& body) {
    try {
        body();
        return nullptr;
    } catch (const ModelFileError& e) {
        return error(LENET_MODEL_FILE_ERROR, e.what());
    } catch (const UnsupportedModelError& e) {
        return error(LENET_UNSUPPORTED_MODEL_ERROR, e.what());
    } catch (const InputError& e) {
        return error(LENET_INPUT_ERROR, e.what());
    } catch (const CudaError& e) {
        return error(LENET_CUDA_ERROR, e.what());
    } catch (const std::bad_alloc&) {
        return &out_of_memory;
    } catch (const std::exception& e) {
        return error(LENET_ERROR, e.what());
    } catch (...) {
        return error(LENET_ERROR, "an unknown exception in lenet");
    }
}

// A pointer the caller must give: InputError naming the call and the argument.
template <class T>
T* given(T* p, const char* call, const char* what) {
    if (!p) throw InputError(std::string(call) + ": " + what + " is NULL");
    return p;
}

std::string text(const char* s, const char* call, const char* what) { return given(s, call, what); }

// How many inputs `values` numbers hold, checked against the buffers: InputError naming
// the call, nothing written.
int64_t inputs_in(const lenet_engine* e, const void* x, size_t values, const float* out, size_t capacity,
                  const char* call) {
    given(e, call, "the engine");
    const int64_t per_input = e->engine.input_size(), per_output = e->engine.output_size();
    if (per_input <= 0 || values % size_t(per_input) != 0)
        throw InputError(std::string(call) + ": expected a multiple of " + number_str(per_input) +
                         " values (inputs of shape " + tuple_str(e->input_shape) + "), got " + number_str(values));
    const int64_t n = int64_t(values / size_t(per_input));
    if (capacity / size_t(per_output) < size_t(n))
        throw InputError(std::string(call) + ": room for " + number_str(capacity) + " floats, and " + number_str(n) +
                         (n == 1 ? " input gives " : " inputs give ") + number_str(n * per_output));
    if (n > 0) {
        given(x, call, "the input");
        given(out, call, "the output");
    }
    return n;
}

// What a PNG's header says it holds ("a PNG of 32 x 32 (8-bit gray)", height x width), for a message on a PNG
// the decoder does not take; "" for what is no PNG.
std::string png_header_str(const std::string& data) {
    static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (data.size() < 29 || std::memcmp(data.data(), kSignature, 8) != 0 || data.compare(12, 4, "IHDR") != 0) return "";
    const auto be32 = [&](size_t at) {
        uint32_t v = 0;
        for (size_t i = 0; i < 4; ++i) v = v << 8 | uint8_t(data[at + i]);
        return v;
    };
    const int depth = uint8_t(data[24]), colour = uint8_t(data[25]), interlace = uint8_t(data[28]);
    const char* kind = colour == 0   ? "gray"
                       : colour == 2 ? "RGB"
                       : colour == 3 ? "palette"
                       : colour == 4 ? "gray + alpha"
                       : colour == 6 ? "RGBA"
                                     : "unknown colour type";
    return "a PNG of " + number_str(be32(20)) + " x " + number_str(be32(16)) + " (" + number_str(depth) + "-bit " +
           kind + (interlace ? ", interlaced" : "") + ")";
}

lenet_engine* engine_of(ModelFile file, const std::string& source, const lenet_options* options) {
    const api::ExecutorOptions o = options ? options->options : api::ExecutorOptions{};
    auto* e = new lenet_engine{api::Engine(std::move(file), source, o), {}, {}};
    e->input_shape = e->engine.network().input_shape();
    e->output_shape = e->engine.network().output_shape();
    return e;
}

}  // namespace

extern "C" {

lenet_status lenet_error_status(const lenet_error* error) { return error ? error->status : LENET_OK; }
const char* lenet_error_message(const lenet_error* error) { return error ? error->message.c_str() : ""; }
void lenet_error_free(lenet_error* error) {
    if (error != &out_of_memory) delete error;
}

const char* lenet_version(void) { return LENET_VERSION_STRING; }

lenet_error* lenet_options_create(lenet_options** out) {
    return guarded([&] {
        // out checked before anything is allocated (in `*given(out) = new ...`, C++17 makes
        // the new first: a NULL out leaked it).
        lenet_options** where = given(out, "lenet_options_create", "out");
        *where = nullptr;
        *where = new lenet_options{};
    });
}
void lenet_options_free(lenet_options* options) { delete options; }

lenet_error* lenet_options_set_device(lenet_options* o, const char* device) {
    return guarded([&] {
        const char* call = "lenet_options_set_device";
        auto& options = given(o, call, "options")->options;
        std::string value = text(device, call, "the device");
        api::check_device(value);
        options.device = std::move(value);
    });
}
lenet_error* lenet_options_set_threads(lenet_options* o, int threads) {
    return guarded([&] {
        api::check_threads(threads);
        given(o, "lenet_options_set_threads", "options")->options.threads = threads;
    });
}
lenet_error* lenet_options_set_cpu_kernels(lenet_options* o, const char* kernels) {
    return guarded([&] {
        const char* call = "lenet_options_set_cpu_kernels";
        auto& options = given(o, call, "options")->options;
        std::string value = text(kernels, call, "the kernels");
        api::check_cpu_kernels(value);
        options.cpu_kernels = std::move(value);
    });
}
lenet_error* lenet_options_set_precision(lenet_options* o, const char* precision) {
    return guarded([&] {
        const char* call = "lenet_options_set_precision";
        auto& options = given(o, call, "options")->options;
        std::string value = text(precision, call, "the precision");
        api::check_precision(value);
        options.precision = std::move(value);
    });
}
lenet_error* lenet_options_set_allow_tf32(lenet_options* o, int allow) {
    return guarded([&] { given(o, "lenet_options_set_allow_tf32", "options")->options.allow_tf32 = allow != 0; });
}
lenet_error* lenet_options_set_cuda_graphs(lenet_options* o, int graphs) {
    return guarded([&] { given(o, "lenet_options_set_cuda_graphs", "options")->options.cuda_graphs = graphs != 0; });
}
lenet_error* lenet_options_set_cuda_path(lenet_options* o, const char* path) {
    return guarded([&] {
        const char* call = "lenet_options_set_cuda_path";
        auto& options = given(o, call, "options")->options;
        std::string value = text(path, call, "the path");
        api::check_cuda_path(value);
        options.cuda_path = std::move(value);
    });
}

lenet_error* lenet_engine_load(const char* path, const lenet_options* options, lenet_engine** out) {
    return guarded([&] {
        const char* call = "lenet_engine_load";
        given(out, call, "out");
        *out = nullptr;
        const std::string source = text(path, call, "the path");
        *out = engine_of(model_file_read(source), source, options);
    });
}

lenet_error* lenet_engine_load_memory(const void* data, size_t size, const char* name, const lenet_options* options,
                                      lenet_engine** out) {
    return guarded([&] {
        const char* call = "lenet_engine_load_memory";
        given(out, call, "out");
        *out = nullptr;
        if (size) given(data, call, "the data");
        const std::string source = name ? name : "<memory>";
        *out = engine_of(model_file_parse(std::string_view(static_cast<const char*>(data), size), source), source,
                         options);
    });
}

void lenet_engine_free(lenet_engine* engine) { delete engine; }

// Accessors cannot fail but on a NULL engine, where they give 0, NULL or "".
size_t lenet_engine_input_rank(const lenet_engine* e) { return e ? e->input_shape.size() : 0; }
const int64_t* lenet_engine_input_shape(const lenet_engine* e) { return e ? e->input_shape.data() : nullptr; }
size_t lenet_engine_input_size(const lenet_engine* e) { return e ? size_t(e->engine.input_size()) : 0; }
size_t lenet_engine_output_rank(const lenet_engine* e) { return e ? e->output_shape.size() : 0; }
const int64_t* lenet_engine_output_shape(const lenet_engine* e) { return e ? e->output_shape.data() : nullptr; }
size_t lenet_engine_output_size(const lenet_engine* e) { return e ? size_t(e->engine.output_size()) : 0; }
int lenet_engine_image_height(const lenet_engine* e) { return e ? int(e->engine.network().image().height) : 0; }
int lenet_engine_image_width(const lenet_engine* e) { return e ? int(e->engine.network().image().width) : 0; }
int lenet_engine_image_channels(const lenet_engine* e) { return e ? int(e->engine.network().image().channels) : 0; }
lenet_layout lenet_engine_image_layout(const lenet_engine* e) {
    if (!e || !e->engine.network().image().channels) return LENET_LAYOUT_NONE;
    return e->engine.network().image().channels_first ? LENET_LAYOUT_CHANNELS_FIRST : LENET_LAYOUT_CHANNELS_LAST;
}
float lenet_engine_input_scale(const lenet_engine* e) { return e ? e->engine.input_scale() : 0.f; }
size_t lenet_engine_normalized(const lenet_engine* e) { return e ? e->engine.mean().size() : 0; }
const double* lenet_engine_mean(const lenet_engine* e) {
    return e && !e->engine.mean().empty() ? e->engine.mean().data() : nullptr;
}
const double* lenet_engine_std(const lenet_engine* e) {
    return e && !e->engine.std_dev().empty() ? e->engine.std_dev().data() : nullptr;
}
const char* lenet_engine_name(const lenet_engine* e) { return e ? e->engine.name().c_str() : ""; }
const char* lenet_engine_source(const lenet_engine* e) { return e ? e->engine.source().c_str() : ""; }
const char* lenet_engine_describe(const lenet_engine* e) { return e ? e->engine.describe().c_str() : ""; }

lenet_error* lenet_engine_predict(const lenet_engine* e, const float* x, size_t values, float* out, size_t capacity) {
    return guarded([&] {
        const int64_t n = inputs_in(e, x, values, out, capacity, "predict");
        e->engine.run(x, n, out, Executor::Output::raw);
    });
}

lenet_error* lenet_engine_predict_proba(const lenet_engine* e, const float* x, size_t values, float* out,
                                        size_t capacity) {
    return guarded([&] {
        const int64_t n = inputs_in(e, x, values, out, capacity, "predict_proba");
        e->engine.run(x, n, out, Executor::Output::probabilities);
    });
}

lenet_error* lenet_engine_predict_proba_pixels(const lenet_engine* e, const uint8_t* pixels, size_t values, float* out,
                                               size_t capacity) {
    return guarded([&] {
        const int64_t n = inputs_in(e, pixels, values, out, capacity, "predict_proba_pixels");
        e->engine.run_pixels(pixels, n, out);
    });
}

lenet_error* lenet_read_gray_png(const char* path_, int height, int width, uint8_t* out, size_t capacity) {
    return guarded([&] {
        const std::string path = text(path_, "lenet_read_gray_png", "the path");
        if (gray_png_decoder().empty())
            throw InputError(path +
                             ": this build of lenet has no PNG decoder of its own (libpng was not found when it "
                             "was built)");
        if (height < 1 || width < 1 || height > limits::kDim || width > limits::kDim)
            throw InputError(path + ": an image size of " + number_str(height) + " x " + number_str(width) +
                             " is out of range");
        if (capacity < size_t(height) * size_t(width))
            throw InputError(path + ": room for " + number_str(capacity) + " pixels, and the image has " +
                             number_str(int64_t(height) * width));
        given(out, "lenet_read_gray_png", "the output");
        std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
        if (!f) throw InputError(path + ": cannot open the image file (" + std::strerror(errno) + ")");
        std::string data;
        char buf[1 << 16];
        for (size_t got; (got = std::fread(buf, 1, sizeof buf, f.get())) > 0;) {
            data.append(buf, got);
            if (data.size() > (size_t(1) << 26)) throw InputError(path + ": larger than 64 MiB, not a small PNG");
        }
        if (!decode_gray_png(data, height, width, out)) {
            const std::string found = png_header_str(data);
            throw InputError(path + ": " + (found.empty() ? "" : found + ", ") + "not an 8-bit grayscale PNG of " +
                             number_str(height) + " x " + number_str(width) +
                             " (the core's decoder reads only those; Python's lenet.infer reads any image)");
        }
    });
}

}  // extern "C"
