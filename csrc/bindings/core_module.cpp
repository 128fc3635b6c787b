// lenet._core: the network, the executor and the CPU backend for Python. Thin:
// argument conversion, GIL release, and translation of the C++ errors to the
// classes of lenet/errors.py. One file per thing bound (bindings.h).
#include <pybind11/pybind11.h>

#include "bindings.h"

PYBIND11_MODULE(_core, m) {
    m.doc() = "lenet's C++ core: network, executor, CPU backend";
    using namespace lenet::bindings;
    bind_errors(m);
    bind_network(m);
    bind_executor(m);
    bind_io(m);
    bind_info(m);
}
