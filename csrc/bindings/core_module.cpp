// lenet._core: the network, the executor and the CPU backend for Python. Thin:
// argument conversion, GIL release, and translation of the C++ errors to the
// classes of lenet/errors.py.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>

#include "../backends/backend.h"
#include "../backends/cpu/cpu_backend.h"
#include "../backends/cpu/direct.h"
#include "../net/errors.h"
#include "../net/executor.h"
#include "../net/network.h"
#include "version.h"

namespace py = pybind11;
using namespace lenet;

namespace {

std::vector<float> to_floats(const py::array_t<float, py::array::c_style | py::array::forcecast>& a,
                             std::vector<int64_t>* shape) {
    shape->assign(a.shape(), a.shape() + a.ndim());
    return std::vector<float>(a.data(), a.data() + a.size());
}

py::array_t<float> run(Executor& ex, const py::array_t<float, py::array::c_style>& x) {
    const Network& net = ex.network();
    const Dims d = net.input();
    const bool nchw = net.input_format() == DataFormat::channels_first;
    const int64_t expect[3] = {nchw ? d.c : d.h, nchw ? d.h : d.w, nchw ? d.w : d.c};
    bool ok = x.ndim() == 4;
    for (int i = 0; ok && i < 3; ++i) ok = x.shape(i + 1) == expect[i];
    if (!ok) {
        std::string got = "(";
        for (py::ssize_t i = 0; i < x.ndim(); ++i) got += (i ? ", " : "") + std::to_string(x.shape(i));
        throw InputError("expected a float32 array of shape (n, " + std::to_string(expect[0]) + ", " +
                         std::to_string(expect[1]) + ", " + std::to_string(expect[2]) + "), got " + got + ")");
    }
    const int64_t n = x.shape(0);
    const int64_t classes = net.classes();
    py::array_t<float> y({n, classes});
    const float* src = x.data();
    float* dst = y.mutable_data();
    {
        py::gil_scoped_release release;
        ex.run(src, dst, n);
    }
    return y;
}

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

    py::enum_<LayerKind>(m, "LayerKind")
        .value("conv2d", LayerKind::conv2d)
        .value("max_pool2d", LayerKind::max_pool2d)
        .value("avg_pool2d", LayerKind::avg_pool2d)
        .value("zero_pad2d", LayerKind::zero_pad2d)
        .value("flatten", LayerKind::flatten)
        .value("dense", LayerKind::dense)
        .value("activation", LayerKind::activation)
        .value("rescaling", LayerKind::rescaling);
    py::enum_<Act>(m, "Act")
        .value("linear", Act::linear)
        .value("relu", Act::relu)
        .value("tanh", Act::tanh)
        .value("sigmoid", Act::sigmoid)
        .value("softmax", Act::softmax);
    py::enum_<FlattenOrder>(m, "FlattenOrder").value("hwc", FlattenOrder::hwc).value("chw", FlattenOrder::chw);
    py::enum_<DataFormat>(m, "DataFormat")
        .value("channels_last", DataFormat::channels_last)
        .value("channels_first", DataFormat::channels_first);

    py::class_<LayerSpec>(m, "LayerSpec")
        .def(py::init<>())
        .def_readwrite("kind", &LayerSpec::kind)
        .def_readwrite("name", &LayerSpec::name)
        .def_readwrite("keras_class", &LayerSpec::keras_class)
        .def_readwrite("kernel", &LayerSpec::kernel)
        .def_readwrite("strides", &LayerSpec::strides)
        .def_readwrite("same_padding", &LayerSpec::same_padding)
        .def_readwrite("filters", &LayerSpec::filters)
        .def_readwrite("units", &LayerSpec::units)
        .def_readwrite("activation", &LayerSpec::activation)
        .def_readwrite("pad", &LayerSpec::pad)
        .def_readwrite("scale", &LayerSpec::scale)
        .def_readwrite("offset", &LayerSpec::offset)
        .def_readwrite("flatten_order", &LayerSpec::flatten_order)
        .def("set_weights",
             [](LayerSpec& l, const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
                 l.weights = to_floats(a, &l.weights_shape);
             })
        .def("set_bias", [](LayerSpec& l, const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
            l.bias = to_floats(a, &l.bias_shape);
        });

    py::class_<Network, std::shared_ptr<Network>>(m, "Network")
        .def(py::init([](const std::vector<LayerSpec>& layers, std::array<int, 3> hwc, DataFormat format,
                         std::string source, bool classifier) {
                 return std::make_shared<Network>(layers, Dims{hwc[0], hwc[1], hwc[2]}, format, std::move(source),
                                                  classifier);
             }),
             py::arg("layers"), py::arg("input_hwc"), py::arg("data_format"), py::arg("source"),
             py::arg("classifier") = true)
        .def_property_readonly("classes", &Network::classes)
        .def_property_readonly("input_hwc",
                               [](const Network& n) { return std::array<int, 3>{n.input().h, n.input().w, n.input().c}; })
        .def_property_readonly("data_format", &Network::input_format)
        .def_property_readonly("softmax_appended", &Network::softmax_appended)
        .def_property_readonly("params", &Network::params)
        .def_property_readonly("macs", &Network::macs, "Multiply-adds per image (convolutions, dense layers).")
        .def("layers",
             [](const Network& n) {
                 py::list rows;
                 for (const auto& l : n.summary()) {
                     py::tuple shape = l.flat ? py::tuple(py::make_tuple(l.out.size()))
                                             : py::tuple(py::make_tuple(l.out.h, l.out.w, l.out.c));
                     rows.append(py::make_tuple(l.name, l.keras_class, shape, l.params));
                 }
                 return rows;
             },
             "One (name, keras_class, output_shape, params) per layer of the file.")
        .def("steps", [](const Network& n) {
            py::list rows;
            for (const auto& s : n.steps())
                rows.append(py::make_tuple(to_string(s.op), s.layers, to_string(s.act),
                                           py::make_tuple(s.out.h, s.out.w, s.out.c)));
            return rows;
        },
        "One (op, keras_layers, activation, output_hwc) per executed step, after fusion.");

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
        .def("run", &run, py::arg("x"), "Probabilities (n, classes) for a C-contiguous float32 batch.")
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
            return names;
        },
        "The CPU kernel sets this CPU runs, best first, then the BLAS reference path.");
    m.def(
        "mac_rate",
        [](int threads, double seconds) {
            py::gil_scoped_release release;
            return cpu::measure_mac_rate(threads, seconds);
        },
        py::arg("threads") = 1, py::arg("seconds") = 0.2,
        "Measured FP32 multiply-adds per second per thread, in GMAC/s, with `threads` threads busy.");
    m.def("backend_registered", &backend_registered, py::arg("name"));
    m.attr("__version__") = LENET_VERSION;
}
