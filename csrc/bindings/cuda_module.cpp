// lenet._cuda: what Python asks of the CUDA backend, a library of its own
// (liblenet_cuda.so, which this module links and the core loads when an engine asks for
// device "cuda": one copy of its state in the process). Importing it loads nothing of
// cuDNN or cuBLAS: load_libraries opens them by the backend's own search (provider.h;
// libraries.h says how, and why not through the dynamic linker's global scope). The
// rest is what can be asked without running anything: device count, versions, memory,
// and the cuDNN planner (which needs no GPU).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "../backends/cuda/cuda_backend.h"
#include "../backends/cuda/fused_program.h"
#include "../backends/cuda/libraries.h"
#include "../backends/cuda/planner.h"
#include "../backends/cuda/provider.h"
#include "../backends/cuda/resources.h"
#include "../backends/cuda/transfer.h"
#include "../backends/nchw/plan.h"
#include "../net/network.h"

namespace py = pybind11;
using namespace lenet;
namespace lib = lenet::cuda::lib;
namespace fused = lenet::cuda::fused;

namespace {

std::string cuda_version(int v) { return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : "none"; }
std::string cudnn_version(size_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." + std::to_string(v % 100);
}

void require_libraries() {
    if (!cuda::libraries_loaded()) throw CudaError("cuDNN and cuBLAS are not loaded (lenet._cuda.load_libraries)");
}

py::dict load_libraries() {
    const cuda::LoadReport r = cuda::load_found_libraries();
    py::dict d;
    d["cudnn_path"] = r.cudnn_path;
    d["cublas_path"] = r.cublas_path;
    d["isolation"] = r.isolation;
    d["shadowed"] = r.shadowed;
    return d;
}

py::dict info() {
    require_libraries();
    py::dict d;
    const cuda::RuntimeFacts runtime = cuda::runtime_facts(false);
    d["cuda_runtime"] = cuda_version(runtime.runtime_version);
    d["cuda_driver"] = cuda_version(runtime.driver_version);
    d["cudnn_linked"] = cudnn_version(CUDNN_VERSION);
    d["cudnn_loaded"] = cudnn_version(lib::cudnnGetVersion());
    d["cublas_linked"] = std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + "." +
                         std::to_string(CUBLAS_VER_PATCH);
    int major = 0, minor = 0, patch = 0;
    lib::cublasGetProperty(MAJOR_VERSION, &major);
    lib::cublasGetProperty(MINOR_VERSION, &minor);
    lib::cublasGetProperty(PATCH_LEVEL, &patch);
    d["cublas_loaded"] = std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    d["cudnn_path"] = cuda::entry_point_library("cudnnCreate");
    d["cublas_path"] = cuda::entry_point_library("cublasCreate_v2");
    const cuda::LoadReport loaded = cuda::load_libraries({}, {});
    d["cuda_isolation"] = loaded.isolation;
    d["cuda_shadowed"] = loaded.shadowed;
    std::string why;
    if (cuda::device_count(&why) > 0) {
        if (!runtime.gpu.empty()) d["gpu"] = runtime.gpu;
    } else {
        d["gpu"] = py::none();
        d["gpu_error"] = why;
    }
    return d;
}

const char* math_name(cudnnMathType_t m) {
    switch (m) {
        case CUDNN_DEFAULT_MATH: return "CUDNN_DEFAULT_MATH";
        case CUDNN_TENSOR_OP_MATH: return "CUDNN_TENSOR_OP_MATH";
        case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION";
        case CUDNN_FMA_MATH: return "CUDNN_FMA_MATH";
    }
    return "?";
}

// One dict per step: what the planner gives cuDNN for `batch` images.
py::list plan(const std::shared_ptr<Network>& net, int batch, bool allow_tf32) {
    require_libraries();
    py::list out;
    for (const Step& s : net->steps()) {
        cuda::StepPlan p = cuda::plan_step(s, batch, allow_tf32);
        const Pads& q = p.padding.prepad;
        const bool cudnn_op = s.op == OpKind::conv2d || s.op == OpKind::max_pool2d || s.op == OpKind::avg_pool2d;
        py::dict d;
        d["op"] = to_string(s.op);
        d["layers"] = s.layers;
        d["out"] = py::make_tuple(batch, s.out.c, s.out.h, s.out.w);
        d["cudnn_out"] =
            cudnn_op ? py::object(py::make_tuple(p.cudnn_out[0], p.cudnn_out[1], p.cudnn_out[2], p.cudnn_out[3]))
                     : py::object(py::none());
        d["cudnn_pad"] = py::make_tuple(p.padding.pad_h, p.padding.pad_w);
        d["prepad"] = py::make_tuple(q.top, q.bottom, q.left, q.right);
        d["pad_value"] = p.pad_value;
        d["avg_factor"] = p.avg_factor;
        if (s.op == OpKind::conv2d) {
            cudnnMathType_t math{};
            LENET_CHECK(lib::cudnnGetConvolutionMathType(p.conv.get(), &math));
            d["math"] = math_name(math);
            d["fusion_tried"] = p.fusion.tried;
            d["fusion"] = p.fusion.why;
            const cuda::ConvKey key = cuda::conv_key(p, allow_tf32);
            d["conv_key"] = std::vector<int>(key.begin(), key.end());
        }
        out.append(d);
    }
    return out;
}

// The fused path's decision for a network and batch capacity, device-free: the
// rule of fused_program.h with the limits given (path "auto" or "fused").
fused::Program fused_program(const Network& net, int capacity, int min_blocks, int shared_bytes,
                             const std::string& path, std::string* why) {
    if (path != "auto" && path != "fused" && path != "fast")
        throw InputError("path must be 'auto', 'fused' or 'fast', not '" + path + "'");
    fused::Limits limits;
    limits.shared_bytes = shared_bytes;
    limits.column_blocks = path == "fast";
    if (path == "fused") limits.max_macs = limits.max_weight_bytes = std::numeric_limits<int64_t>::max();
    return fused::fused_plan(net.steps(), cuda::fused_launch_rows(path, capacity, net.input().d.size()), min_blocks,
                             limits, why);
}

py::dict fused_plan(const std::shared_ptr<Network>& net, int capacity, int min_blocks, int shared_bytes,
                    const std::string& path) {
    std::string why;
    const fused::Program p = fused_program(*net, capacity, min_blocks, shared_bytes, path, &why);
    py::dict d;
    d["fused"] = !p.ops.empty();
    d["why"] = why;
    if (p.ops.empty()) return d;
    d["summary"] = p.summary();
    d["images_per_block"] = p.tile.images;
    d["threads_per_block"] = p.threads;
    d["shared_bytes"] = int64_t(p.shared_floats) * 4;
    py::list ops;
    for (const fused::Op& op : p.ops) {
        py::dict o;
        o["code"] = fused::to_string(op.code);
        o["step"] = op.step;
        o["pooled"] = op.pool_kh > 0;
        o["out"] = py::make_tuple(op.out_c, op.out_h, op.out_w);
        o["splits"] = op.splits;
        o["column_block"] = op.column_block;
        ops.append(o);
    }
    d["ops"] = ops;
    return d;
}

// The fused program of `path` with its weights and biases in `constants` (host memory
// that must outlive it, filled here): what the emulation runs.
fused::Program host_program(const Network& net, int capacity, int min_blocks, int shared_bytes, const std::string& path,
                            std::vector<nchw::Constants>& constants) {
    std::string why;
    fused::Program p = fused_program(net, capacity, min_blocks, shared_bytes, path, &why);
    if (p.ops.empty()) throw UnsupportedModelError("not on the fused path: " + why);
    for (const Step& s : net.steps()) constants.push_back(nchw::constants(s));
    for (fused::Op& op : p.ops) {
        op.weights = constants[size_t(op.step)].weights.data();
        op.bias = constants[size_t(op.step)].bias.data();
    }
    return p;
}

// What the fused kernel computes, run on the host (fused::emulate): x is n images
// in NCHW order, float32 (or uint8 pixels times scale). For tests: the kernel's
// arithmetic and indexing, checked without a GPU.
py::array_t<float> fused_emulate(const std::shared_ptr<Network>& net, const py::array& x, int capacity, int min_blocks,
                                 int shared_bytes, float scale, const std::string& path) {
    // "fast": its program (column-blocked convolutions) within auto's size rule; else wherever it runs.
    std::vector<nchw::Constants> constants;
    const fused::Program p =
        host_program(*net, capacity, min_blocks, shared_bytes, path == "fast" ? path : "fused", constants);
    const bool pixels = py::isinstance<py::array_t<uint8_t>>(x) && x.dtype().kind() == 'u';
    const int64_t size = p.tile.input_size;
    if (x.ndim() < 1 || x.size() % size != 0)
        throw InputError("expected images of " + std::to_string(size) + " values, got an array of " +
                         std::to_string(x.size()));
    const int n = int(x.size() / size);
    py::array_t<float> y({int64_t(n), int64_t(p.tile.output_size)});
    if (pixels) {
        auto a = py::array_t < uint8_t, py::array::c_style | py::array::forcecast > ::ensure(x);
        fused::emulate(p, nullptr, a.data(), scale, y.mutable_data(), n);
    } else {
        auto a = py::array_t < float, py::array::c_style | py::array::forcecast > ::ensure(x);
        fused::emulate(p, a.data(), nullptr, 1.f, y.mutable_data(), n);
    }
    return y;
}

// The fused kernel's call on the host as a transfer makes it (transfer.h): "staged" and
// "mapped" hand the kernel a pointer to the input, "parameter" the launch's blob, packed
// as the stream packs it; then the completion flag the kernel raises. For tests.
py::dict fused_emulate_call(const std::shared_ptr<Network>& net, const py::array& x, int capacity,
                            const std::string& transfer, unsigned seq, float scale, int min_blocks) {
    std::vector<nchw::Constants> constants;
    const fused::Program p = host_program(*net, capacity, min_blocks, 232448, "fast", constants);
    const bool pixels = x.dtype().kind() == 'u' && x.itemsize() == 1;
    const int64_t size = p.tile.input_size, row = size * (pixels ? 1 : 4);
    if (x.size() % size != 0) throw InputError("expected images of " + std::to_string(size) + " values");
    const int n = int(x.size() / size);
    if (n > capacity) throw InputError("more images than the capacity");
    std::vector<unsigned char> input(size_t(n * row));
    std::memcpy(input.data(), x.data(), input.size());
    int blob = 0;
    std::vector<unsigned char> packed;
    const unsigned char* at = input.data();
    if (transfer == "parameter") {
        if (p.tile.images != 1) throw InputError("the parameter transfer runs tiles of one image only");
        blob = cuda::parameter_blob(int64_t(input.size()));
        if (!blob) throw InputError("no parameter blob holds " + std::to_string(input.size()) + " bytes");
        packed.assign(size_t(blob), 0xff);  // what the launch copies: the input, then bytes nothing reads
        std::memcpy(packed.data(), input.data(), input.size());
        at = packed.data();
    } else if (transfer != "staged" && transfer != "mapped") {
        throw InputError("transfer must be 'staged', 'parameter' or 'mapped', not '" + transfer + "'");
    }
    unsigned arrived = 0, flag = 0;
    const cuda::Completion done{&arrived, &flag, seq};
    py::array_t<float> y({int64_t(n), int64_t(p.tile.output_size)});
    fused::emulate(p, pixels ? nullptr : reinterpret_cast<const float*>(at), pixels ? at : nullptr,
                   pixels ? scale : 1.f, y.mutable_data(), n, transfer == "staged" ? cuda::Completion{} : done);
    py::dict d;
    d["y"] = y;
    d["flag"] = flag;
    d["arrived"] = arrived;
    d["blob_bytes"] = blob;
    d["images_per_block"] = p.tile.images;
    return d;
}

// The completion protocol alone (completion.h): `blocks` blocks count themselves in, in
// order; after each, (arrived, flag). Then the same again for the next call's number.
py::list completion_steps(unsigned blocks, unsigned seq) {
    unsigned arrived = 0, flag = 0;
    py::list steps;
    for (unsigned call = 0; call < 2; ++call)
        for (unsigned b = 0; b < blocks; ++b) {
            cuda::block_done({&arrived, &flag, seq + call}, blocks);
            steps.append(py::make_tuple(arrived, flag));
        }
    return steps;
}

// wait_for_flag (transfer.h) on a script: read() gives `flags` in turn (the last for
// ever after), query() `states` in turn ("running", "idle", "failed"; then "running"),
// now() advances `step_us` a call. Returns what it took, or raises its CudaError.
py::dict wait_script(const std::vector<unsigned>& flags, const std::vector<std::string>& states, unsigned seq,
                     double step_us, int64_t max_reads) {
    size_t f = 0, q = 0;
    int64_t reads = 0, queries = 0, yields = 0;
    double t = 0;
    auto read = [&]() -> uint32_t {
        if (++reads > max_reads) throw InputError("the script ran out: wait_for_flag did not stop");
        const unsigned v = flags.at(std::min(f, flags.size() - 1));
        ++f;
        return v;
    };
    auto query = [&](std::string* error) {
        ++queries;
        const std::string s = q < states.size() ? states[q++] : "running";
        if (s == "failed")
            *error = "cudaStreamQuery: cudaErrorIllegalAddress: an illegal memory access was encountered";
        return s == "idle"     ? cuda::StreamState::idle
               : s == "failed" ? cuda::StreamState::failed
                               : cuda::StreamState::running;
    };
    auto now = [&] { return t += step_us; };
    const int64_t took = cuda::wait_for_flag(read, seq, query, now, [&] { ++yields; });
    py::dict d;
    d["reads"] = took;
    d["queries"] = queries;
    d["yields"] = yields;
    return d;
}

py::dict memory() {
    py::dict d;
    const cuda::RuntimeFacts runtime = cuda::runtime_facts(true);
    const cuda::MemoryHeld held = cuda::memory_held();
    d["device_used"] = int64_t(runtime.total_bytes - runtime.free_bytes);
    d["lenet_device"] = held.device;
    d["lenet_pinned"] = held.pinned;
    std::string why;
    const int64_t process = cuda::process_memory_used(&why);
    d["process"] = process >= 0 ? py::object(py::int_(process)) : py::object(py::none());
    d["process_why"] = why;
    return d;
}

}  // namespace

