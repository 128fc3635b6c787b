/* lenet's C ABI: what liblenet.so.1 exports, and all it exports (a version script hides
 * the rest). The C++ API (lenet/lenet.h) is a header-only layer over it, compiled into
 * the program that uses it, as ONNX Runtime's and ncnn's C++ headers are over theirs: no
 * C++ type crosses the library's boundary, so a program built with another compiler,
 * standard library or flags links, and a program built against an earlier release of the
 * same ABI runs on a later one. docs/cpp.md says why and how.
 *
 * Conventions:
 * - A call that can fail returns a lenet_error*: NULL on success, else the failure, which
 *   the caller frees with lenet_error_free. Its status is the C++ exception class of the
 *   same failure, its message the text Python's class of that name carries.
 * - Objects are opaque and made by their _create/_load calls; options grow by new
 *   setters, never by a struct whose size a program compiled in.
 * - Pointers an engine returns (shapes, names, mean, std) live as long as the engine.
 * - Buffers are given with their size, in elements; a call checks them before it writes.
 * - An engine may be called from several threads at once.
 */
#ifndef LENET_LENET_C_H
#define LENET_LENET_C_H

#include <stddef.h>
#include <stdint.h>

#include <lenet/version.h>

#define LENET_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* What failed: the lenet::Error class a C++ program catches. */
typedef enum lenet_status {
    LENET_OK = 0,
    LENET_ERROR = 1,                    /* lenet::Error: anything else (a file that cannot be written, memory) */
    LENET_MODEL_FILE_ERROR = 2,         /* a corrupt, damaged or inconsistent model file */
    LENET_UNSUPPORTED_MODEL_ERROR = 3,  /* a model asking for something the engine does not run */
    LENET_INPUT_ERROR = 4,              /* a bad argument, input or image */
    LENET_CUDA_ERROR = 5                /* the CUDA backend is missing, or a CUDA, cuDNN or cuBLAS call failed */
} lenet_status;

/* How a model's images sit in its input. */
typedef enum lenet_layout {
    LENET_LAYOUT_NONE = 0,           /* the input is no image (a flat input of a length that is not a square) */
    LENET_LAYOUT_CHANNELS_LAST = 1,  /* (height, width, channels), and flat or (height, width) inputs */
    LENET_LAYOUT_CHANNELS_FIRST = 2  /* (channels, height, width) */
} lenet_layout;

typedef struct lenet_error lenet_error;
typedef struct lenet_options lenet_options;
typedef struct lenet_engine lenet_engine;

/* ---- errors */
LENET_API lenet_status lenet_error_status(const lenet_error* error);
LENET_API const char* lenet_error_message(const lenet_error* error);
LENET_API void lenet_error_free(lenet_error* error);

/* The library's version, "0.1.0": LENET_VERSION_STRING of the headers it was built with. */
LENET_API const char* lenet_version(void);

/* ---- options: how an engine runs. Created with the defaults: device "cpu", threads 0 (the
 * CPUs this process may run on), cpu_kernels "auto", precision "exact", allow_tf32 0,
 * cuda_graphs 1, cuda_path "auto". A setter checks its value (INPUT_ERROR naming it). */
LENET_API lenet_error* lenet_options_create(lenet_options** out);
LENET_API void lenet_options_free(lenet_options* options);
/* "cpu" or "cuda" (the GPU: the CUDA backend library, cuDNN and cuBLAS, loaded on demand). */
LENET_API lenet_error* lenet_options_set_device(lenet_options* options, const char* device);
/* CPU worker threads, 1..1024; 0: the CPUs this process may run on. */
LENET_API lenet_error* lenet_options_set_threads(lenet_options* options, int threads);
/* "auto" (the best kernels this CPU runs, capped by $LENET_MAX_CPU_ISA where it is set), "avx512",
 * "avx2" or "generic" (whether this CPU runs the set is known when an engine is loaded), "blas"
 * (im2col + OpenBLAS, the reference path) or "nchw" (the CUDA backend's layout on the CPU). */
LENET_API lenet_error* lenet_options_set_cpu_kernels(lenet_options* options, const char* kernels);
/* "exact" (the default: every algorithm at least as close to a float64 evaluation as the direct
 * kernels; Winograd's sums in double) or "fast" (Winograd's transforms and sums in float32: faster,
 * several times further from the exact answer). The CPU's; the GPU ignores it. Since LENET_1.1. */
LENET_API lenet_error* lenet_options_set_precision(lenet_options* options, const char* precision);
/* CUDA only, as Python's Engine takes them (docs/gpu.md): TF32 math, CUDA graphs, and the path:
 * "auto" (the faster of the fused whole-network kernel and cuDNN + cuBLAS where the kernel can
 * run the model), "fused", "library" (cuDNN + cuBLAS) or "fast" (auto's kernels, faster transfers). */
