"""The contenders: every way the benchmark runs one model.

A contender's ``build(ctx)`` loads the model and returns ``run(batch) -> probabilities``
(float32 (n, classes)). ``batch`` is a float32 (n, H, W, C) array scaled for the model,
the same array for everyone, except for ``takes="files"`` contenders, which get a list
of PNG paths of the same digits. ``run`` includes whatever the framework needs to go
from that NumPy input to a NumPy output (conversions, host<->device copies).

Frameworks are imported lazily: ``configure(threads)`` sets the thread limits (must
run before any framework is imported) and ``setup(names)`` imports what the chosen
contenders need and reports those that cannot run.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

_THREADS = 1


@dataclass
class Ctx:
    """What a contender needs to build: the weights file, its spec (read once, lazily), the threads."""

    weights: Path
    threads: int
    _spec: object = field(default=None, repr=False)

    @property
    def spec(self):
        if self._spec is None:
            import lenet
            self._spec = lenet.load(self.weights).spec
        return self._spec


@dataclass(frozen=True)
class Contender:
    name: str
    build: Callable[[Ctx], Callable]
    needs: tuple[str, ...]          # modules to import
    what: str                       # one line for the legend
    device: str = "cpu"
    takes: str = "array"            # "array" | "files"

    def unavailable(self) -> Optional[str]:
        """Why this contender cannot run here, or None."""
        for module in self.needs:
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed"
        if self.device == "cuda":
            import lenet
            if not lenet.cuda_available():
                info = lenet.info()
                return "no usable CUDA GPU" + (f" ({info['gpu_error']})" if info.get("gpu_error") else "")
        return None


CONTENDERS: dict[str, Contender] = {}


def contender(name: str, needs: tuple[str, ...], what: str, **kw):
    def register(build):
        CONTENDERS[name] = Contender(name, build, needs, what, **kw)
        return build
    return register


# --- set-up ------------------------------------------------------------------------

def thread_env(threads: int) -> dict[str, str]:
    """Environment that limits every library's thread pools (read when they load)."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n,
            "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}


def configure(threads: int) -> None:
    """Call first: before TensorFlow, torch or ONNX Runtime are imported."""
    global _THREADS
    _THREADS = threads
    os.environ.update(thread_env(threads))


def setup(names) -> dict[str, str]:
    """Imports and configures the frameworks the contenders ``names`` need.
    Returns {contender: why it cannot run} for those that cannot."""
    failed = {}
    with _quiet_stderr():
        for name in names:
            c = CONTENDERS[name]
            reason = c.unavailable()
            if reason is None:
                try:
                    for module in c.needs:
                        _import(module)
                except Exception as e:  # a broken install must not stop the others
                    reason = f"import failed: {type(e).__name__}: {e}"
            if reason:
                failed[name] = reason
    return failed


@contextlib.contextmanager
def _quiet_stderr():
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


def _import(module: str) -> None:
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


def versions() -> dict[str, str]:
    """Versions of the libraries imported so far (and of lenet)."""
    import lenet
    out = {"python": sys.version.split()[0], "numpy": np.__version__, "lenet": lenet.__version__,
           "openblas (lenet)": lenet.info().get("cpu_blas", "")}
    for module in ("tensorflow", "keras", "onnxruntime", "onnx", "torch"):
        if module in sys.modules:
            out[module] = getattr(sys.modules[module], "__version__", "?")
    return out


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --- Keras 3 on TensorFlow -----------------------------------------------------------

def keras_model(ctx: Ctx):
    import keras
    return keras.models.load_model(ctx.weights, compile=False)


def _probabilities(ctx: Ctx, run: Callable) -> Callable:
    """Models that end in logits: softmax in NumPy, so that everyone returns probabilities."""
    from .nets import ends_in_softmax
    return run if ends_in_softmax(ctx.spec) else (lambda x: softmax(run(x)))


def reference(ctx: Ctx, x: np.ndarray) -> np.ndarray:
    """The oracle: Keras ``model.predict`` on the whole array."""
    model = keras_model(ctx)
    return _probabilities(ctx, lambda a: model.predict(a, batch_size=256, verbose=0))(x)


@contender("keras-predict", ("tensorflow", "keras"), "Keras 3 model.predict(x, batch_size=len(x)): the seeds' loop")
def _keras_predict(ctx):
    model = keras_model(ctx)
    return _probabilities(ctx, lambda x: model.predict(x, batch_size=len(x), verbose=0))


@contender("keras-call", ("tensorflow", "keras"), "Keras 3 model(x, training=False), eager")
def _keras_call(ctx):
    model = keras_model(ctx)
    return _probabilities(ctx, lambda x: model(x, training=False).numpy())


# --- TensorFlow low level ---------------------------------------------------------------

