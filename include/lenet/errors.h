// The exceptions lenet throws: part of the public C++ API (lenet/lenet.h) and of the
// core, defined here once. The Python binding translates each to the class of the same
// name in lenet/errors.py, keeping the message: a C++ program and a Python one see the
// same text for the same failure. Nothing else crosses the binding.
#pragma once

#include <stdexcept>
#include <string>

namespace lenet {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A model file is corrupt or inconsistent: a weight of the wrong shape, shapes
// that do not fit together, a parameter out of range.
struct ModelFileError : Error {
    using Error::Error;
};

// A well-formed model asks for something the engine does not implement.
struct UnsupportedModelError : Error {
    using Error::Error;
};

// An input array of the wrong shape, or a bad argument to a call.
struct InputError : Error {
    using Error::Error;
};

// A CUDA, cuDNN or cuBLAS failure, or the CUDA backend being unavailable.
struct CudaError : Error {
    using Error::Error;
};

}  // namespace lenet
