// The engine behind the C ABI (include/lenet/lenet_c.h): a .lenet file read into a
// Network (net/model_file.h), run by an Executor on a registered backend, with what the
// API tells about it. Immutable once made; run() may be called from several threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "../net/model_file.h"
#include "executor_options.h"

namespace lenet::api {

class Engine {
public:
    // `file` read from `source` (a path, or the name given to bytes in memory).
    Engine(ModelFile file, const std::string& source, const ExecutorOptions& options);

    const Network& network() const { return executor_->network(); }
    int64_t input_size() const { return input_size_; }
    int64_t output_size() const { return output_size_; }
    float input_scale() const { return input_scale_; }
    const std::vector<double>& mean() const { return mean_; }
    const std::vector<double>& std_dev() const { return std_dev_; }
    const std::string& name() const { return name_; }
    const std::string& source() const { return source_; }
    const std::string& describe() const { return describe_; }

    // n inputs at x (in the model's input shape and layout) -> n outputs at y.
    void run(const float* x, int64_t n, float* y, Executor::Output output) const;
    // n inputs of 0..255 pixels -> n distributions at y, prepared as Python prepares them.
    void run_pixels(const uint8_t* pixels, int64_t n, float* y) const;

private:
    std::unique_ptr<Executor> executor_;
    float input_scale_ = 1.f;
    std::vector<double> mean_, std_dev_;
    // A normalized model's input per pixel value and channel (256 x channels), computed as
    // Python's Preprocessing.table computes it; empty for a model that is not normalized.
    std::vector<float> table_;
    int64_t channels_ = 1;
    bool channels_first_ = false;  // each channel's values one run of input_size / channels
    std::string name_, source_, describe_;
    int64_t input_size_ = 0, output_size_ = 0;
};

}  // namespace lenet::api
