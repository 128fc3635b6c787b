// What a C++ product relies on, on the installed package (tests/cpp/test_cpp_api.py runs
// it and checks each line against Python's engine):
//
//   api_checks MODEL.lenet DIGIT.png
//
// Prints "key: value" lines; exits 1 at the first check that fails, saying which.
#include <lenet/lenet.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
    if (!ok) {
        std::printf("FAILED: %s\n", what);
        ++failures;
    }
}

// The message of the lenet::Error `call` throws, as "Class: message"; "none" when it throws none.
template <class Call>
std::string thrown(Call call) {
    try {
        call();
    } catch (const lenet::ModelFileError& e) {
        return std::string("ModelFileError: ") + e.what();
    } catch (const lenet::InputError& e) {
        return std::string("InputError: ") + e.what();
    } catch (const lenet::CudaError& e) {
        return std::string("CudaError: ") + e.what();
    } catch (const lenet::Error& e) {
        return std::string("Error: ") + e.what();
    }
    return "none";
}

std::string floats(const std::vector<float>& v) {
    std::string s;
    char buf[32];
    for (float x : v) {
        std::snprintf(buf, sizeof buf, "%s%.9g", s.empty() ? "" : " ", double(x));
        s += buf;
    }
    return s;
}

std::string dims(const std::vector<int64_t>& shape) {
    std::string s;
    for (auto d : shape) s += (s.empty() ? "" : " ") + std::to_string(d);
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    const std::string path = argv[1];
    std::printf("header version: %s %d abi %d\n", LENET_VERSION_STRING, LENET_VERSION_NUMBER, LENET_ABI_VERSION);
    std::printf("library version: %s\n", lenet::version());

    lenet::EngineOptions options;
    options.threads = 1;
    lenet::Engine engine(path, options);
    const lenet::ImageShape image = engine.image();
    std::printf("image: %d %d %d %d\n", image.height, image.width, image.channels, int(image.layout));
    std::printf("input_shape: %s\n", dims(engine.input_shape()).c_str());
    std::printf("output_shape: %s\n", dims(engine.output_shape()).c_str());

    // Raw outputs and probabilities of the PNG, replicated into the image's channels.
    const auto gray = lenet::read_gray_png(argv[2], image);
    std::vector<uint8_t> pixels;
    for (size_t i = 0; i < gray.size() * size_t(image.channels); ++i)
        pixels.push_back(
            gray[image.layout == lenet::ImageLayout::channels_first ? i % gray.size() : i / size_t(image.channels)]);
    std::vector<float> x(pixels.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(pixels[i]) * engine.input_scale();
    const auto raw = engine.predict(x);
    expect(int64_t(raw.size()) == engine.output_size(), "predict gives output_size() values per input");
    std::printf("predict: %s\n", floats(raw).c_str());
    std::printf("predict_proba_pixels: %s\n", floats(engine.predict_proba_pixels(pixels)).c_str());

    // Your own buffers, with their sizes: too small is refused before a value is written.
    std::vector<float> out(size_t(engine.output_size()) * 2, -7.f);
    std::printf("small buffer: %s\n", thrown([&] {
                                          engine.predict_proba(x.data(), x.size(), out.data(),
                                                               size_t(engine.output_size()) - 1);
                                      }).c_str());
    expect(out[0] == -7.f, "nothing written to a buffer too small");
    std::printf("odd input: %s\n",
                thrown([&] { engine.predict_proba(x.data(), x.size() - 1, out.data(), out.size()); }).c_str());
    engine.predict_proba(x.data(), x.size(), out.data(), out.size());
    expect(out[size_t(engine.output_size())] == -7.f, "one input's outputs only");

    // The same model from memory.
    std::ifstream file(path, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const auto from_memory = lenet::Engine::from_memory(bytes.data(), bytes.size(), "in-memory.lenet", options);
    expect(from_memory.predict(x) == raw, "from_memory predicts what the file's engine predicts");
    std::printf("from_memory source: %s\n", from_memory.source().c_str());
    std::vector<char> damaged = bytes;
    damaged[damaged.size() / 2] ^= 0x10;
    std::printf("damaged in memory: %s\n",
                thrown([&] { lenet::Engine::from_memory(damaged.data(), damaged.size(), "in-memory.lenet"); }).c_str());

    // A moved-from engine: an Error naming the call, never a crash; assigned again, it works.
    lenet::Engine moved = std::move(engine);
    std::printf("moved-from classes: %s\n", thrown([&] { (void)engine.classes(); }).c_str());
    std::printf("moved-from predict: %s\n", thrown([&] { (void)engine.predict(x); }).c_str());
    std::printf("moved-from describe: %s\n", thrown([&] { (void)engine.describe(); }).c_str());
    expect(moved.predict(x) == raw, "the engine moved to predicts");
    engine = std::move(moved);
    expect(engine.predict(x) == raw, "an engine moved back predicts");

    // The GPU from C++, no Python: the engine, or a CudaError naming what is missing.
    lenet::EngineOptions gpu = options;
    gpu.device = "cuda";
    std::printf("cuda: %s\n", thrown([&] { (void)lenet::Engine(path, gpu).predict(x); }).c_str());

    std::printf("describe:\n%s", engine.describe().c_str());
    return failures ? 1 : 0;
}
