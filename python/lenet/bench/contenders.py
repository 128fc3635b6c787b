"""The contenders: every way the benchmark runs one model.

A contender's ``build(ctx)`` loads the model and returns ``run(batch) -> probabilities``
(float32 (n, classes)). ``batch`` is a float32 (n, H, W, C) array scaled for the model,
the same array for everyone, except for ``takes="files"`` contenders, which get a list
of PNG paths of the same digits. ``run`` includes whatever the framework needs to go
from that NumPy input to a NumPy output (conversions, host<->device copies).

Frameworks are imported lazily: ``configure(threads)`` sets the thread limits (must
run before any framework is imported) and ``setup(names)`` imports what the chosen
contenders need and reports those that cannot run.

GPU contenders (``device="cuda"``) run only where the NVIDIA driver sees a GPU; a
framework that sees none makes its ``build`` raise ``Unavailable`` (the row is
skipped, not failed). A contender with ``process="own"`` (Keras on the JAX backend:
Keras picks its backend once, at import) is built and timed in a process of its own
(``child.py``), with ``env`` added to that process's environment.
"""

from __future__ import annotations

import contextlib
import ctypes
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

    @property
    def is_onnx(self) -> bool:
        return self.spec.extra.get("format") == "onnx"


# What runs an ONNX file as it is: this engine and ONNX Runtime. The other contenders
# rebuild a Keras model from its layers (channels_last), which an ONNX file is not.
ONNX_CONTENDERS = ("lenet-cpu", "lenet-cpu-blas", "lenet-cpu-infer", "lenet-cuda", "lenet-cuda-eager",
                   "lenet-cuda-infer", "onnxruntime")
NOT_FOR_ONNX = "it rebuilds Keras models; this model is an ONNX file (ONNX Runtime runs it as it is)"


@dataclass(frozen=True)
class Contender:
    name: str
    build: Callable[[Ctx], Callable]
    needs: tuple[str, ...]          # modules to import
    what: str                       # one line for the legend
    device: str = "cpu"
    takes: str = "array"            # "array" | "pixels" (the uint8 digits, (n, 28, 28)) | "files"
    process: str = "same"           # "same" | "own": built and timed in a process of its own
    env: dict = field(default_factory=dict)   # added to the environment before its frameworks load

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


# --- set-up ------------------------------------------------------------------------

