// lenet._core: the network, the executor and the CPU backend for Python. Thin:
// argument conversion, GIL release, and translation of the C++ errors to the
// classes of lenet/errors.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

#include "../backends/backend.h"
#include "../backends/cpu/cpu_backend.h"
#include "../backends/cpu/direct.h"
#include "../io/gray_png.h"
#include "../io/read_files.h"
#include "../support/errors.h"
#include "../runtime/executor.h"
#include "../net/layer_table.h"
#include "../net/limits.h"
#include "../net/network.h"
#include "build_info.h"
#include "version.h"

namespace py = pybind11;
using namespace lenet;

namespace {

// (pixels uint8 (decoded, height, width), rows int64) of a decoded stack; the pixels stay
// in the vector that holds them: the array owns it (no copy).
std::pair<py::array_t<uint8_t>, py::array_t<int64_t>> stack_arrays(GrayStack&& stack) {
    auto* holder = new std::vector<uint8_t>(std::move(stack.pixels));
    py::capsule owner(holder, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
    py::array_t<uint8_t> pixels({py::ssize_t(stack.decoded), py::ssize_t(stack.height), py::ssize_t(stack.width)},
                                holder->data(), owner);
    return {pixels, py::array_t<int64_t>(py::ssize_t(stack.rows.size()), stack.rows.data())};
}

Tensor to_tensor(const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
    Tensor t;
    t.shape.assign(a.shape(), a.shape() + a.ndim());
    t.data.assign(a.data(), a.data() + a.size());
    return t;
}

py::tuple to_tuple(const std::vector<int64_t>& v) {
    py::tuple t(v.size());
    for (size_t i = 0; i < v.size(); ++i) t[i] = v[i];
    return t;
}

// The executor on a C-contiguous float32 batch in the model's input shape; the
// outputs in the model's output shape.
py::array_t<float> run(Executor& ex, const py::array_t<float, py::array::c_style>& x, Executor::Output mode) {
    const Network& net = ex.network();
    const auto& expect = net.input_shape();
    bool ok = x.ndim() == py::ssize_t(expect.size()) + 1;
    for (size_t i = 0; ok && i < expect.size(); ++i) ok = x.shape(i + 1) == expect[i];
    if (!ok) {
        std::string want = "(n", got = "(";
        for (auto v : expect) want += ", " + std::to_string(v);
        for (py::ssize_t i = 0; i < x.ndim(); ++i) got += (i ? ", " : "") + std::to_string(x.shape(i));
        throw InputError("expected a float32 array of shape " + want + "), got " + got + ")");
    }
    const int64_t n = x.shape(0);
    const auto& out = net.output_shape();
    std::vector<py::ssize_t> shape(out.size() + 1, py::ssize_t(n));
    for (size_t i = 0; i < out.size(); ++i) shape[i + 1] = py::ssize_t(out[i]);
    py::array_t<float> y(std::move(shape));
    const float* src = x.data();
    float* dst = y.mutable_data();
    {
        py::gil_scoped_release release;
        ex.run(src, dst, n, mode);
    }
    return y;
}

const char* output_kind(OutputKind k) {
    switch (k) {
        case OutputKind::softmax: return "softmax";
        case OutputKind::sigmoid: return "sigmoid";
        case OutputKind::scores: return "scores";
    }
    return "?";
}

// The Python type of each record field, for fields() (and the stub check).
template <class T> const char* py_type();
template <> const char* py_type<std::string>() { return "str"; }
template <> const char* py_type<int>() { return "int"; }
template <> const char* py_type<float>() { return "float"; }
template <> const char* py_type<bool>() { return "bool"; }
template <> const char* py_type<std::vector<int>>() { return "list[int]"; }
template <> const char* py_type<Int2>() { return "tuple[int, int]"; }
template <> const char* py_type<Int4>() { return "tuple[int, int, int, int]"; }

}  // namespace

PYBIND11_MODULE(_core, m) {
    m.doc() = "lenet's C++ core: network, executor, CPU backend";

    // C++ errors become the Python classes of the same name (lenet/errors.py).
    py::register_exception_translator([](std::exception_ptr p) {
        if (!p) return;
        auto raise = [](const char* cls, const std::exception& e) {
            py::object type = py::module_::import("lenet.errors").attr(cls);
            PyErr_SetString(type.ptr(), e.what());
        };
        try {
            std::rethrow_exception(p);
        } catch (const ModelFileError& e) {
            raise("ModelFileError", e);
        } catch (const UnsupportedModelError& e) {
            raise("UnsupportedModelError", e);
        } catch (const InputError& e) {
            raise("InputError", e);
        } catch (const CudaError& e) {
            raise("CudaError", e);
        } catch (const Error& e) {
            raise("Error", e);
        }
    });

    auto spec = py::class_<LayerSpec>(m, "LayerSpec", "One layer as the loader describes it (csrc/net/layer.h).");
    spec.def(py::init<>());
#define LENET_BIND_FIELD(type, field, init, doc) spec.def_readwrite(#field, &LayerSpec::field, doc);
    LENET_LAYER_FIELDS(LENET_BIND_FIELD)
#undef LENET_BIND_FIELD
    spec.def("set_weight",
             [](LayerSpec& l, const std::string& name,
                const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
                 l.set_weight(name, to_tensor(a));
             },
             py::arg("name"), py::arg("array"), "Sets (or replaces) the weight `name`, in Keras layout.")
        .def("weight_names",
             [](const LayerSpec& l) {
                 std::vector<std::string> names;
                 for (const auto& w : l.weights) names.push_back(w.first);
                 return names;
             })
        .def("weight",
             [](const LayerSpec& l, const std::string& name) -> py::object {
                 const Tensor* t = l.weight(name);
                 if (!t) return py::none();
                 py::array_t<float> a(std::vector<py::ssize_t>(t->shape.begin(), t->shape.end()));
                 std::copy(t->data.begin(), t->data.end(), a.mutable_data());
                 return std::move(a);
             },
             py::arg("name"), "A copy of the weight `name`, or None.")
        .def("__repr__",
             [](const LayerSpec& l) {
                 return "LayerSpec(" + l.kind + ", '" + l.name + "', " + l.keras_class + ")";
             })
        .def_static(
            "fields",
            [] {
                std::vector<std::tuple<std::string, std::string, std::string>> out;
#define LENET_FIELD_INFO(type, field, init, doc) out.emplace_back(#field, py_type<type>(), doc);
                LENET_LAYER_FIELDS(LENET_FIELD_INFO)
#undef LENET_FIELD_INFO
                return out;
            },
            "(name, Python type, meaning) of every field, in declaration order.");

    py::class_<Network, std::shared_ptr<Network>>(m, "Network")
        .def(py::init([](const std::vector<LayerSpec>& layers, const std::vector<int64_t>& input, std::string source) {
                 return std::make_shared<Network>(layers, input, std::move(source));
             }),
             py::arg("layers"), py::arg("input_shape"), py::arg("source"),
             "Checks and lowers the layers; input_shape: Keras' per-sample input shape.")
        .def_property_readonly("input_shape", [](const Network& n) { return to_tuple(n.input().keras()); },
                               "Keras' per-sample input shape.")
        .def_property_readonly("output_shape", [](const Network& n) { return to_tuple(n.output().keras()); },
                               "Keras' per-sample output shape.")
        .def_property_readonly("output_size", &Network::output_size)
        .def_property_readonly("output_kind", [](const Network& n) { return output_kind(n.output_kind()); },
                               "'softmax', 'sigmoid' or 'scores': what the outputs are.")
        .def_property_readonly("channels_first", &Network::channels_first)
        .def_property_readonly("params", &Network::params)
        .def_property_readonly("macs", &Network::macs, "Multiply-adds per image (convolutions, dense layers).")
        .def("layers",
             [](const Network& n) {
                 py::list rows;
                 for (const auto& l : n.summary())
                     rows.append(py::make_tuple(l.name, l.keras_class, to_tuple(l.out.keras()), l.params));
                 return rows;
             },
             "One (name, keras_class, output_shape, params) per layer of the file.")
        .def("steps", [](const Network& n) {
            py::list rows;
            for (const auto& s : n.steps())
                rows.append(py::make_tuple(to_string(s.op), s.layers, s.act.str(),
                                           py::make_tuple(s.out.h, s.out.w, s.out.c)));
            return rows;
        },
        "One (op, keras_layers, activation, output_hwc) per executed step, after folding and fusion.");

    m.def(
        "expected_weights",
        [](const std::vector<LayerSpec>& layers, const std::vector<int64_t>& input, const std::string& source) {
            py::list out;
            for (const auto& slots : Network::expected_weights(layers, input, source)) {
                py::list row;
                for (const auto& s : slots) row.append(py::make_tuple(s.name, to_tuple(s.shape), s.count_only, s.ignored));
                out.append(row);
            }
            return out;
        },
        py::arg("layers"), py::arg("input_shape"), py::arg("source"),
        "Per layer, the weights it expects: (name, Keras shape, count_only, ignored). Checks the graph and the "
        "shapes as Network does, without weights.");
    m.def("layer_kinds", &layer_kinds, "Every layer kind the network knows.");
    m.def(
        "activations",
        [] {
            std::vector<std::string> names;
#define LENET_ACT_NAME(n) names.push_back(#n);
            LENET_ACTIVATIONS(LENET_ACT_NAME)
#undef LENET_ACT_NAME
            names.push_back("softmax");
            return names;
        },
        "Every activation the network knows.");
    m.def(
        "limits",
        [] {
            py::dict d;
            d["layers"] = limits::kLayers;
            d["inputs"] = limits::kInputs;
            d["kernel"] = limits::kKernel;
            d["stride"] = limits::kStride;
            d["dilation"] = limits::kDilation;
            d["pad"] = limits::kPad;
            d["dim"] = limits::kDim;
            d["channels"] = limits::kChannels;
            d["units"] = limits::kUnits;
            d["params"] = limits::kParams;
            d["activation"] = limits::kActivation;
            return d;
        },
        "The bounds of what the engine accepts (csrc/net/limits.h).");

    py::class_<Executor>(m, "Executor")
        .def(py::init([](std::shared_ptr<Network> net, const std::string& device, int threads, bool allow_tf32,
                         bool cuda_graphs, const std::string& cpu_kernels) {
                 BackendOptions options;
                 options.threads = threads;
                 options.allow_tf32 = allow_tf32;
                 options.cuda_graphs = cuda_graphs;
                 options.cpu_kernels = cpu_kernels;
                 return std::make_unique<Executor>(net, make_backend(device, options), threads);
             }),
             py::arg("network"), py::arg("device"), py::arg("threads"), py::arg("allow_tf32") = false,
             py::arg("cuda_graphs") = true, py::arg("cpu_kernels") = "auto")
        .def(
            "run", [](Executor& ex, const py::array_t<float, py::array::c_style>& x) {
                return run(ex, x, Executor::Output::raw);
            },
            py::arg("x"), "The outputs, as Keras' predict gives them, for a C-contiguous float32 batch in the "
                          "model's input shape.")
        .def(
            "probabilities", [](Executor& ex, const py::array_t<float, py::array::c_style>& x) {
                return run(ex, x, Executor::Output::probabilities);
            },
            py::arg("x"), "A distribution over the classes per input (see Executor::Output), for a C-contiguous "
                          "float32 batch in the model's input shape.")
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
                                          py::arg("kernels") = nodes));
                }
                return plans;
            },
            "What each plan made so far decided: per plan its capacity, its stream's facts (graph or eager) "
            "and, per kernel, the steps it runs and its facts (algorithm, fusion, workspace).")
        .def_property_readonly("device", [](const Executor& e) { return e.backend().name(); })
        .def_property_readonly("description", [](const Executor& e) { return e.backend().description(); })
        .def_property_readonly("threads", &Executor::threads);

    m.def("blas_config", &cpu::blas_info, "The OpenBLAS build the CPU backend runs on.");
    m.def(
        "cpu_kernel_sets",
        [] {
            std::vector<std::string> names;
            for (const auto* t : cpu::supported_tables()) names.push_back(t->isa);
            names.push_back("blas");
            names.push_back("nchw");
            return names;
        },
        "The CPU kernel sets this CPU runs, best first, then the BLAS reference path, then the CUDA backend's "
        "layout and algorithms on the CPU (for testing the GPU path without a GPU).");
    m.def(
        "mac_rate",
        [](int threads, double seconds) {
            py::gil_scoped_release release;
            return cpu::measure_mac_rate(threads, seconds);
        },
        py::arg("threads") = 1, py::arg("seconds") = 0.2,
        "Measured FP32 multiply-adds per second per thread, in GMAC/s, with `threads` threads busy.");
    m.def(
        "read_files",
        [](const std::vector<std::string>& paths, size_t max_bytes) {
            std::vector<FileRead> files;
            {
                py::gil_scoped_release release;
                files = read_files(paths, max_bytes);
            }
            py::list out(files.size());
            for (size_t i = 0; i < files.size(); ++i)
                out[i] = files[i].error ? py::object(py::int_(files[i].error))
                                        : py::object(py::bytes(files[i].data));
            return out;
        },
        py::arg("paths"), py::arg("max_bytes"),
        "Each file (paths as bytes) read whole, with the GIL released: its bytes, or the errno "
        "that stopped it (EFBIG when larger than max_bytes).");
    m.def(
        "read_gray_images",
        [](const std::vector<std::string>& paths, size_t max_bytes, int height, int width) {
            if (height < 1 || width < 1) throw py::value_error("read_gray_images: height and width must be positive");
            std::unique_ptr<GrayImagesRead> got;
            {
                py::gil_scoped_release release;
                got = std::make_unique<GrayImagesRead>(read_gray_images(paths, max_bytes, height, width));
            }
            py::list files(got->files.size());
            for (size_t i = 0; i < got->files.size(); ++i) {
                const FileRead& f = got->files[i];
                files[i] = f.error ? py::object(py::int_(f.error))
                                   : got->stack.rows[i] >= 0 ? py::object(py::none()) : py::object(py::bytes(f.data));
            }
            auto [pixels, rows] = stack_arrays(std::move(got->stack));
            return py::make_tuple(files, pixels, rows);
        },
        py::arg("paths"), py::arg("max_bytes"), py::arg("height"), py::arg("width"),
        "read_files, and each file that is a plain 8-bit grayscale PNG of height x width decoded as it "
        "is read (GIL released): (files, pixels, rows). pixels: uint8 (decoded, height, width); rows[i]: "
        "the row of file i in pixels, or -1; files[i]: None when decoded, else its bytes or errno.");
    m.def(
        "decode_gray_pngs",
        [](const py::list& items, int height, int width) {
            if (height < 1 || width < 1) throw py::value_error("decode_gray_pngs: height and width must be positive");
            // Views into the bytes objects, which `held` keeps alive while the GIL is released.
            std::vector<py::object> held;
            std::vector<std::string_view> data;
            for (const py::handle item : items) {
                held.push_back(py::reinterpret_borrow<py::object>(item));
                data.push_back(PyBytes_Check(item.ptr()) ? std::string_view(PyBytes_AS_STRING(item.ptr()),
                                                                            size_t(PyBytes_GET_SIZE(item.ptr())))
                                                         : std::string_view());
            }
            GrayStack stack(data.size(), height, width);
            {
                py::gil_scoped_release release;
                for (size_t i = 0; i < data.size(); ++i)
                    if (!data[i].empty()) stack.add(i, data[i]);
                stack.finish();
            }
            auto [pixels, rows] = stack_arrays(std::move(stack));
            return py::make_tuple(pixels, rows);
        },
        py::arg("items"), py::arg("height"), py::arg("width"),
        "Each item that is bytes of a plain 8-bit grayscale PNG of height x width, decoded (GIL "
        "released): (pixels, rows). pixels: uint8 (decoded, height, width); rows[i]: the row of item i "
        "in pixels, or -1 for an item left to the general path (any other object, format or form).");
    m.attr("png_decoder") = gray_png_decoder();
    m.attr("cuda_build") = LENET_CUDA_BUILD;
    m.def("backend_registered", &backend_registered, py::arg("name"));
    m.attr("__version__") = LENET_VERSION;
}
