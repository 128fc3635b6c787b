// Classifies one handwritten digit with lenet from C++, no Python involved:
//
//   classify MODEL.lenet DIGIT.png
//
// MODEL.lenet is written by Python once (python -c 'import lenet; lenet.Engine("lenet5").save("lenet5.lenet")');
// DIGIT.png is an 8-bit grayscale PNG of the model's image size (28 x 28 for MNIST's
// models), white on black as MNIST's digits are. Any model lenet loads: its image is
// asked of the engine (height, width, channels, and how they sit in its input), never
// read off its input shape. Prints the digit, then its probability. docs/cpp.md
// explains each step.
#include <lenet/lenet.h>

#include <algorithm>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s MODEL.lenet DIGIT.png\n", argv[0]);
        return 2;
    }
    try {
        lenet::EngineOptions options;
        options.threads = 1;  // one image: no use for more
        const lenet::Engine engine(argv[1], options);
        const lenet::ImageShape image = engine.image();  // e.g. 28 x 28 x 1, channels last
        if (image.layout == lenet::ImageLayout::none) {
            std::fprintf(stderr, "classify: %s: the model's input is not an image (give it numbers with predict)\n",
                         argv[1]);
            return 1;
        }
        const std::vector<uint8_t> gray = lenet::read_gray_png(argv[2], image);
        // A model of several channels sees the gray in each, as Python's infer gives it a
        // gray image: each pixel's channels together (channels last), or one whole
        // channel after another (channels first).
        const size_t plane = gray.size(), channels = size_t(image.channels);
        std::vector<uint8_t> pixels(plane * channels);
        for (size_t i = 0; i < plane; ++i)
            for (size_t c = 0; c < channels; ++c)
                pixels[image.layout == lenet::ImageLayout::channels_first ? c * plane + i : i * channels + c] = gray[i];
        // The pixels scaled by engine.input_scale() (then normalized by engine.mean() and
        // engine.std_dev() where the model was trained so) in the core, as Python's infer does.
        const std::vector<float> probs = engine.predict_proba_pixels(pixels);
        const auto best = std::max_element(probs.begin(), probs.end()) - probs.begin();
        std::printf("%d %.4f\n", int(best), double(probs[size_t(best)]));
        return 0;
    } catch (const lenet::Error& e) {  // ModelFileError, InputError, ...: the message says what and where
        std::fprintf(stderr, "classify: %s\n", e.what());
        return 1;
    }
}