def thread_env(threads: int, extra: Optional[dict] = None) -> dict[str, str]:
    """Environment that limits every library's thread pools (read when they load), then
    ``extra`` (a contender's ``env``). JAX allocates GPU memory as it needs it, not 75% of
    the GPU up front, so that the other GPU contenders in the process still have room."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "TF_NUM_INTRAOP_THREADS": n, "TF_NUM_INTEROP_THREADS": n,
            "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false", **(extra or {})}


def configure(threads: int, extra: Optional[dict] = None) -> None:
    """Call first: before TensorFlow, torch, JAX or ONNX Runtime are imported."""
    global _THREADS
    _THREADS = threads
    os.environ.update(thread_env(threads, extra))


def setup(names) -> dict[str, str]:
    """Imports and configures the frameworks the contenders ``names`` need.
    Returns {contender: why it cannot run} for those that cannot."""
    failed = {}
    with _quiet_stderr():
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
    out = {"python": sys.version.split()[0], "numpy": np.__version__, "lenet": lenet.__version__,
           "openblas (lenet)": lenet.info().get("cpu_blas", "")}
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


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# --- Keras 3 on TensorFlow -----------------------------------------------------------

def keras_model(ctx: Ctx):
    import keras
    return keras.models.load_model(ctx.weights, compile=False)


def probabilities_of(ctx: Ctx, run: Callable) -> Callable:
    """Models that end in logits: softmax in NumPy, so that everyone returns probabilities."""
    from .nets import ends_in_softmax
    return run if ends_in_softmax(ctx.spec) else (lambda x: softmax(run(x)))


def onnx_file_session(ctx: Ctx) -> Callable:
    """ONNX Runtime on the file itself, its outputs made a distribution as the engine's
    predict_proba makes them (the first output: the class scores)."""
    import onnxruntime as ort
    import lenet
    options = ort.SessionOptions()
    options.intra_op_num_threads = ctx.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(ctx.weights), options, providers=["CPUExecutionProvider"])
    name, dims = session.get_inputs()[0].name, session.get_inputs()[0].shape
    batched = len(dims) in (2, 4)
    fixed = dims[0] if batched and isinstance(dims[0], int) else None   # a fixed-batch export: N at a time
    kind = lenet.Model(ctx.spec).network.output_kind

    def run_fixed(x):
        pad = -len(x) % fixed
        xp = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
        return np.concatenate([session.run(None, {name: xp[i:i + fixed]})[0] for i in range(0, len(xp), fixed)])[
            :len(x)]

    def run(x):
        if not batched:
            y = np.stack([session.run(None, {name: s})[0] for s in x])
        else:
            y = run_fixed(x) if fixed else session.run(None, {name: x})[0]
        y = y.reshape(len(x), -1)
        if kind == "softmax":
            return y
        if kind == "sigmoid":
            return y / y.sum(axis=1, keepdims=True)
        return softmax(y)
    return run


def keras_predict_reference(ctx: Ctx) -> Callable:
    """Keras ``model.predict`` with whatever backend this process has (the keras-jax reference)."""
    model = keras_model(ctx)
    return probabilities_of(ctx, lambda a: model.predict(a, batch_size=256, verbose=0))


@contender("keras-predict", ("tensorflow", "keras"), "Keras 3 model.predict(x, batch_size=len(x)): the seeds' loop")
def _keras_predict(ctx):
    model = keras_model(ctx)
    return probabilities_of(ctx, lambda x: model.predict(x, batch_size=len(x), verbose=0))


@contender("keras-call", ("tensorflow", "keras"), "Keras 3 model(x, training=False), eager")
def _keras_call(ctx):
    model = keras_model(ctx)
    return probabilities_of(ctx, lambda x: model(x, training=False).numpy())


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

def _engine(ctx: Ctx, device: str, files: bool, cpu_kernels: str = "auto", cuda_graphs: bool = True):
    import lenet
    engine = lenet.Engine(ctx.weights, device=device, threads=ctx.threads, cpu_kernels=cpu_kernels,
                          cuda_graphs=cuda_graphs)
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


def _infer_pixels(ctx: Ctx, device: str) -> Callable:
    """lenet.Engine.infer on the uint8 digits as a user holds them: one (28, 28) array at
    batch 1, an (n, 28, 28) array above. Returns the Results (measure.correctness reads
    their probabilities): what infer costs is what a caller of it pays."""
    import lenet
    engine = lenet.Engine(ctx.weights, device=device, threads=ctx.threads)
    return lambda a: [engine.infer(a[0])] if len(a) == 1 else engine.infer(a)


@contender("lenet-cpu-infer-array", (), "lenet Engine.infer(uint8 digits), CPU: one (28, 28) array at batch 1, "
           "(n, 28, 28) above: checks, scaling, run, Results", takes="pixels")
def _lenet_cpu_infer_array(ctx):
    return _infer_pixels(ctx, "cpu")


@contender("lenet-cuda", (), "lenet Engine.predict_proba(x), CUDA, host<->device copies included", device="cuda")
def _lenet_cuda(ctx):
    return _engine(ctx, "cuda", False)


@contender("lenet-cuda-eager", (), "lenet Engine(cuda_graphs=False).predict_proba(x), CUDA: each layer launched, "
           "no graph replay", device="cuda")
def _lenet_cuda_eager(ctx):
    return _engine(ctx, "cuda", False, cuda_graphs=False)


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
    return probabilities_of(ctx, run)


# --- optional: ONNX Runtime, PyTorch ---------------------------------------------------------

@contender("onnxruntime", ("onnx", "onnxruntime"), "ONNX Runtime (CPU), graph built from the same weights (an "
           "ONNX file: the file itself)")
def _onnxruntime(ctx):
    if ctx.is_onnx:
        return onnx_file_session(ctx)
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


# --- GPU peers: PyTorch and JAX on CUDA, Keras on the JAX backend -----------------------------
# All in FP32 as this engine computes by default: TF32 is turned off where the framework would
# use it for float32 convolutions or products (cuDNN in torch; XLA's default precision in JAX).

def _torch_on_gpu():
    import torch
    if not torch.cuda.is_available():
        raise Unavailable(f"torch {torch.__version__} sees no CUDA GPU")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # cuDNN's algorithm search per shape, as the engine's cudnnFind
    return torch


@contender("torch-cuda", ("torch",), "PyTorch on CUDA, functional ops, eager (FP32, TF32 off, cudnn.benchmark); "
           "host<->device copies included", device="cuda")
def _torch_cuda(ctx):
    from .nets import torch_module
    torch = _torch_on_gpu()
    net = torch_module(ctx.spec, device="cuda")

    def run(x):
        with torch.inference_mode():
            return net(torch.from_numpy(x).to("cuda")).cpu().numpy()
    return run


@contender("torch-cuda-graph", ("torch",), "PyTorch on CUDA, one torch.cuda.CUDAGraph per batch size replayed, "
           "the copies from and to pinned buffers in the graph (FP32)", device="cuda")
def _torch_cuda_graph(ctx):
    from .nets import torch_module
    torch = _torch_on_gpu()
    net = torch_module(ctx.spec, device="cuda")
    graphs = {}

    def capture(n):
        host_in = torch.empty((n, *ctx.spec.input_shape), dtype=torch.float32).pin_memory()
        dev_in = torch.zeros(host_in.shape, dtype=torch.float32, device="cuda")
        side = torch.cuda.Stream()  # warm-up before capture, on a side stream (torch's rule)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                y = net(dev_in)
        torch.cuda.current_stream().wait_stream(side)
        host_out = torch.empty(y.shape, dtype=torch.float32).pin_memory()
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            dev_in.copy_(host_in, non_blocking=True)
            host_out.copy_(net(dev_in), non_blocking=True)
        return host_in.numpy(), graph, host_out.numpy()

    def run(x):
        if len(x) not in graphs:
            graphs[len(x)] = capture(len(x))
        host_in, graph, host_out = graphs[len(x)]
        np.copyto(host_in, x)
        graph.replay()
        torch.cuda.current_stream().synchronize()
        return host_out.copy()
    return run


def _jax_on_gpu():
    import jax
    if jax.default_backend() != "gpu":
        raise Unavailable(f"JAX {jax.__version__} sees no GPU (its backend: {jax.default_backend()})")
    return jax


@contender("jax-jit", ("jax",), "JAX on CUDA: the model's layers as one jax.jit function (lax ops, "
           "precision HIGHEST: FP32); host<->device copies included", device="cuda")
def _jax_jit(ctx):
    from .nets import jax_forward
    jax = _jax_on_gpu()
    f = jax.jit(jax_forward(ctx.spec))
    return lambda x: np.asarray(f(x))


@contender("keras-jax", ("jax", "keras"), "Keras 3 on the JAX backend (CUDA): the model's stateless_call under "
           "jax.jit (FP32), in a process of its own", device="cuda", process="own",
           env={"KERAS_BACKEND": "jax", "JAX_DEFAULT_MATMUL_PRECISION": "highest"})
def _keras_jax(ctx):
    jax = _jax_on_gpu()
    jax.config.update("jax_default_matmul_precision", "highest")
    import keras
    if keras.backend.backend() != "jax":
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not JAX: KERAS_BACKEND was set too late")
    model = keras_model(ctx)
    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]
    f = jax.jit(lambda t, n, x: model.stateless_call(t, n, x, training=False)[0])
    return probabilities_of(ctx, lambda x: np.asarray(f(trainable, fixed, x)))