PYBIND11_MODULE(_cuda, m) {
    m.doc() = "lenet's CUDA backend (cuDNN + cuBLAS)";
    m.def("load_libraries", &load_libraries,
          "Opens cuDNN and cuBLAS from the first candidate of each list of library_candidates() that opens "
          "(the search the core's CUDA backend makes for C++ programs too); raises CudaError naming every "
          "candidate tried. Returns the files opened and how they were isolated from other definitions in the "
          "process.");
    m.def(
        "library_candidates",
        [] {
            const cuda::Candidates c = cuda::library_candidates();
            return py::make_tuple(c.cudnn, c.cublas);
        },
        "(cuDNN candidates, cuBLAS candidates) in the order tried: LENET_CUDA_LIBRARY_PATH's folders alone when "
        "it is set, else the NVIDIA wheels beside the lenet package, the files the build compiled against, then "
        "the sonames for the system's search.");
    m.def("libraries_loaded", &cuda::libraries_loaded);
    m.attr("cross_reference_probes") = cuda::cross_reference_probes();
    m.def("device_count", [] { return cuda::device_count(nullptr); }, "Usable CUDA devices; 0 without GPU or driver.");
    m.def("unavailable_reason", [] {
        std::string why;
        return cuda::device_count(&why) > 0 ? std::string() : why;
    });
    m.def("memory", &memory,
          "Device memory: device_used (the whole device, every process), lenet_device and lenet_pinned (what "
          "lenet's engines hold now), process (this process on the device, from NVML, or None: process_why).");
    m.def("info", &info, "CUDA runtime/driver, cuDNN and cuBLAS versions (linked and loaded), paths, GPU name.");
    m.def("symbol_library", &cuda::entry_point_library, py::arg("symbol"),
          "The file that defines the entry point `symbol` this module calls (cudnnCreate, cublasCreate_v2, ...).");
    m.def(
        "pick_algorithm",
        [](const std::vector<py::dict>& results, bool allow_tf32, size_t workspace_limit) {
            std::vector<cuda::AlgoCandidate> c;
            for (const py::dict& d : results)
                c.push_back({d["algo"].cast<int>(), d["ok"].cast<bool>(), d["time_ms"].cast<float>(),
                             d["memory"].cast<size_t>(), d["deterministic"].cast<bool>(),
                             d["tensor_math"].cast<bool>()});
            return py::make_tuple(cuda::pick_algorithm(c, allow_tf32, workspace_limit),
                                  cuda::rank_algorithms(c, allow_tf32, workspace_limit));
        },
        py::arg("results"), py::arg("allow_tf32"), py::arg("workspace_limit"),
        "The backend's choice among cudnnFind results (dicts: algo, ok, time_ms, memory, deterministic, "
        "tensor_math; fastest first): (the first index or -1, every index in the order tried).");
    m.def("algorithm_name", &cuda::algorithm_name, py::arg("algo"));
    m.def("cublas_workspace_bytes", &cuda::cublas_workspace_bytes, py::arg("major"),
          "The cuBLAS workspace the backend gives a GPU of this compute capability major.");
    m.def("fused_plan", &fused_plan, py::arg("network"), py::arg("capacity"), py::arg("min_blocks") = 264,
          py::arg("shared_bytes") = 232448, py::arg("path") = "auto",
          "The fused whole-network kernel's decision for this network and plan capacity, without a GPU: "
          "fused or not (why), its ops, images and threads per block, shared memory. The defaults are an "
          "H100's (132 SMs x 2, 227 KiB a block).");
    m.def("fused_emulate", &fused_emulate, py::arg("network"), py::arg("x"), py::arg("capacity"),
          py::arg("min_blocks") = 264, py::arg("shared_bytes") = 232448, py::arg("scale") = 1.f,
          py::arg("path") = "fused",
          "The fused kernel's arithmetic run on the host, thread by thread and phase by phase (tests): outputs "
          "for x, n images in NCHW order (float32, or uint8 pixels times scale).");
    m.def(
        "transfer",
        [](const std::shared_ptr<Network>& net, int capacity, const std::string& path, int min_blocks,
           int shared_bytes) {
            // What a plan of this network and capacity would take (cuda_backend: the fused
            // kernel within auto's size rule on 'fast'), device-free.
            std::string why;
            const fused::Program p =
                fused_program(*net, capacity, min_blocks, shared_bytes, path == "fast" ? "fast" : "auto", &why);
            const bool fused = !p.ops.empty() && path != "library";
            const cuda::TransferPlan t =
                cuda::choose_transfer({path, fused, fused ? p.tile.images : 1, capacity, net->input().d.size()});
            return py::dict(py::arg("fused") = fused, py::arg("values") = cuda::to_string(t.values),
                            py::arg("pixels") = cuda::to_string(t.pixels), py::arg("why") = t.why);
        },
        py::arg("network"), py::arg("capacity"), py::arg("path") = "fast", py::arg("min_blocks") = 264,
        py::arg("shared_bytes") = 232448,
        "The transfer (staged, parameter, mapped, chunked) a plan of this capacity takes for float32 values and "
        "for uint8 pixels, and why, without a GPU (the defaults are an H100's).");
    m.def("parameter_blob", &cuda::parameter_blob, py::arg("bytes"));
    m.def("chunk_rows", &cuda::chunk_rows, py::arg("capacity"), py::arg("row_bytes"));
    m.def("fused_launch_rows", &cuda::fused_launch_rows, py::arg("path"), py::arg("capacity"), py::arg("input_size"));
    m.def(
        "chunk_schedule",
        [](int n, int rows, int streams) {
            py::list out;
            for (const cuda::Chunk& c : cuda::chunk_schedule(n, rows, streams))
                out.append(py::make_tuple(c.first, c.count, c.stream));
            return out;
        },
        py::arg("n"), py::arg("rows"), py::arg("streams"), "(first, count, stream) of each chunk of n rows.");
    m.def(
        "copy_rows",
        [](const py::array& x, int threads, bool copy) {
            // copy_rows over a real thread pool: (the copy, or None, and the first bad row).
            const bool floats = x.dtype().kind() == 'f' && x.itemsize() == 4;
            const int64_t count = x.ndim() ? x.shape(0) : 0, row = count ? int64_t(x.nbytes()) / count : 0;
            std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads - 1) : nullptr;
            py::array out(x.dtype(), std::vector<py::ssize_t>(x.shape(), x.shape() + x.ndim()));
            const int64_t bad =
                cuda::copy_rows(pool.get(), copy ? static_cast<char*>(out.mutable_data()) : nullptr,
                                static_cast<const char*>(x.data()), count, size_t(row), floats ? row / 4 : 0);
            return py::make_tuple(copy ? py::object(out) : py::object(py::none()), bad);
        },
        py::arg("x"), py::arg("threads"), py::arg("copy") = true);
    m.def(
        "host_buffer_lookup",
        [](const std::vector<std::tuple<uintptr_t, size_t, uintptr_t>>& regions,
           const std::vector<std::pair<uintptr_t, size_t>>& queries, const std::vector<uintptr_t>& removed) {
            cuda::HostBuffers buffers;
            for (const auto& [host, bytes, device] : regions)
                buffers.add(reinterpret_cast<const void*>(host), bytes, reinterpret_cast<const void*>(device));
            for (uintptr_t host : removed) buffers.remove(reinterpret_cast<const void*>(host));
            py::list out;
            for (const auto& [at, bytes] : queries) {
                const void* d = buffers.find(reinterpret_cast<const void*>(at), bytes);
                out.append(d ? py::object(py::int_(reinterpret_cast<uintptr_t>(d))) : py::object(py::none()));
            }
            return out;
        },
        py::arg("regions"), py::arg("queries"), py::arg("removed") = std::vector<uintptr_t>{},
        "HostBuffers on made-up addresses: the device address of each (address, bytes) query, or None.");
    m.def("fused_emulate_call", &fused_emulate_call, py::arg("network"), py::arg("x"), py::arg("capacity"),
          py::arg("transfer"), py::arg("seq") = 1, py::arg("scale") = 1.f, py::arg("min_blocks") = 264,
          "The fused kernel's call emulated on the host as a transfer makes it: y, the completion flag and count.");
    m.def("completion_steps", &completion_steps, py::arg("blocks"), py::arg("seq"));
    m.def("wait_script", &wait_script, py::arg("flags"), py::arg("states"), py::arg("seq"), py::arg("step_us") = 1.0,
          py::arg("max_reads") = 1000000);
    m.def("plan", &plan, py::arg("network"), py::arg("batch"), py::arg("allow_tf32") = false,
          "The cuDNN planner's descriptors for each step, the math type each convolution descriptor holds and "
          "whether cuDNN's fused call is tried: runs without a GPU.");
}
