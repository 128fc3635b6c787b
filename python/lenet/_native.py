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
        # The wheel's lib/ found without importing the package, whose import reads its own
        # metadata through importlib.metadata (email, csv, zipfile: 10 ms of every start).
        spec = importlib.util.find_spec("scipy_openblas32")
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = os.path.join(root, "lib", "libscipy_openblas.so")
            if os.path.exists(path):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
    except (ImportError, ValueError):  # the rpath may still find it
        pass
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


_preload_openblas()
from . import _core  # noqa: E402


def _load_cuda():
    """Returns (module or None, reason it is missing)."""
    if not cuda_built():
        return None, (
            f"lenet was built without the GPU backend ({_core.cuda_build}); to build it: "
            'LENET_CUDA=ON pip install ".[cuda]" (needs nvcc)'
        )
    try:
        module = importlib.import_module("lenet._cuda")
    except ImportError as e:  # built, but the module itself cannot be loaded
        return None, f"the CUDA backend is built but cannot be loaded: {e}"
    from .errors import CudaError

    try:  # the backend's own search (csrc/backends/cuda/provider.h), a C++ program's too
        module.load_libraries()
    except CudaError as e:
        return None, f'the CUDA backend is built but {e}; install them: pip install "lenet[cuda]"'
    return module, ""


def cuda_built() -> bool:
    """Whether the CUDA backend module was built (without loading it). Its library,
    liblenet_cuda.so, is loaded by the core when an engine first asks for device "cuda"."""
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
