// The options' promises (tests/cpp/test_cpp_api.py), built with AddressSanitizer so that
// LeakSanitizer sees every allocation, the library's included:
//
//   option_checks leaks MODEL.lenet   1,000 Engines refused for a bad option (lenet.h's
//                                     Options freed when a setter throws) and 1,000
//                                     lenet_options_create(NULL): exits 0, LSan reports a leak
//   option_checks setters             what each setter says of a bad value, a line each
#include <lenet/lenet.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

void say(const char* what, lenet_error* e) {
    std::printf("%s: %s\n", what, e ? lenet_error_message(e) : "OK");
    lenet_error_free(e);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 3 && std::strcmp(argv[1], "leaks") == 0) {
        int refused = 0;
        lenet::EngineOptions bad;
        bad.threads = -1;
        for (int i = 0; i < 1000; ++i) {
            try {
                lenet::Engine engine(argv[2], bad);
            } catch (const lenet::InputError&) {
                ++refused;
            }
            lenet_error* e = lenet_options_create(nullptr);
            refused += e != nullptr;
            lenet_error_free(e);
        }
        std::printf("refused %d\n", refused);
        return refused == 2000 ? 0 : 1;
    }
    if (argc == 2 && std::strcmp(argv[1], "setters") == 0) {
        lenet_options* o = nullptr;
        if (lenet_options_create(&o)) return 2;
        say("device", lenet_options_set_device(o, "tpu"));
        say("cpu_kernels", lenet_options_set_cpu_kernels(o, "sse9"));
        say("cuda_path", lenet_options_set_cuda_path(o, "warp"));
        say("precision", lenet_options_set_precision(o, "half"));
        say("good precision", lenet_options_set_precision(o, "fast"));
        say("threads", lenet_options_set_threads(o, 2000));
        say("null options", lenet_options_set_device(nullptr, "cpu"));
        say("good", lenet_options_set_cpu_kernels(o, "generic"));
        lenet_options_free(o);
        lenet::EngineOptions options;
        options.device = "tpu";
        try {
            lenet::Engine engine("/nonexistent.lenet", options);  // the option is refused before the file is read
        } catch (const lenet::Error& e) {
            std::printf("engine: %s: %s\n", dynamic_cast<const lenet::InputError*>(&e) ? "InputError" : "Error",
                        e.what());
        }
        return 0;
    }
    std::fprintf(stderr, "usage: option_checks leaks MODEL.lenet | option_checks setters\n");
    return 2;
}
