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

# Where cuDNN 9 and cuBLAS 13 are looked for, in order: the nvidia-* wheels this
# Python imports, the files the build compiled against (CUDNN_ROOT or toolkit
# builds), then the system's library search by soname. The module opens them itself
# and calls them through handles of those exact files (csrc/backends/cuda/libraries.h
# says why: no other definition in the process may capture the engine's calls, and
# nothing of lenet is loaded with RTLD_DEEPBIND).
_CUDA_WHEELS = (("nvidia.cudnn", "libcudnn.so.9"), ("nvidia.cu13", "libcublas.so.13"))


def _wheel_library(package: str, name: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec else []
    return [p for p in (os.path.join(r, "lib", name) for r in roots) if os.path.exists(p)]


def cuda_library_candidates(module) -> tuple[list[str], list[str]]:
    """(cuDNN candidates, cuBLAS candidates) in the order the module tries them."""
    out = []
    for (package, name), built in zip(_CUDA_WHEELS, (module.build_cudnn_library, module.build_cublas_library)):
        found = _wheel_library(package, name)
        for extra in (built, name):
            if extra and extra not in found:
                found.append(extra)
        out.append(found)
    return out[0], out[1]


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

    try:
        module.load_libraries(*cuda_library_candidates(module))
    except CudaError as e:
        return None, f'the CUDA backend is built but {e}; install them: pip install "lenet[cuda]"'
    if not _core.backend_registered("cuda"):
        _core.register_backend("cuda", module.backend_factory())
    return module, ""


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
