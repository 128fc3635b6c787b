"""Which device an Engine runs on: the CUDA backend when it is built, loaded and sees a
GPU, else the CPU; and how many CPUs this process may use."""

from __future__ import annotations

import os
import warnings

from . import _native
from .errors import CudaError, InputError


def cuda_built() -> bool:
    """Whether this installation includes the CUDA backend module."""
    return _native.cuda_built()


def cuda_available() -> bool:
    """Whether ``device="cuda"`` can run here (backend loaded and a GPU present). Never raises.
    Without an NVIDIA driver it answers without loading the CUDA libraries."""
    try:
        return (
            _native.cuda_built()
            and _native.driver_present()
            and _native.cuda_module is not None
            and bool(_native.cuda_module.device_count() > 0)
        )
    except Exception:
        return False


def cuda_unavailable_reason() -> str:
    """Why device="cuda" cannot run here (for messages; meaningful when cuda_available() is False)."""
    if _native.cuda_built() and not _native.driver_present():
        return "no NVIDIA driver (libcuda.so.1 not found)"
    if _native.cuda_module is None:
        return _native.cuda_missing_reason
    try:
        return _native.cuda_module.unavailable_reason() or "no CUDA device"
    except Exception as e:  # pragma: no cover - defensive: cuda_available() must not raise
        return str(e)


_auto_warned = False


def resolve_device(device: str) -> str:
    global _auto_warned
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"unknown device {device!r} (expected 'auto', 'cpu' or 'cuda')")
    if device == "cuda" and not cuda_available():
        raise CudaError(f"device='cuda' requested but CUDA is not usable: {cuda_unavailable_reason()}")
    if device == "auto":
        if cuda_available():
            return "cuda"
        if not _auto_warned and cuda_built():
            warnings.warn(f"lenet: using the CPU ({cuda_unavailable_reason()})", RuntimeWarning, stacklevel=3)
        _auto_warned = True
        return "cpu"
    return device


def default_threads() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
