// lenet's C++ API: the engine without Python. Installed with the Python package
// (`python -m lenet --cmake-dir` gives the CMake package; find_package(lenet) then
// target_link_libraries(app PRIVATE lenet::lenet)). docs/cpp.md shows a whole program.
//
// A model reaches C++ as lenet's own file (.lenet), written by Python after its Keras or
// ONNX reader has read and checked it: `lenet.Engine("lenet5").save("lenet5.lenet")` or
// `lenet-cli --weights FILE --save OUT.lenet`. The format is versioned and bounded
// (csrc/net/model_file.h).
//
// Errors are exceptions (lenet/errors.h): ModelFileError, UnsupportedModelError,
// InputError, CudaError, all lenet::Error, each with the message Python's class of the
// same name carries for the same failure.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "errors.h"

namespace lenet {

// The package's version, e.g. "0.1.0".
const char* version();

// How an Engine runs. The defaults suit a program that classifies now and then.
struct EngineOptions {
    // "cpu". ("cuda" needs the CUDA backend, which today only Python loads: from C++
    // it raises CudaError.)
    std::string device = "cpu";
    // CPU worker threads, 1..1024; 0: the CPUs this process may run on.
    int threads = 0;
    // "auto" (the best kernels this CPU runs), "avx512", "avx2", "generic" or "blas".
    std::string cpu_kernels = "auto";
    // CUDA only, as Python's Engine takes them.
    bool allow_tf32 = false;
    bool cuda_graphs = true;
    std::string cuda_path = "auto";
};

// A model ready to run. Immutable once made; predict_proba may be called from several
// threads at once.
class Engine {
public:
    // Loads and checks the .lenet file at `model_path` (ModelFileError naming the file
    // and what is wrong; UnsupportedModelError for what the engine does not run).
    explicit Engine(const std::string& model_path, const EngineOptions& options = {});
    ~Engine();
    Engine(Engine&&) noexcept;
    Engine& operator=(Engine&&) noexcept;

    // Keras' per-sample input shape, e.g. {28, 28, 1}; input_size() floats per input.
    const std::vector<int64_t>& input_shape() const;
    int64_t input_size() const;
    // Values per input in the output (10 for a digit classifier).
    int64_t classes() const;
    // What 0..255 pixels are multiplied by before the network (the model was trained so).
    float input_scale() const;
    // Then (x - mean[c]) / std[c] per channel c (one value: every channel), where the model
    // was trained on normalized pixels (PyTorch's Normalize); both empty where it was not.
    const std::vector<double>& mean() const;
    const std::vector<double>& std_dev() const;
    // The model's name and the file it was loaded from.
    const std::string& name() const;
    const std::string& source() const;

    // A distribution over the classes per input: x holds n inputs of input_size()
    // floats each (in the model's layout, already scaled), probs receives n x classes().
    // The same numbers as Python's Engine.predict_proba on the same array, to the bit.
    void predict_proba(const float* x, int64_t n, float* probs) const;
    // The same on a vector of n x input_size() floats (InputError for another size).
    std::vector<float> predict_proba(const std::vector<float>& x) const;
    // The same on 0..255 pixels (n x input_size() bytes), scaled by input_scale() in the
    // core as Python's infer scales them, and normalized by mean() and std_dev() (to the
    // same float32 values as Python's).
    std::vector<float> predict_proba_pixels(const std::vector<uint8_t>& pixels) const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The core's PNG decoder (the one Python's lenet.infer uses for such files): the
// pixels, row by row, of an 8-bit grayscale, non-interlaced PNG of exactly height x
// width. InputError naming the file for anything else (another size, colour, a
// damaged file) or when this build has no PNG decoder (libpng was missing).
std::vector<uint8_t> read_gray_png(const std::string& path, int height, int width);

}  // namespace lenet
