// The parts of lenet._core, one per thing bound: each adds its classes and
// functions to the module (core_module.cpp calls them in this order).
#pragma once

#include <pybind11/pybind11.h>

namespace lenet::bindings {

namespace py = pybind11;

void bind_errors(py::module_& m);    // C++ errors -> the classes of lenet/errors.py
void bind_network(py::module_& m);   // LayerSpec, Network, the layer table's answers, limits
void bind_executor(py::module_& m);  // Executor: run, probabilities, describe
void bind_io(py::module_& m);        // file reading and the PNG lane
void bind_info(py::module_& m);      // build and machine facts: BLAS, kernel sets, versions

}  // namespace lenet::bindings
