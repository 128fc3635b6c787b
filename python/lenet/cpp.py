"""Where the C++ API was installed: it sits beside the compiled core (``lenet._core``),
which in an editable install is not beside this file."""

from __future__ import annotations

from pathlib import Path

from ._native import _core


def _root() -> Path:
    return Path(_core.__file__).resolve().parent


def cmake_dir() -> Path:
    """The folder of lenetConfig.cmake: ``-Dlenet_DIR=`` it, or add it to CMAKE_PREFIX_PATH."""
    return _root() / "share" / "cmake" / "lenet"


def bench_harness() -> Path:
    """lenet-bench-cpp, the C++ timing harness of lenet-bench's lenet-cpp contender."""
    return _root() / "bin" / "lenet-bench-cpp"