LENET_API lenet_error* lenet_options_set_allow_tf32(lenet_options* options, int allow);
LENET_API lenet_error* lenet_options_set_cuda_graphs(lenet_options* options, int graphs);
LENET_API lenet_error* lenet_options_set_cuda_path(lenet_options* options, const char* path);

/* ---- engines: a model ready to run, immutable once made. `options` NULL: the defaults. */
/* The .lenet file at `path` (MODEL_FILE_ERROR naming it and what is wrong). */
LENET_API lenet_error* lenet_engine_load(const char* path, const lenet_options* options, lenet_engine** out);
/* A .lenet file's `size` bytes at `data` (copied: the caller may free them after);
 * `name` (NULL: "<memory>") stands for the file in messages. */
LENET_API lenet_error* lenet_engine_load_memory(const void* data, size_t size, const char* name,
                                                const lenet_options* options, lenet_engine** out);
LENET_API void lenet_engine_free(lenet_engine* engine);

/* Keras' per-input shape (no batch axis): (28, 28, 1), (1, 28, 28), (784,); and the
 * values per input (their product). The output's alike: (10,) for a digit classifier. */
LENET_API size_t lenet_engine_input_rank(const lenet_engine* engine);
LENET_API const int64_t* lenet_engine_input_shape(const lenet_engine* engine);
LENET_API size_t lenet_engine_input_size(const lenet_engine* engine);
LENET_API size_t lenet_engine_output_rank(const lenet_engine* engine);
LENET_API const int64_t* lenet_engine_output_shape(const lenet_engine* engine);
LENET_API size_t lenet_engine_output_size(const lenet_engine* engine);
/* The image the input holds (what Python's infer draws images at): height, width and
 * channels, and how they sit in the input; all 0 and LENET_LAYOUT_NONE for no image. */
LENET_API int lenet_engine_image_height(const lenet_engine* engine);
LENET_API int lenet_engine_image_width(const lenet_engine* engine);
LENET_API int lenet_engine_image_channels(const lenet_engine* engine);
LENET_API lenet_layout lenet_engine_image_layout(const lenet_engine* engine);
/* How 0..255 pixels are prepared: times the scale, then (x - mean[c]) / std[c] per channel
 * c (one value: every channel) where the model was trained on normalized pixels;
 * lenet_engine_normalized is 0 (and mean, std NULL) where it was not. */
LENET_API float lenet_engine_input_scale(const lenet_engine* engine);
LENET_API size_t lenet_engine_normalized(const lenet_engine* engine);
LENET_API const double* lenet_engine_mean(const lenet_engine* engine);
LENET_API const double* lenet_engine_std(const lenet_engine* engine);
/* The model's name; the file it was loaded from (or the name given to load_memory). */
LENET_API const char* lenet_engine_name(const lenet_engine* engine);
LENET_API const char* lenet_engine_source(const lenet_engine* engine);
/* What the engine is, in lines of "key: value": the device and backend, the model, its
 * shapes and preparation, and its file's format version (1 and 2: without a checksum). */
LENET_API const char* lenet_engine_describe(const lenet_engine* engine);

/* ---- running. `x` holds `values` inputs' values (a multiple of lenet_engine_input_size,
 * in the model's input shape and layout); `out` has room for `capacity` floats and
 * receives (values / input size) x output size: INPUT_ERROR, nothing written, when it
 * holds fewer. */
/* The model's outputs, as Keras' predict gives them. */
LENET_API lenet_error* lenet_engine_predict(const lenet_engine* engine, const float* x, size_t values, float* out,
                                            size_t capacity);
/* A distribution over the classes per input (the outputs made probabilities as Python's
 * Engine.predict_proba makes them), to the bit as Python gives it for the same values. */
LENET_API lenet_error* lenet_engine_predict_proba(const lenet_engine* engine, const float* x, size_t values, float* out,
                                                  size_t capacity);
/* The same on 0..255 pixels in the input's layout, prepared in the core (scale, mean,
 * std) to the float32 values Python's infer prepares. */
LENET_API lenet_error* lenet_engine_predict_proba_pixels(const lenet_engine* engine, const uint8_t* pixels,
                                                         size_t values, float* out, size_t capacity);

/* The largest height or width of an image the engine takes (the core's limit). */
#define LENET_MAX_IMAGE_SIDE 8192

/* ---- images: the core's PNG decoder (Python's lenet.infer uses it for such files): the
 * pixels, row by row, of an 8-bit grayscale non-interlaced PNG of exactly height x width,
 * into `out` (room for `capacity` bytes, at least height x width). INPUT_ERROR naming the
 * file for anything else, or where this build has no PNG decoder (libpng was missing). */
LENET_API lenet_error* lenet_read_gray_png(const char* path, int height, int width, uint8_t* out, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif
