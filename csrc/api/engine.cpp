// The engine behind the C ABI (engine.h).
#include "engine.h"

#include "../support/errors.h"
#include "../support/format.h"

namespace lenet::api {

Engine::Engine(ModelFile file, const std::string& source, const ExecutorOptions& options)
    : input_scale_(float(file.input_scale)),
      mean_(std::move(file.mean)),
      std_dev_(std::move(file.std_dev)),
      name_(std::move(file.name)),
      source_(source) {
    auto network = std::make_shared<const Network>(std::move(file.layers), file.input, source);
    executor_ = executor_open(network, options);
    input_size_ = network->input().d.size();
    output_size_ = network->output_size();
    const ImageShape& image = network->image();
    if (!mean_.empty()) {
        channels_ = image.channels ? image.channels : 1;
        channels_first_ = image.channels_first;
        if (mean_.size() != 1 && int64_t(mean_.size()) != channels_)
            throw ModelFileError(source + ": a normalization for " + number_str(mean_.size()) +
                                 " channels, but the model's input " + tuple_str(network->input_shape()) + " has " +
                                 number_str(channels_));
        table_.resize(size_t(256 * channels_));
        for (int v = 0; v < 256; ++v)
            for (int64_t c = 0; c < channels_; ++c) {
                const size_t k = mean_.size() == 1 ? 0 : size_t(c);
                table_[size_t(v * channels_ + c)] =
                    prepared_pixel(v, input_scale_, float(mean_[k]), float(std_dev_[k]));
            }
    }
    std::string pixels = "x * " + number_str(input_scale_);
    if (!mean_.empty()) pixels = "(" + pixels + " - " + tuple_str(mean_) + ") / " + tuple_str(std_dev_);
    describe_ = "device: " + options.device + "\nbackend: " + executor_->backend().description() + "\nmodel: " + name_ +
                " (made from " + (file.source.empty() ? "?" : file.source) + ")\nfile: " + source +
                ", format version " + number_str(file.version) +
                (file.version >= kModelFileChecksumSince ? " (checksummed)"
                                                         : " (written by an earlier lenet, without a checksum)") +
                "\ninput: " + tuple_str(network->input_shape()) + "\noutput: " + tuple_str(network->output_shape()) +
                "\nimage: " +
                (image.channels
                     ? number_str(image.height) + " x " + number_str(image.width) + " x " + number_str(image.channels) +
                           (image.channels_first ? ", channels first" : ", channels last")
                     : std::string("none")) +
                "\npixels: " + pixels + "\n";
}

void Engine::run(const float* x, int64_t n, float* y, Executor::Output output) const {
    executor_->run(Executor::Input{x, nullptr, 1.f}, y, n, output);
}

void Engine::run_pixels(const uint8_t* pixels, int64_t n, float* y) const {
    if (table_.empty()) {
        executor_->run(Executor::Input{nullptr, pixels, input_scale_}, y, n, Executor::Output::probabilities);
        return;
    }
    const int64_t size = input_size_, run = size / channels_;
    std::vector<float> x(size_t(n * size));
    for (size_t i = 0; i < x.size(); ++i) {
        const int64_t at = int64_t(i) % size, c = channels_first_ ? at / run : at % channels_;
        x[i] = table_[size_t(pixels[i] * channels_ + c)];
    }
    executor_->run(Executor::Input{x.data(), nullptr, 1.f}, y, n, Executor::Output::probabilities);
}

}  // namespace lenet::api
