#include "libraries.h"

#include <dlfcn.h>
#include <link.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "../../support/errors.h"

namespace lenet::cuda {
namespace {

Api g_api;
std::optional<LoadReport> g_report;
std::mutex g_mutex;

// Loaded before the library that needs them, so that every one is the file next to
// it (libcudnn.so.9 opens its sub-libraries by soname when first needed and finds
// these). libcudnn_adv (RNNs, attention) is never used. Opened in this order; the
// last of each list is the one the entry points come from.
const std::vector<std::string> kCudnnFiles = {"libcudnn_graph.so.9",
                                              "libcudnn_engines_precompiled.so.9",
                                              "libcudnn_engines_runtime_compiled.so.9",
                                              "libcudnn_heuristic.so.9",
                                              "libcudnn_ops.so.9",
                                              "libcudnn_cnn.so.9",
                                              "libcudnn.so.9"};
const std::vector<std::string> kCublasFiles = {"libcublasLt.so.13", "libcublas.so.13"};

// Names the NVIDIA libraries import from one another (cuBLAS from cuBLASLt, cuDNN's
// sub-libraries from its graph and ops libraries). A definition of one of them in
// the global scope, from a file that is not the one we load, would capture those
// calls: then the libraries are opened with RTLD_DEEPBIND (see libraries.h).
const std::vector<std::string> kCrossReferences = {"cublasLtCtxInit",
                                                   "cublasLtMatmul",
                                                   "cudnnBackendExecute",
                                                   "cudnnBackendCreateDescriptor",
                                                   "cudnnSetTensor4dDescriptor",
                                                   "cudnnGetStream"};

std::string directory_of(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

std::string real_path(const std::string& path) {
    char buf[PATH_MAX];
    return realpath(path.c_str(), buf) ? std::string(buf) : path;
}

// A foreign definition in the global scope of one of kCrossReferences, or "".
std::string foreign_definition(const std::vector<std::string>& own_dirs) {
    for (const std::string& name : kCrossReferences) {
        void* sym = dlsym(RTLD_DEFAULT, name.c_str());
        if (!sym) continue;
        Dl_info where{};
        const std::string file = dladdr(sym, &where) && where.dli_fname ? real_path(where.dli_fname) : "?";
        bool ours = false;
        for (const std::string& d : own_dirs) ours = ours || (!d.empty() && file.rfind(d, 0) == 0);
        if (!ours) return name + " is defined by " + file;
    }
    return "";
}

// The handles of one candidate's files, closed (last opened first) unless kept: a
// candidate that fails leaves nothing of its own loaded.
struct OpenSet {
    std::vector<void*> handles;
    bool keep = false;
    OpenSet() = default;
    OpenSet(OpenSet&& o) noexcept : handles(std::move(o.handles)), keep(o.keep) { o.handles.clear(); }
    OpenSet& operator=(OpenSet&&) = delete;
    ~OpenSet() {
        if (!keep)
            for (auto h = handles.rbegin(); h != handles.rend(); ++h) dlclose(*h);
    }
    void* last() const { return handles.empty() ? nullptr : handles.back(); }
};

// Opens `files` from the directory of `candidate` (or by soname when the candidate
// is a bare soname); the last one's handle is last(), none with *why set.
OpenSet open_set(const std::string& candidate, const std::vector<std::string>& files, int flags, std::string* why) {
    const std::string dir = directory_of(candidate);
    OpenSet set;
    for (const std::string& f : files) {
        const std::string path = dir.empty() ? f : dir + f;
        const bool required = &f == &files.back() || f == "libcublasLt.so.13";
        void* h = dlopen(path.c_str(), flags);
        if (!h) {
            const char* e = dlerror();
            if (required) {
                *why = candidate + ": " + (e ? e : "dlopen failed");
                return OpenSet();  // `set` closes what it opened
            }
            continue;  // an optional sub-library: libcudnn.so.9 reports what it lacks when asked
        }
        set.handles.push_back(h);
    }
    return set;
}

// The file a soname resolves to in this process now ("" if none is loaded): what
// libcudnn.so.9 gets when it opens a sub-library by soname.
std::string loaded_as(const std::string& soname) {
    void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        dlerror();
        return "";
    }
    link_map* map = nullptr;
    const std::string file = dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name ? real_path(map->l_name) : "";
    dlclose(h);
    return file;
}

// Where one of `files`, opened from `dir`, resolves by soname to another file (another
// package loaded a different copy first): a mix of two cuDNN builds. "" when none does.
std::string shadowed(const std::string& dir, const std::vector<std::string>& files) {
    if (dir.empty()) return "";  // opened by soname: the system's choice is the only one
    for (const std::string& f : files) {
        const std::string ours = real_path(dir + f), theirs = loaded_as(f);
        if (!theirs.empty() && theirs != ours)
            return f + " resolves by soname to " + theirs + ", not " + ours +
                   " (another package loaded its own copy first; the library that opens it by soname gets that one)";
    }
    return "";
}

template <typename T>
bool lookup(void* handle, const char* name, T& slot, std::string* missing) {
    dlerror();
    void* p = dlsym(handle, name);
    if (!p) {
        *missing += (missing->empty() ? "" : ", ") + std::string(name);
        return false;
    }
    slot = reinterpret_cast<T>(p);
    return true;
}

std::string library_of(const void* p) {
    Dl_info where{};
    return p && dladdr(p, &where) && where.dli_fname ? real_path(where.dli_fname) : std::string();
}

}  // namespace

const Api& api() { return g_api; }

const std::vector<std::string>& cross_reference_probes() { return kCrossReferences; }

bool libraries_loaded() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_report.has_value();
}

