// What was built and what this machine runs: versions, the BLAS, the CPU kernel sets,
// the backends registered; and the translation of C++ errors.
#include <pybind11/stl.h>

#include "../backends/backend.h"
#include "../backends/cpu/cpu_backend.h"
#include "../backends/cpu/direct.h"
#include "../support/errors.h"
#include "bindings.h"
#include "build_info.h"
#include "lenet/version.h"

namespace lenet::bindings {

void bind_errors(py::module_& m) {
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
}

void bind_info(py::module_& m) {
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
    m.attr("cuda_build") = LENET_CUDA_BUILD;
    m.def("backend_registered", &backend_registered, py::arg("name"));
    m.attr("__version__") = LENET_VERSION_STRING;
}

}  // namespace lenet::bindings
