// Classifies one handwritten digit with lenet from C++, no Python involved:
//
//   classify MODEL.lenet DIGIT.png
//
// MODEL.lenet is written by Python once (python -c 'import lenet; lenet.Engine("lenet5").save("lenet5.lenet")');
// DIGIT.png is a 28 x 28 8-bit grayscale PNG, white on black as MNIST's digits are.
// Prints the digit, then its probability. docs/cpp.md explains each step.
#include <lenet/lenet.h>

#include <algorithm>
#include <cstdio>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MODEL.lenet DIGIT.png\n", argv[0]);
        return 2;
    }
    try {
        lenet::EngineOptions options;
        options.threads = 1;  // one image: no use for more
        const lenet::Engine engine(argv[1], options);
        const auto& shape = engine.input_shape();  // (28, 28, 1) for the shipped models
        const auto pixels = lenet::read_gray_png(argv[2], int(shape[0]), int(shape[1]));
        // The pixels scaled by engine.input_scale() (then normalized by engine.mean() and
        // engine.std_dev() where the model was trained so) in the core, as Python's infer does.
        const auto probs = engine.predict_proba_pixels(pixels);
        const auto best = std::max_element(probs.begin(), probs.end()) - probs.begin();
        std::printf("%d %.4f\n", int(best), double(probs[size_t(best)]));
        return 0;
    } catch (const lenet::Error& e) {  // ModelFileError, InputError, ...: the message says what and where
        std::fprintf(stderr, "classify: %s\n", e.what());
        return 1;
    }
}
