/* The C ABI from C: no C++ compiler, standard library or exception involved
 * (tests/cpp/test_cpp_api.py). c_program MODEL.lenet: prints the first input's classes'
 * probabilities for zeros, then what a bad call says. */
#include <lenet/lenet_c.h>
#include <stdio.h>
#include <stdlib.h>

static int failed(lenet_error* e) {
    if (!e) return 0;
    printf("error %d: %s\n", (int)lenet_error_status(e), lenet_error_message(e));
    lenet_error_free(e);
    return 1;
}

int main(int argc, char** argv) {
    lenet_options* options = NULL;
    lenet_engine* engine = NULL;
    if (argc != 2 || failed(lenet_options_create(&options)) || failed(lenet_options_set_threads(options, 1)))
        return 2;
    failed(lenet_options_set_threads(options, -3));
    if (failed(lenet_engine_load(argv[1], options, &engine))) return 1;
    lenet_options_free(options);
    size_t n = lenet_engine_input_size(engine), classes = lenet_engine_output_size(engine);
    float* x = calloc(n, sizeof(float));
    float* p = calloc(classes, sizeof(float));
    if (failed(lenet_engine_predict_proba(engine, x, n, p, classes))) return 1;
    for (size_t i = 0; i < classes; ++i) printf("%s%.6f", i ? " " : "", (double)p[i]);
    printf("\n");
    failed(lenet_engine_predict_proba(engine, x, n, p, classes - 1));
    failed(lenet_engine_predict_proba(NULL, x, n, p, classes));
    lenet_engine* absent = NULL;
    failed(lenet_engine_load("/nonexistent.lenet", NULL, &absent));
    lenet_engine_free(engine);
    free(x);
    free(p);
    return 0;
}
