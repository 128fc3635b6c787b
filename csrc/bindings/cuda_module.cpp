// lenet._cuda: registers the CUDA backend with the core's registry when
// imported, and exposes what can be asked without running anything: device
// count, versions, and the cuDNN planner (which needs no GPU).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <string>

#include "../backends/cuda/cuda_backend.h"
#include "../backends/cuda/planner.h"
#include "../net/network.h"

namespace py = pybind11;
using namespace lenet;

namespace {

std::string cuda_version(int v) { return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "none"; }
std::string cudnn_version(size_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

// The functions whose binding says which cuBLAS and cuDNN this module calls. Taking
// a function's address here reads the module's own GOT entry: the definition the
// dynamic linker bound the module's calls to, whichever library that is.
const std::map<std::string, const void*>& probes() {
    static const std::map<std::string, const void*> table{
        {"cublasCreate_v2", reinterpret_cast<const void*>(&cublasCreate_v2)},
        {"cublasGetProperty", reinterpret_cast<const void*>(&cublasGetProperty)},
        {"cudnnCreate", reinterpret_cast<const void*>(&cudnnCreate)},
        {"cudnnGetVersion", reinterpret_cast<const void*>(&cudnnGetVersion)},
    };
    return table;
}

// The file of the shared object that defines `symbol` as this module calls it.
std::string symbol_library(const std::string& symbol) {
    const auto it = probes().find(symbol);
    if (it == probes().end()) throw py::value_error("no probe for '" + symbol + "'");
    Dl_info where{};
    if (!dladdr(it->second, &where) || !where.dli_fname) return "";
    return where.dli_fname;
}

py::dict info() {
    py::dict d;
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    d["cuda_runtime"] = cuda_version(runtime);
    d["cuda_driver"] = cuda_version(driver);
    d["cudnn_linked"] = cudnn_version(CUDNN_VERSION);
    d["cudnn_loaded"] = cudnn_version(cudnnGetVersion());
    d["cublas_linked"] = std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + "." +
                         std::to_string(CUBLAS_VER_PATCH);
    int major = 0, minor = 0, patch = 0;
    cublasGetProperty(MAJOR_VERSION, &major);
    cublasGetProperty(MINOR_VERSION, &minor);
    cublasGetProperty(PATCH_LEVEL, &patch);
    d["cublas_loaded"] = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    d["cudnn_path"] = symbol_library("cudnnCreate");
    d["cublas_path"] = symbol_library("cublasCreate_v2");
    std::string why;
    if (cuda::device_count(&why) > 0) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) d["gpu"] = std::string(prop.name);
    } else {
        d["gpu"] = py::none();
        d["gpu_error"] = why;
    }
    return d;
}

// One dict per step: what the planner gives cuDNN for `batch` images.
py::list plan(const std::shared_ptr<Network>& net, int batch) {
    py::list out;
    for (const Step& s : net->steps()) {
        cuda::StepPlan p = cuda::plan_step(s, batch, false);
        const Pads& q = p.padding.prepad;
        py::dict d;
        d["op"] = to_string(s.op);
        d["layers"] = s.layers;
        d["out"] = py::make_tuple(batch, s.out.c, s.out.h, s.out.w);
        d["cudnn_out"] = s.op == OpKind::conv2d || s.op == OpKind::max_pool2d || s.op == OpKind::avg_pool2d
                             ? py::object(py::make_tuple(p.cudnn_out[0], p.cudnn_out[1], p.cudnn_out[2], p.cudnn_out[3]))
                             : py::object(py::none());
        d["cudnn_pad"] = py::make_tuple(p.padding.pad_h, p.padding.pad_w);
        d["prepad"] = py::make_tuple(q.top, q.bottom, q.left, q.right);
        d["pad_value"] = p.pad_value;
        d["avg_factor"] = p.avg_factor;
        out.append(d);
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_cuda, m) {
    m.doc() = "lenet's CUDA backend (cuDNN + cuBLAS)";
    register_backend("cuda", cuda::make_cuda_backend);
    m.def("device_count", [] { return cuda::device_count(nullptr); }, "Usable CUDA devices; 0 without GPU or driver.");
    m.def("unavailable_reason", [] {
        std::string why;
        return cuda::device_count(&why) > 0 ? std::string() : why;
    });
    m.def("memory_used", [] {
        size_t free = 0, total = 0;
        if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
            cudaGetLastError();
            return size_t(0);
        }
        return total - free;
    }, "Bytes of GPU memory in use on the device (0 without a GPU).");
    m.def("info", &info, "CUDA runtime/driver, cuDNN and cuBLAS versions (linked and loaded), GPU name.");
    m.def("symbol_library", &symbol_library, py::arg("symbol"),
          "The shared object this module's calls to `symbol` are bound to (cublasCreate_v2, cublasGetProperty, "
          "cudnnCreate, cudnnGetVersion).");
    m.def(
        "pick_algorithm",
        [](const std::vector<py::dict>& results, bool allow_tf32, size_t workspace_limit) {
            std::vector<cuda::AlgoCandidate> c;
            for (const py::dict& d : results)
                c.push_back({d["algo"].cast<int>(), d["ok"].cast<bool>(), d["time_ms"].cast<float>(),
                             d["memory"].cast<size_t>(), d["deterministic"].cast<bool>(),
                             d["tensor_math"].cast<bool>()});
            return cuda::pick_algorithm(c, allow_tf32, workspace_limit);
        },
        py::arg("results"), py::arg("allow_tf32"), py::arg("workspace_limit"),
        "The backend's choice among cudnnFind results (dicts: algo, ok, time_ms, memory, deterministic, "
        "tensor_math; fastest first): an index, or -1.");
    m.def("algorithm_name", &cuda::algorithm_name, py::arg("algo"));
    m.def("cublas_workspace_bytes", &cuda::cublas_workspace_bytes, py::arg("major"),
          "The cuBLAS workspace the backend gives a GPU of this compute capability major.");
    m.def("plan", &plan, py::arg("network"), py::arg("batch"),
          "The cuDNN planner's descriptors for each step: runs without a GPU.");
}
