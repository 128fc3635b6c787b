// The Executor: a network on a backend, run on NumPy batches with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "../api/executor_options.h"
#include "../io/dark_ground.h"
#include "../runtime/executor.h"
#include "../support/errors.h"
#include "bindings.h"

namespace lenet::bindings {
namespace {

// Whether the interpreter is shutting down (the GIL must then not be released).
bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

// The executor on a C-contiguous batch in the model's input shape (float32 values, or
// uint8 pixels times `scale`); the outputs in the model's output shape.
template <class T>
py::array_t<float> run(Executor& ex, const py::array_t<T, py::array::c_style>& x, Executor::Output mode,
                       float scale = 1.f) {
    const Network& net = ex.network();
    const auto& expect = net.input_shape();
    bool ok = x.ndim() == py::ssize_t(expect.size()) + 1;
    for (size_t i = 0; ok && i < expect.size(); ++i) ok = x.shape(i + 1) == expect[i];
    if (!ok) {
        std::string want = "(n", got = "(";
        for (auto v : expect) want += ", " + std::to_string(v);
        for (py::ssize_t i = 0; i < x.ndim(); ++i) got += (i ? ", " : "") + std::to_string(x.shape(i));
        throw InputError(std::string("expected a ") + (std::is_same_v<T, float> ? "float32" : "uint8") +
                         " array of shape " + want + "), got " + got + ")");
    }
    const int64_t n = x.shape(0);
    const auto& out = net.output_shape();
    std::vector<py::ssize_t> shape(out.size() + 1, py::ssize_t(n));
    for (size_t i = 0; i < out.size(); ++i) shape[i + 1] = py::ssize_t(out[i]);
    py::array_t<float> y(std::move(shape));
    Executor::Input input;
    if constexpr (std::is_same_v<T, float>)
        input.values = x.data();
    else
        input = {nullptr, x.data(), scale};
    float* dst = y.mutable_data();
    {
        py::gil_scoped_release release;
        ex.run(input, dst, n, mode);
    }
    return y;
}

// infer's shortest way (python/lenet/engine.py, Engine._mnist_result): one uint8 image of
// the model's input size in one call: the dark-ground check when asked, the probabilities,
// and their argmax as NumPy's (the first maximum; the first NaN if any). When the ground is
// not dark: with `drawing_paper` > 0, a clean drawing dark on light (clean_drawing) is read as
// its negative; else None. Returns (digit, probabilities, negative): a read-only (classes,)
// array, and whether the negative was read.
py::object pixel_answer(Executor& ex, const py::array_t<uint8_t, py::array::c_style>& image, float scale,
                        bool check_ground, int drawing_paper) {
    const Network& net = ex.network();
    int64_t size = 1;
    for (auto v : net.input_shape()) size *= v;
    if (image.ndim() < 2 || image.size() != size)
        throw InputError("pixel_answer takes one uint8 image of the model's input size (" + std::to_string(size) +
                         " pixels)");
    const uint8_t* pixels = image.data();
    std::vector<uint8_t> negative;
    if (check_ground) {
        bool dark = false;
        const int h = int(image.shape(0)), w = int(image.shape(1));
        dark_ground(pixels, 1, h, w, &dark);
        if (!dark) {
            if (drawing_paper <= 0 || !clean_drawing(pixels, h, w, drawing_paper)) return py::none();
            negative.resize(size_t(size));
            for (int64_t i = 0; i < size; ++i) negative[size_t(i)] = uint8_t(255 - pixels[i]);
            pixels = negative.data();
        }
    }
    const int64_t classes = net.output_size();
    py::array_t<float> y(classes);
    float* p = y.mutable_data();
    {
        py::gil_scoped_release release;
        ex.run({nullptr, pixels, scale}, p, 1, Executor::Output::probabilities);
    }
    int64_t digit = 0;
    for (int64_t i = 0; i < classes; ++i) {
        if (std::isnan(p[i])) {
            digit = i;
            break;
        }
        if (p[i] > p[digit]) digit = i;
    }
    py::detail::array_proxy(y.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return py::make_tuple(digit, std::move(y), !negative.empty());
}

}  // namespace

void bind_executor(py::module_& m) {
    py::class_<Executor>(m, "Executor")
        .def(py::init([](std::shared_ptr<Network> net, const std::string& device, int threads, bool allow_tf32,
                         bool cuda_graphs, const std::string& cpu_kernels, const std::string& cuda_path,
                         const std::string& precision) {
                 // The C API's own path (include/lenet/lenet_c.h): the same checks, the same words.
                 api::ExecutorOptions options;
                 options.device = device;
                 options.threads = threads;
                 options.allow_tf32 = allow_tf32;
                 options.cuda_graphs = cuda_graphs;
                 options.cpu_kernels = cpu_kernels;
                 options.cuda_path = cuda_path;
                 options.precision = precision;
                 return api::executor_open(net, options);
             }),
             py::arg("network"), py::arg("device"), py::arg("threads"), py::arg("allow_tf32") = false,
             py::arg("cuda_graphs") = true, py::arg("cpu_kernels") = "auto", py::arg("cuda_path") = "auto",
             py::arg("precision") = "exact")
        .def(
            "run",
            [](Executor& ex, const py::array_t<float, py::array::c_style>& x) {
                return run<float>(ex, x, Executor::Output::raw);
            },
            py::arg("x"),
            "The outputs, as Keras' predict gives them, for a C-contiguous float32 batch in the "
            "model's input shape.")
        .def(
            "probabilities",
            [](Executor& ex, const py::array_t<float, py::array::c_style>& x) {
                return run<float>(ex, x, Executor::Output::probabilities);
            },
            py::arg("x"),
            "A distribution over the classes per input (see Executor::Output), for a C-contiguous "
            "float32 batch in the model's input shape.")
        .def(
            "pixel_probabilities",
            [](Executor& ex, const py::array_t<uint8_t, py::array::c_style>& pixels, float scale) {
                return run<uint8_t>(ex, pixels, Executor::Output::probabilities, scale);
            },
            py::arg("pixels"), py::arg("scale"),
            "probabilities() of a C-contiguous uint8 batch of pixels in the model's input shape, each pixel "
            "converted to float32 and multiplied by `scale` in the core (the same values as NumPy's "
            "astype(float32) * float32(scale)).")
        .def("pixel_answer", &pixel_answer, py::arg("image"), py::arg("scale"), py::arg("check_ground"),
             py::arg("drawing_paper") = 0,
             "One uint8 image of the model's input size: None when check_ground and its ground is not dark "
             "(the mnist path's test) unless drawing_paper > 0 and it is a clean drawing dark on light "
             "(read as its negative); else (digit, probabilities, negative), the probabilities read-only.")
        .def(
            "describe",
            [](Executor& ex) {
                py::list plans;
                for (const auto& r : ex.describe()) {
                    py::list nodes;
                    for (const auto& node : r.nodes) {
                        py::dict d;
                        d["steps"] = py::make_tuple(node.first, node.last);
                        for (const auto& [k, v] : node.kernel) d[py::str(k)] = v;
                        nodes.append(d);
                    }
                    py::dict stream;
                    for (const auto& [k, v] : r.stream) stream[py::str(k)] = v;
                    plans.append(py::dict(py::arg("capacity") = r.capacity, py::arg("stream") = stream,
                                          py::arg("kernels") = nodes, py::arg("whole_network") = r.whole_network,
                                          py::arg("why") = r.why));
                }
                return plans;
            },
            "What each plan made so far decided: per plan its capacity, its stream's facts (graph or eager), "
            "whether one kernel runs the whole network (and why not), and, per kernel, the steps it runs and "
            "its facts (algorithm, fusion, workspace).")
        .def(
            "host_array",
            [](Executor& ex, const std::vector<py::ssize_t>& shape, const py::dtype& dtype) {
                int64_t bytes = dtype.itemsize();
                for (py::ssize_t d : shape) {
                    if (d < 0) throw InputError("a negative dimension in " + std::to_string(d));
                    bytes *= d;
                }
                auto* owner = new std::shared_ptr<void>(ex.host_buffer(size_t(bytes)));
                // On CUDA the last reference frees pinned memory, and cudaFreeHost waits for the
                // device: not with the GIL held, which would stall every Python thread (issue 67).
                const auto free_pinned = [](void* p) {
                    auto* held = static_cast<std::shared_ptr<void>*>(p);
                    if (python_finalizing()) {
                        delete held;
                        return;
                    }
                    py::gil_scoped_release release;
                    delete held;
                };
                const auto free_plain = [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); };
                py::capsule base =
                    ex.backend().name() == "cuda" ? py::capsule(owner, free_pinned) : py::capsule(owner, free_plain);
                return py::array(dtype, shape, owner->get(), base);
            },
            py::arg("shape"), py::arg("dtype"),
            "A new array in memory the backend reads without a copy of its own where it can (on CUDA: pinned "
            "memory the GPU maps); valid while the array or a view of it lives.")
        .def_property_readonly("device", [](const Executor& e) { return e.backend().name(); })
        .def_property_readonly("description", [](const Executor& e) { return e.backend().description(); })
        .def_property_readonly("threads", &Executor::threads);
}

}  // namespace lenet::bindings