LoadReport load_libraries(const std::vector<std::string>& cudnn_candidates,
                          const std::vector<std::string>& cublas_candidates) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_report) return *g_report;

    std::vector<std::string> dirs;
    for (const auto* list : {&cudnn_candidates, &cublas_candidates})
        for (const std::string& c : *list)
            if (!directory_of(c).empty()) dirs.push_back(directory_of(real_path(c)));
    const std::string foreign = foreign_definition(dirs);
    int flags = RTLD_NOW | RTLD_LOCAL;
    LoadReport report;
    report.isolation = "none";
    if (!foreign.empty()) {
        flags |= RTLD_DEEPBIND;
        report.isolation = "RTLD_DEEPBIND for the cuDNN and cuBLAS libraries only: " + foreign +
                           ", which would otherwise capture their calls to one another";
    }

    Api table;
    auto load = [&](const std::vector<std::string>& candidates, const std::vector<std::string>& files, const char* what,
                    auto&& fill) -> std::string {
        std::string tried;
        for (const std::string& c : candidates) {
            std::string why;
            OpenSet set = open_set(c, files, flags, &why);
            if (!set.last()) {
                tried += "\n  " + why;
                continue;
            }
            std::string missing;
            if (!fill(set.last(), &missing)) {
                tried += "\n  " + c + ": no " + missing;
                continue;
            }
            set.keep = true;
            return c;
        }
        throw CudaError(std::string("cannot load ") + what + "; tried:" + (tried.empty() ? " nothing" : tried));
    };
    const std::string cudnn = load(cudnn_candidates, kCudnnFiles, "cuDNN 9", [&](void* h, std::string* missing) {
        bool ok = true;
#define LENET_LOOKUP(f) ok = lookup(h, #f, table.f, missing) && ok;
        LENET_CUDNN_ENTRY_POINTS(LENET_LOOKUP)
        return ok;
    });
    const std::string cublas = load(cublas_candidates, kCublasFiles, "cuBLAS 13", [&](void* h, std::string* missing) {
        bool ok = true;
        LENET_CUBLAS_ENTRY_POINTS(LENET_LOOKUP)
#undef LENET_LOOKUP
        return ok;
    });
    report.shadowed = shadowed(directory_of(cudnn), kCudnnFiles);
    if (report.shadowed.empty()) report.shadowed = shadowed(directory_of(cublas), kCublasFiles);
    g_api = table;
    report.cudnn_path = library_of(reinterpret_cast<const void*>(table.cudnnCreate));
    report.cublas_path = library_of(reinterpret_cast<const void*>(table.cublasCreate_v2));
    g_report = report;
    return report;
}

std::string entry_point_library(const std::string& name) {
    const void* p = nullptr;
#define LENET_FIND(f) \
    if (name == #f) p = reinterpret_cast<const void*>(g_api.f);
    LENET_CUDNN_ENTRY_POINTS(LENET_FIND)
    LENET_CUBLAS_ENTRY_POINTS(LENET_FIND)
#undef LENET_FIND
    return library_of(p);
}

}  // namespace lenet::cuda
