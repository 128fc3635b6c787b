"""The contenders' registry and what every one of them shares: the build context
(``Ctx``), the ``contender`` decorator that registers a build in ``CONTENDERS`` (the
builds are in contenders.py and peers.py), the frameworks' thread limits
(``configure``, before any framework loads) and imports (``setup``), the versions
reported, and why a GPU contender cannot run here (``gpu_missing``)."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

_THREADS = 1


@dataclass
class Ctx:
    """What a contender needs to build: the weights file, its spec (read once, lazily), the threads,
    and the pixels' preprocessing the user gave (lenet.Engine's input_scale, mean, std; what the
    file records where empty), which lenet's image rows apply."""

    weights: Path
    threads: int
    preprocessing: dict = field(default_factory=dict)
    _spec: object = field(default=None, repr=False)

    @property
    def spec(self):
        if self._spec is None:
            import lenet

            self._spec = lenet.load(self.weights).spec
        return self._spec

    @property
    def is_onnx(self) -> bool:
        return self.spec.extra.get("format") == "onnx"


# What runs an ONNX file: this engine, ONNX Runtime on the file, and PyTorch rebuilt from the
# layer records lenet loaded (channels first, as PyTorch exported them: nets.torch_module). The
# others run a Keras model, or rebuild one channels last, which an ONNX file is not.
ONNX_CONTENDERS = (
    "lenet-cpp",
    "lenet-cpp-cuda",
    "lenet-cpu",
    "lenet-cpu-blas",
    "lenet-cpu-fast",
    "lenet-cpu-infer",
    "lenet-cpu-infer-array",
    "lenet-cuda",
    "lenet-cuda-eager",
    "lenet-cuda-infer",
    "lenet-cuda-pixels",
    "onnxruntime",
    "torch-eager",
    "torch-compile",
    "torch-cuda",
    "torch-cuda-graph",
    "torch-cuda-pixels",
    "torch-cuda-graph-pixels",
)
NOT_FOR_ONNX = (
    "it runs a Keras model, or rebuilds one channels last; this model is an ONNX file "
    "(lenet, ONNX Runtime and PyTorch run it)"
)


@dataclass(frozen=True)
class Contender:
    name: str
    build: Callable[[Ctx], Callable]
    needs: tuple[str, ...]  # modules to import
    what: str  # one line for the legend
    device: str = "cpu"
    # "array" (the model's input) | "pixels" (the uint8 digits, (n, 28, 28)) | "rows" (the pixel
    # rows prepared for the model, (n, h, w, c), 0..255) | "files" (PNG paths)
    takes: str = "array"
    # "same" | "own": built and timed in a Python process of its own (child.Remote) | "cpp":
    # in the C++ harness (child.Harness)
    process: str = "same"
    env: dict = field(default_factory=dict)  # added to the environment before its frameworks load

    def unavailable(self) -> Optional[str]:
        """Why this contender cannot run here, or None."""
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed"
        if self.device == "cuda":
            missing = gpu_missing()
            if missing:
                return missing
            if self.name.startswith("lenet-"):
                import lenet

                if not lenet.cuda_available():
                    info = lenet.info()
                    return "no usable CUDA GPU" + (f" ({info['gpu_error']})" if info.get("gpu_error") else "")
        return None


class Unavailable(Exception):
    """Raised by a build: this contender cannot run here (its framework sees no GPU, say)."""


_gpu_missing: list = []


def gpu_missing() -> Optional[str]:
    """Why no CUDA GPU can be used here, or None: asks the NVIDIA driver itself
    (cuInit, cuDeviceGetCount), so that no framework is loaded for the answer."""
    if not _gpu_missing:
        why = None
        try:
            cuda = ctypes.CDLL("libcuda.so.1")
        except OSError:
            why = "no GPU (no NVIDIA driver: libcuda.so.1 not found)"
        else:
            count = ctypes.c_int(0)
            rc = cuda.cuInit(0)
            if rc != 0:
                why = f"no GPU (cuInit failed with CUresult {rc})"
            elif cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
                why = "no GPU (the NVIDIA driver sees no CUDA device)"
        _gpu_missing.append(why)
    return _gpu_missing[0]


CONTENDERS: dict[str, Contender] = {}


def contender(name: str, needs: tuple[str, ...], what: str, **kw):
    def register(build):
        CONTENDERS[name] = Contender(name, build, needs, what, **kw)
        return build

    return register


def isolate(names) -> None:
    """Builds and times the contenders ``names`` in processes of their own (lenet-bench
    --isolate): a crash or a hang there costs their row, not the run. Call before ``setup``."""
    for name in names:
        if CONTENDERS[name].process == "same":  # the others have a process of their own already
            CONTENDERS[name] = dataclasses.replace(CONTENDERS[name], process="own")


# Modules that register contenders of their own with ``contender`` (comma-separated import
# names), imported with the built-in ones; the processes of own-process contenders inherit the
# variable, so they find them too.
PLUGINS_VARIABLE = "LENET_BENCH_CONTENDERS"