def _tf(ctx: Ctx, **function_kw):
    import tensorflow as tf
    from .nets import tf_forward
    f = tf_forward(ctx.spec)
    if function_kw:
        f = tf.function(f, input_signature=[tf.TensorSpec([None, *ctx.spec.input_shape], tf.float32)], **function_kw)
    return lambda x: f(tf.constant(x)).numpy()


@contender("tf-eager", ("tensorflow",), "TensorFlow tf.nn ops, eager (one dispatch per op)")
def _tf_eager(ctx):
    return _tf(ctx)


@contender("tf-function", ("tensorflow",), "TensorFlow tf.nn ops in a tf.function graph")
def _tf_function(ctx):
    return _tf(ctx, jit_compile=False)


@contender("tf-xla", ("tensorflow",), "TensorFlow tf.nn ops, tf.function(jit_compile=True) (XLA)")
def _tf_xla(ctx):
    return _tf(ctx, jit_compile=True)


# --- this engine -------------------------------------------------------------------------

def _engine(ctx: Ctx, device: str, files: bool, cpu_kernels: str = "auto"):
    import lenet
    engine = lenet.Engine(ctx.weights, device=device, threads=ctx.threads, cpu_kernels=cpu_kernels)
    if files:
        return lambda paths: np.stack([r.probabilities for r in engine.infer(paths)])
    return engine.predict_proba


@contender("lenet-cpu", (), "lenet Engine.predict_proba(x), CPU (direct kernels for this CPU's instruction set)")
def _lenet_cpu(ctx):
    return _engine(ctx, "cpu", False)


@contender("lenet-cpu-blas", (), "lenet Engine.predict_proba(x), CPU, cpu_kernels='blas': im2col + OpenBLAS "
           "(the reference path)")
def _lenet_cpu_blas(ctx):
    return _engine(ctx, "cpu", False, "blas")


@contender("lenet-cpu-infer", (), "lenet Engine.infer(paths), CPU: read + decode PNG + preprocess + run",
           takes="files")
def _lenet_cpu_infer(ctx):
    return _engine(ctx, "cpu", True)


@contender("lenet-cuda", (), "lenet Engine.predict_proba(x), CUDA, host<->device copies included", device="cuda")
def _lenet_cuda(ctx):
    return _engine(ctx, "cuda", False)


@contender("lenet-cuda-infer", (), "lenet Engine.infer(paths), CUDA: read + decode PNG + preprocess + run",
           device="cuda", takes="files")
def _lenet_cuda_infer(ctx):
    return _engine(ctx, "cuda", True)


@contender("tflite", ("tensorflow",), "TensorFlow Lite interpreter (XNNPACK), converted from the Keras model")
def _tflite(ctx):
    import tensorflow as tf
    try:  # TensorFlow's own interpreter is deprecated in favour of LiteRT's
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = tf.lite.Interpreter
    with _quiet_stderr(), contextlib.redirect_stdout(io.StringIO()):  # the converter prints its graph
        flat = tf.lite.TFLiteConverter.from_keras_model(keras_model(ctx)).convert()
    sample = list(ctx.spec.input_shape)
    by_batch = {}  # one interpreter per batch size: resizing reallocates every tensor

    def run(x):
        n = len(x)
        if n not in by_batch:
            with _quiet_stderr():
                it = Interpreter(model_content=flat, num_threads=ctx.threads)
            i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
            it.resize_tensor_input(i, [n, *sample])
            it.allocate_tensors()
            by_batch[n] = (it, i, o)
        it, i, o = by_batch[n]
        it.set_tensor(i, x)
        it.invoke()
        return it.get_tensor(o)
    return _probabilities(ctx, run)


# --- optional: ONNX Runtime, PyTorch ---------------------------------------------------------

@contender("onnxruntime", ("onnx", "onnxruntime"), "ONNX Runtime (CPU), graph built from the same weights")
def _onnxruntime(ctx):
    import onnxruntime as ort
    from .nets import onnx_model
    options = ort.SessionOptions()
    options.intra_op_num_threads = ctx.threads
    options.inter_op_num_threads = 1  # sequential execution: a chain has no parallel branches
    session = ort.InferenceSession(onnx_model(ctx.spec), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})[0]


def _torch(ctx: Ctx, compiled: bool):
    import torch
    from .nets import torch_module
    net = torch_module(ctx.spec)
    if compiled:
        # Every model's forward() is the same code object, and Dynamo caches per code object:
        # forget the previous models' graphs, or their guards pile up to the recompile limit.
        torch.compiler.reset()
        net = torch.compile(net, dynamic=True)

    def run(x):
        with torch.inference_mode():
            return net(torch.from_numpy(x)).numpy()
    return run


@contender("torch-eager", ("torch",), "PyTorch (CPU) functional ops, eager")
def _torch_eager(ctx):
    return _torch(ctx, False)


@contender("torch-compile", ("torch",), "PyTorch (CPU), torch.compile(dynamic=True) (Inductor)")
def _torch_compile(ctx):
    return _torch(ctx, True)
