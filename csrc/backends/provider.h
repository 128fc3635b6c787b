// A backend in a library of its own: the CUDA backend, liblenet_cuda.so, beside the
// core's library. The core loads it the first time a program asks for its device
// (registry.cpp), as ONNX Runtime loads its execution providers and ggml its backends:
// a program that never asks loads nothing of CUDA, and C++ programs and Python load the
// same library, which finds its own dependencies by one search.
//
// The library exports one C function, kCudaProviderEntry, returning this table. It comes
// from the same build as the core (a Backend, its Steps and BackendOptions cross between
// them as C++ objects of this build's classes): `build` must equal kBackendBuild, else
// the core refuses it.
#pragma once

#include <lenet/version.h>

#include "backend.h"

namespace lenet {

// The build a provider must come from: lenet's version and the compiler's.
constexpr const char* kBackendBuild = "lenet " LENET_VERSION_STRING ", " __VERSION__;

struct BackendProvider {
    const char* build;  // kBackendBuild of the library's own build
    // Loads what the backend needs (CUDA: the driver, then cuDNN and cuBLAS), once:
    // "" when all is there, else what is missing, in words (the same on every call).
    const char* (*load)();
    BackendFactoryFunction make;
};

constexpr const char* kCudaProviderEntry = "lenet_cuda_provider";
constexpr const char* kCudaProviderFile = "liblenet_cuda.so";
using BackendProviderEntry = const BackendProvider* (*)();

}  // namespace lenet
