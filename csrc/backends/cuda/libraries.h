// cuDNN and cuBLAS, called through a table of entry points looked up (dlsym) in
// the exact library files this module opened, never through the dynamic
// linker's global scope.
//
// Why a table: a process may hold other definitions of the same names in its
// global scope. TensorFlow, imported first, exports stubs of the whole cuBLAS,
// cuBLASLt, cuDNN and CUDA runtime APIs (forwarding to the CUDA 12 libraries it
// looks for), and a module linked the ordinary way binds its calls to the first
// definition found there: lenet's cublasCreate_v2 went to TensorFlow's stub
// (cublas_loaded read '0.0.0'). dlsym on a handle searches that library and its
// own dependencies only, so these calls reach the wheel's libraries whatever was
// loaded before. The module itself has no link-time dependency on either library,
// and its static CUDA runtime is internal to it (hidden symbols).
//
// Why not RTLD_DEEPBIND on the module (the earlier remedy): DEEPBIND gives a
// library its own view of every symbol it defines or its dependencies define,
// the C++ runtime included; where that view differs from the process's
// (iostream objects, locale facets, an interposed allocator: GCC bug 42679),
// ordinary code crashes (ostream << double segfaulted on a GPU machine).
//
// The libraries' own cross-references (cuBLAS calling cuBLASLt, cuDNN's
// sub-libraries calling one another) are still bound by the dynamic linker. Only
// when the global scope already holds foreign definitions of those names (the
// TensorFlow case, checked with dlsym(RTLD_DEFAULT) before loading) are the
// NVIDIA libraries, and only they, opened with RTLD_DEEPBIND: they keep their
// C++ runtime to themselves (no iostreams or objects cross their API), and the
// alternative would be cuBLAS calling TensorFlow's stubs. `isolation` in the load
// report says which was done and why.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <string>
#include <vector>

// Every entry point lenet calls, by its exported name (cublas_v2.h maps
// cublasCreate to cublasCreate_v2 and so on).
// clang-format off: one table entry per line, as written
#define LENET_CUDNN_ENTRY_POINTS(X)                                                                                  \
    X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnGetLastErrorString) X(cudnnCreate) X(cudnnDestroy)             \
    X(cudnnSetStream) X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensor4dDescriptor) \
    X(cudnnSetTensor4dDescriptorEx) X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor)                  \
    X(cudnnSetFilter4dDescriptor) X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)          \
    X(cudnnSetConvolution2dDescriptor) X(cudnnSetConvolutionGroupCount) X(cudnnSetConvolutionMathType)              \
    X(cudnnGetConvolutionMathType) X(cudnnGetConvolution2dForwardOutputDim) X(cudnnCreatePoolingDescriptor)         \
    X(cudnnDestroyPoolingDescriptor) X(cudnnSetPooling2dDescriptor) X(cudnnGetPooling2dForwardOutputDim)            \
    X(cudnnCreateActivationDescriptor) X(cudnnDestroyActivationDescriptor) X(cudnnSetActivationDescriptor)          \
    X(cudnnFindConvolutionForwardAlgorithmEx) X(cudnnConvolutionForward) X(cudnnConvolutionBiasActivationForward)   \
    X(cudnnPoolingForward) X(cudnnSoftmaxForward) X(cudnnSetTensor) X(cudnnTransformTensor)
// clang-format on

// clang-format off: one table entry per line, as written
#define LENET_CUBLAS_ENTRY_POINTS(X)                                                                       \
    X(cublasGetProperty) X(cublasGetStatusName) X(cublasGetStatusString) X(cublasCreate_v2) X(cublasDestroy_v2) \
    X(cublasSetStream_v2) X(cublasSetWorkspace_v2) X(cublasSetMathMode) X(cublasGetMathMode) X(cublasSgemm_v2)
// clang-format on

namespace lenet::cuda {

struct Api {
#define LENET_API_FIELD(f) decltype(&::f) f = nullptr;
    LENET_CUDNN_ENTRY_POINTS(LENET_API_FIELD)
    LENET_CUBLAS_ENTRY_POINTS(LENET_API_FIELD)
#undef LENET_API_FIELD
};

// The table. Filled once by load_libraries, before any backend exists (the
// module registers the backend only after a successful load).
const Api& api();

struct LoadReport {
    std::string cudnn_path, cublas_path;  // the files opened, as the loader resolved them
    std::string isolation;                // "none", or "RTLD_DEEPBIND: <why>" (see above)
    // "", or which of the files opened by path another copy shadows by soname (issue 67:
    // libcudnn.so.9 opens its sub-libraries by soname and would get that copy).
    std::string shadowed;
};

// Opens cuDNN (its sub-libraries first, dependencies before dependents) and cuBLAS
// (cuBLASLt first) from the first candidate of each list that opens, and looks up
// every entry point in it. A candidate is a path, or a bare soname for the system
// search. Throws CudaError naming every candidate tried and why it failed. Loading
// again returns the first report.
LoadReport load_libraries(const std::vector<std::string>& cudnn_candidates,
                          const std::vector<std::string>& cublas_candidates);
bool libraries_loaded();

// The names looked up in the global scope to decide the isolation (see above).
const std::vector<std::string>& cross_reference_probes();

// The file that defines a table entry ("cudnnCreate", "cublasCreate_v2", ...): the
// binding this module's calls use. Empty for an unknown name or before loading.
std::string entry_point_library(const std::string& name);

// lib::cudnnCreate(&h) and so on: the call through the table, with the library's
// own signature (and usable as a constant, e.g. as a deleter's template argument).
namespace lib {
template <auto Member>
struct Call;
template <typename R, typename... A, R (*Api::*Member)(A...)>
struct Call<Member> {
    static R call(A... a) { return (api().*Member)(a...); }
};
#define LENET_API_CALL(f) inline constexpr auto f = &Call<&Api::f>::call;
LENET_CUDNN_ENTRY_POINTS(LENET_API_CALL)
LENET_CUBLAS_ENTRY_POINTS(LENET_API_CALL)
#undef LENET_API_CALL
}  // namespace lib

}  // namespace lenet::cuda
