"""Loads the compiled core, and the CUDA backend module on first use.

The extension modules find OpenBLAS through an rpath into the scipy-openblas32
wheel; loading the library first from its wheel also covers installs where the
two packages do not sit side by side.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
import threading


def _preload_openblas() -> None:
    """Loads our OpenBLAS with one thread. The engine runs it single-threaded inside
    its own workers (and only on the cpu_kernels="blas" path); left to itself,
    OpenBLAS starts a thread per core when it loads (importing scipy_openblas32
    loads it), and those threads poll, taking time from the engine's workers on
    small machines. NumPy's own OpenBLAS (other symbols) is loaded first, so the
    setting never reaches it."""
    import numpy  # noqa: F401

    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import scipy_openblas32
        path = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
        if os.path.exists(path):
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except ImportError:  # the rpath may still find it
        pass
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


_preload_openblas()
from . import _core  # noqa: E402


# How the CUDA module and the wheel libraries under it are loaded. RTLD_DEEPBIND:
# each resolves its undefined symbols in itself and its own dependencies before
# the global scope. Without it, a process that imported TensorFlow first (whose
# libtensorflow_framework exports stubs of the whole cuBLAS, cuBLASLt, cuDNN and
# CUDA runtime APIs, forwarding to the CUDA 12 libraries it looks for) would bind
# the engine's cublasCreate_v2 and friends to those stubs. RTLD_LOCAL: the wheel
# libraries stay out of the global scope, so neither do we change what a library
# loaded after us binds to.
_CUDA_DLOPEN_FLAGS = os.RTLD_NOW | os.RTLD_LOCAL | getattr(os, "RTLD_DEEPBIND", 0)

# The wheel libraries, dependencies first: cuBLASLt before cuBLAS, cuDNN's
# sub-libraries (which libcudnn.so.9 opens by name when first needed) after
# libcudnn_graph they depend on (not libcudnn_adv: RNNs and attention, never
# used here). Preloaded, each is found by its soname when the module or cuDNN
# asks for it, already bound to its own dependencies. Cost: ~65 MB more resident
# memory once the CUDA module loads, which cuDNN would load on its first
# convolution anyway.
_CUDA_WHEEL_LIBRARIES = (
    ("nvidia.cu13", ("libcublasLt.so.13", "libcublas.so.13")),
    ("nvidia.cudnn", ("libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
                      "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9", "libcudnn_ops.so.9",
                      "libcudnn_cnn.so.9", "libcudnn.so.9")),
)


def _preload_cuda_libraries() -> None:
    """Loads cuBLASLt, cuBLAS and cuDNN from the nvidia-* wheels (see above), also
    for installs where the module's rpath does not reach them. Failures are left to
    the import to report."""
    for package, names in _CUDA_WHEEL_LIBRARIES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            for name in names:
                path = os.path.join(root, "lib", name)
                if os.path.exists(path):
                    try:
                        ctypes.CDLL(path, mode=_CUDA_DLOPEN_FLAGS)
                    except OSError:
                        pass


def _load_cuda():
    """Returns (module or None, reason it is missing)."""
    if not cuda_built():
        return None, (f"lenet was built without the GPU backend ({_core.cuda_build}); to build it: "
                      "LENET_CUDA=ON pip install \".[cuda]\" (needs nvcc)")
    _preload_cuda_libraries()
    saved = sys.getdlopenflags()
    sys.setdlopenflags(_CUDA_DLOPEN_FLAGS)
    try:
        return importlib.import_module("lenet._cuda"), ""
    except ImportError as e:  # built, but cuDNN / cuBLAS / the CUDA runtime cannot be loaded
        return None, f"the CUDA backend is built but cannot be loaded: {e}"
    finally:
        sys.setdlopenflags(saved)


def cuda_built() -> bool:
    """Whether the CUDA backend module was built (without loading it)."""
    try:
        return importlib.util.find_spec("lenet._cuda") is not None
    except (ImportError, ValueError):
        return False


def driver_present() -> bool:
    """Whether an NVIDIA driver library is there at all: without one, no GPU can be
    used, and the CUDA module (cuDNN and cuBLAS: ~200 MB resident) is not loaded."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


_cuda_lock = threading.Lock()
_cuda_state = None


def cuda():
    """(lenet._cuda or None, why it is missing), loaded on first use."""
    global _cuda_state
    with _cuda_lock:
        if _cuda_state is None:
            _cuda_state = _load_cuda()
        return _cuda_state


def __getattr__(name):
    # `cuda_module` / `cuda_missing_reason` load the CUDA module lazily (PEP 562).
    if name == "cuda_module":
        return cuda()[0]
    if name == "cuda_missing_reason":
        return cuda()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