def load_plugins() -> None:
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_VARIABLE, "").split(","))):
        try:
            importlib.import_module(module)
        except Exception as e:
            raise RuntimeError(f"{PLUGINS_VARIABLE}: cannot import {module!r}: {type(e).__name__}: {e}") from e


# --- set-up ------------------------------------------------------------------------


def thread_env(threads: int, extra: Optional[dict] = None) -> dict[str, str]:
    """Environment that limits every library's thread pools (read when they load), then
    ``extra`` (a contender's ``env``). JAX allocates GPU memory as it needs it, not 75% of
    the GPU up front, so that the other GPU contenders in the process still have room."""
    n = str(threads)
    return {
        "OMP_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "TF_NUM_INTRAOP_THREADS": n,
        "TF_NUM_INTEROP_THREADS": n,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        **(extra or {}),
    }


def configure(threads: int, extra: Optional[dict] = None) -> None:
    """Call first: before TensorFlow, torch, JAX or ONNX Runtime are imported."""
    global _THREADS
    _THREADS = threads
    os.environ.update(thread_env(threads, extra))


def setup(names) -> dict[str, str]:
    """Imports and configures the frameworks the contenders ``names`` need.
    Returns {contender: why it cannot run} for those that cannot."""
    failed = {}
    with quiet_stderr():
        for name in names:
            c = CONTENDERS[name]
            reason = c.unavailable()
            if reason is None and c.process == "same":  # an own-process contender imports in its process
                try:
                    for module in c.needs:
                        load_framework(module)
                except Exception as e:  # a broken install must not stop the others
                    reason = f"import failed: {type(e).__name__}: {e}"
            if reason:
                failed[name] = reason
    return failed


@contextlib.contextmanager
def quiet_stderr():
    """TensorFlow logs to file descriptor 2 while it loads, whatever TF_CPP_MIN_LOG_LEVEL says."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


_imported: set = set()


def load_framework(module: str) -> None:
    if module in _imported:
        return
    if module == "tensorflow":
        import logging

        import tensorflow as tf

        tf.get_logger().setLevel(logging.ERROR)
        try:  # only possible before TensorFlow's runtime starts
            tf.config.threading.set_intra_op_parallelism_threads(_THREADS)
            tf.config.threading.set_inter_op_parallelism_threads(_THREADS)
        except RuntimeError:
            pass
    elif module == "torch":
        import torch

        torch.set_num_threads(_THREADS)
        try:
            torch.set_num_interop_threads(_THREADS)
        except RuntimeError:
            pass
    else:
        importlib.import_module(module)
    _imported.add(module)


def versions(others: Optional[dict] = None) -> dict[str, str]:
    """Versions of the libraries imported so far (and of lenet), with ``others``: what
    own-process contenders reported (``child.Remote.versions``)."""
    import lenet

    out = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "lenet": lenet.__version__,
        "openblas (lenet)": lenet.info().get("cpu_blas", ""),
    }
    for module in ("tensorflow", "keras", "onnxruntime", "onnx", "torch", "jax", "jaxlib"):
        if module in sys.modules:
            out[module] = getattr(sys.modules[module], "__version__", "?")
    out.update(others or {})
    return out


def own_versions() -> dict[str, str]:
    """In an own-process contender's process: the versions that differ from the main
    process's, under their own names (e.g. "keras (jax backend)")."""
    out = {}
    if "keras" in sys.modules:
        keras = sys.modules["keras"]
        out[f"keras ({keras.backend.backend()} backend)"] = keras.__version__
    for module in ("jax", "jaxlib"):
        if module in sys.modules:
            out[module] = getattr(sys.modules[module], "__version__", "?")
    return out


def keras_probability_model(ctx: Ctx):
    """The Keras model with its outputs made probabilities inside it, as the engine's
    predict_proba makes them inside the engine (issue 75: every contender's timed call does the
    same work): a softmax as it is, log-probabilities exponentiated, sigmoids over their sum,
    anything else through a Softmax layer. TensorFlow Lite converts this model, and Keras on
    JAX runs it."""
    import keras

    from .netgraph import output_kind

    model = keras_model(ctx)
    kind = output_kind(ctx.spec)
    if kind == "softmax":
        return model
    y = model.outputs[0]
    if kind == "log_softmax":
        p = keras.layers.Activation("exponential", name="lenet_bench_probabilities")(y)
    elif kind == "sigmoid":
        p = keras.layers.Lambda(
            lambda v: v / keras.ops.sum(v, axis=-1, keepdims=True), name="lenet_bench_probabilities"
        )(y)
    else:
        p = keras.layers.Softmax(axis=-1, name="lenet_bench_probabilities")(y)
    return keras.Model(model.inputs, p)


def keras_model(ctx: Ctx):
    import keras

    return keras.models.load_model(ctx.weights, compile=False)
