// The public C++ API (include/lenet/lenet.h) on the core: a .lenet file read
// (net/model_file.h) into a Network, run by an Executor on a registered backend.
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "../../include/lenet/lenet.h"
#include "../io/gray_png.h"
#include "../net/limits.h"
#include "../net/model_file.h"
#include "../support/format.h"
#include "executor_options.h"

namespace lenet {

const char* version() { return LENET_VERSION; }

namespace api {

std::unique_ptr<Executor> executor_open(std::shared_ptr<const Network> network, const EngineOptions& options) {
    if (options.threads < 1 || options.threads > 1024)
        throw InputError("threads must be an integer in [1, 1024], got " + number_str(options.threads));
    const auto& path = options.cuda_path;
    if (path != "auto" && path != "fused" && path != "library")
        throw InputError("cuda_path must be 'auto', 'fused' or 'library', not '" + path + "'");
    BackendOptions b;
    b.threads = options.threads;
    b.allow_tf32 = options.allow_tf32;
    b.cuda_graphs = options.cuda_graphs;
    b.cpu_kernels = options.cpu_kernels;
    b.cuda_path = path;
    return std::make_unique<Executor>(std::move(network), make_backend(options.device, b), options.threads);
}

}  // namespace api

namespace {

// The CPUs this process may run on (its affinity mask), as Python's default_threads().
int available_cpus() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    const unsigned n = std::thread::hardware_concurrency();
    return n ? int(n) : 1;
}

}  // namespace

struct Engine::Impl {
    std::unique_ptr<Executor> executor;
    float input_scale = 1.f;
    std::vector<double> mean, std_dev;
    // A normalized model's input per pixel value and channel (256 x channels), computed as
    // Python's Preprocessing.table computes it; empty for a model that is not normalized.
    std::vector<float> table;
    int64_t channels = 1;
    bool channels_first = false;  // each channel's values one run of input_size / channels
    std::string name, source;
    int64_t input_size = 0, classes = 0;

    void normalize(const std::string& path) {
        const auto& shape = executor->network().input_shape();
        if (shape.size() == 3) {
            channels_first = executor->network().channels_first();
            channels = channels_first ? shape[0] : shape[2];
        }
        if (mean.size() != 1 && int64_t(mean.size()) != channels)
            throw ModelFileError(path + ": a normalization for " + number_str(mean.size()) +
                                 " channels, but the model's input " + tuple_str(shape) + " has " +
                                 number_str(channels));
        table.resize(size_t(256 * channels));
        for (int v = 0; v < 256; ++v)
            for (int64_t c = 0; c < channels; ++c) {
                const size_t k = mean.size() == 1 ? 0 : size_t(c);
                table[size_t(v * channels + c)] = prepared_pixel(v, input_scale, float(mean[k]), float(std_dev[k]));
            }
    }
};

Engine::Engine(const std::string& model_path, const EngineOptions& options) : impl_(std::make_unique<Impl>()) {
    ModelFile file = model_file_read(model_path);
    auto network = std::make_shared<const Network>(std::move(file.layers), file.input, model_path);
    EngineOptions o = options;
    if (o.threads == 0) o.threads = std::min(available_cpus(), 1024);
    impl_->executor = api::executor_open(network, o);
    impl_->input_scale = float(file.input_scale);
    impl_->mean = std::move(file.mean);
    impl_->std_dev = std::move(file.std_dev);
    if (!impl_->mean.empty()) impl_->normalize(model_path);
    impl_->name = std::move(file.name);
    impl_->source = model_path;
    impl_->input_size = network->input().d.size();
    impl_->classes = network->output_size();
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

const std::vector<int64_t>& Engine::input_shape() const { return impl_->executor->network().input_shape(); }
int64_t Engine::input_size() const { return impl_->input_size; }
int64_t Engine::classes() const { return impl_->classes; }
float Engine::input_scale() const { return impl_->input_scale; }
const std::vector<double>& Engine::mean() const { return impl_->mean; }
const std::vector<double>& Engine::std_dev() const { return impl_->std_dev; }
const std::string& Engine::name() const { return impl_->name; }
const std::string& Engine::source() const { return impl_->source; }

void Engine::predict_proba(const float* x, int64_t n, float* probs) const {
    if (n < 0) throw InputError("predict_proba: a negative number of inputs (" + number_str(n) + ")");
    impl_->executor->run(x, probs, n, Executor::Output::probabilities);
}

namespace {

// How many inputs `values` numbers hold, or InputError.
int64_t inputs_in(size_t values, int64_t per_input, const std::vector<int64_t>& shape, const char* what) {
    if (per_input <= 0 || values % size_t(per_input) != 0)
        throw InputError(std::string(what) + ": expected a multiple of " + number_str(per_input) +
                         " values (inputs of shape " + tuple_str(shape) + "), got " + number_str(values));
    return int64_t(values / size_t(per_input));
}

}  // namespace

std::vector<float> Engine::predict_proba(const std::vector<float>& x) const {
    const int64_t n = inputs_in(x.size(), impl_->input_size, input_shape(), "predict_proba");
    std::vector<float> probs(size_t(n * impl_->classes));
    predict_proba(x.data(), n, probs.data());
    return probs;
}

std::vector<float> Engine::predict_proba_pixels(const std::vector<uint8_t>& pixels) const {
    const int64_t n = inputs_in(pixels.size(), impl_->input_size, input_shape(), "predict_proba_pixels");
    std::vector<float> probs(size_t(n * impl_->classes));
    if (impl_->table.empty()) {
        impl_->executor->run(Executor::Input{nullptr, pixels.data(), impl_->input_scale}, probs.data(), n,
                             Executor::Output::probabilities);
        return probs;
    }
    const int64_t size = impl_->input_size, channels = impl_->channels, run = size / channels;
    std::vector<float> x(pixels.size());
    for (size_t i = 0; i < pixels.size(); ++i) {
        const int64_t at = int64_t(i) % size, c = impl_->channels_first ? at / run : at % channels;
        x[i] = impl_->table[size_t(pixels[i] * channels + c)];
    }
    predict_proba(x.data(), n, probs.data());
    return probs;
}

std::vector<uint8_t> read_gray_png(const std::string& path, int height, int width) {
    if (gray_png_decoder().empty())
        throw InputError(path +
                         ": this build of lenet has no PNG decoder of its own (libpng was not found when it "
                         "was built)");
    if (height < 1 || width < 1 || height > limits::kDim || width > limits::kDim)
        throw InputError(path + ": an image size of " + number_str(height) + " x " + number_str(width) +
                         " is out of range");
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    if (!f) throw InputError(path + ": cannot open the image file (" + std::strerror(errno) + ")");
    std::string data;
    char buf[1 << 16];
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, f.get())) > 0;) {
        data.append(buf, got);
        if (data.size() > (size_t(1) << 26)) throw InputError(path + ": larger than 64 MiB, not a small PNG");
    }
    std::vector<uint8_t> pixels(size_t(height) * size_t(width));
    if (!decode_gray_png(data, height, width, pixels.data()))
        throw InputError(path + ": not an 8-bit grayscale PNG of " + number_str(height) + " x " + number_str(width) +
                         " (the core's decoder reads only those; Python's lenet.infer reads any image)");
    return pixels;
}

}  // namespace lenet
