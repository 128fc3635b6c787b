"""Loads the compiled core (and the CUDA backend module when it was built).

The extension modules find OpenBLAS through an rpath into the scipy-openblas32
wheel; loading the library first from its wheel also covers installs where the
two packages do not sit side by side.
"""

from __future__ import annotations

import ctypes
import importlib
import os


def _preload_openblas() -> None:
    try:
        import scipy_openblas32
    except ImportError:  # the rpath may still find it
        return
    path = os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas.so")
    if os.path.exists(path):
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


_preload_openblas()
from . import _core  # noqa: E402


def _load_cuda():
    """Returns (module or None, reason it is missing)."""
    try:
        spec = importlib.util.find_spec("lenet._cuda")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None, "lenet was built without the CUDA backend"
    try:
        return importlib.import_module("lenet._cuda"), ""
    except ImportError as e:  # built, but cuDNN / cuBLAS / the CUDA runtime cannot be loaded
        return None, f"the CUDA backend is built but cannot be loaded: {e}"


cuda_module, cuda_missing_reason = _load_cuda()
