"""The contenders: every way the benchmark runs one model (PyTorch and JAX in peers.py).

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
Keras picks its backend once, at import; the GPU peers, so that a crash of theirs costs
their row; any named by ``--isolate``) is built and timed in a process of its own
(``child.py``), with ``env`` added to that process's environment. Modules named in
``LENET_BENCH_CONTENDERS`` register contenders of their own.
"""

from __future__ import annotations

import contextlib
import io
from typing import Callable, Optional

import numpy as np

from .registry import (  # noqa: F401 (re-exported: the contenders' module is where callers look)
    CONTENDERS,
    NOT_FOR_ONNX,
    ONNX_CONTENDERS,
    Contender,
    Ctx,
    Unavailable,
    configure,
    contender,
    gpu_missing,
    isolate,
    keras_model,
    keras_probability_model,
    load_framework,
    load_plugins,
    own_versions,
    quiet_stderr,
    setup,
    thread_env,
    versions,
)

# --- Keras 3 on TensorFlow -----------------------------------------------------------


def onnx_with_probabilities(path, kind: str) -> bytes:
    """The ONNX file with its first output made probabilities inside the graph, as the engine's
    predict_proba makes them inside the engine (issue 75): a softmax as it is, log-probabilities
    exponentiated (Exp), sigmoids over their sum (ReduceSum, Div), anything else through a
    Softmax over the last axis; the model's other outputs dropped."""
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    graph = model.graph
    y = graph.output[0].name
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    nodes = []
    if kind == "log_softmax":
        nodes.append(helper.make_node("Exp", [y], ["lenet_bench_probabilities"]))
    elif kind == "sigmoid":
        if opset >= 13:
            axes = helper.make_tensor("lenet_bench_last_axis", onnx.TensorProto.INT64, [1], [-1])
            graph.initializer.append(axes)
            nodes.append(helper.make_node("ReduceSum", [y, "lenet_bench_last_axis"], ["lenet_bench_sum"], keepdims=1))
        else:
            nodes.append(helper.make_node("ReduceSum", [y], ["lenet_bench_sum"], axes=[-1], keepdims=1))
        nodes.append(helper.make_node("Div", [y, "lenet_bench_sum"], ["lenet_bench_probabilities"]))
    elif kind != "softmax":
        nodes.append(helper.make_node("Softmax", [y], ["lenet_bench_probabilities"], axis=-1))
    if nodes:
        graph.node.extend(nodes)
        out = helper.make_tensor_value_info(
            "lenet_bench_probabilities", graph.output[0].type.tensor_type.elem_type, None
        )
        del graph.output[:]
        graph.output.append(out)
    return model.SerializeToString()


def free_batch(model_bytes: bytes) -> Optional[bytes]:
    """A copy of the model with its fixed batch axis made free (the first dimension of its input
    and outputs symbolic, its intermediate shapes left to ONNX Runtime), or None where that is
    not a valid edit: the copy must load and give, on two samples at once, each sample's answer
    of the original within 1e-6 (a Reshape to a fixed batch, say, fails that)."""
    import onnx
    import onnxruntime as ort

    model = onnx.load_from_string(model_bytes)
    for value in [model.graph.input[0], *model.graph.output]:
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[0].dim_param = "batch"
    del model.graph.value_info[:]
    edited = model.SerializeToString()
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 4  # a refused edit is an answer here, not an error for the terminal
    try:
        original = ort.InferenceSession(model_bytes, quiet, providers=["CPUExecutionProvider"])
        free = ort.InferenceSession(edited, quiet, providers=["CPUExecutionProvider"])
        inp = original.get_inputs()[0]
        one = tuple(inp.shape)
        x = np.random.default_rng(0).random((2 * one[0], *one[1:]), dtype=np.float32)
        want = np.concatenate([original.run(None, {inp.name: x[i : i + one[0]]})[0] for i in (0, one[0])])
        run_quiet = ort.RunOptions()
        run_quiet.log_severity_level = 4
        got = free.run(None, {inp.name: x}, run_quiet)[0]
        return edited if got.shape == want.shape and np.allclose(got, want, rtol=0, atol=1e-6) else None
    except Exception:  # ONNX Runtime refused the edit or ran it wrong: the file keeps its batch
        return None


def onnx_file_session(ctx: Ctx) -> Callable:
    """ONNX Runtime on the file itself, its first output (the class scores) made a distribution
    inside the graph (onnx_with_probabilities). A file exported with a fixed batch runs as a copy
    whose batch is free where that is a valid edit (free_batch), so that ONNX Runtime batches as
    lenet does; else N samples a call, and the function's ``note`` says so."""
    import onnxruntime as ort

    import lenet

    options = ort.SessionOptions()
    options.intra_op_num_threads = ctx.threads
    options.inter_op_num_threads = 1
    kind = lenet.Model(ctx.spec).network.output_kind
    graph = onnx_with_probabilities(ctx.weights, kind)
    session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
    name, dims = session.get_inputs()[0].name, session.get_inputs()[0].shape
    # The graph's input against lenet's per-sample input: a batch axis and the rest (the model's
    # own per-sample shape, or the graph's where lenet reads it flat: (batch, 28, 28) as (784,)),
    # else no batch axis (one sample at a time, in the graph's shape).
    per = tuple(lenet.Model(ctx.spec).input_shape[1:])
    tail = dims[1:]
    if len(dims) == len(per) + 1:
        batched, shape = True, per
    elif tail and all(isinstance(d, int) for d in tail) and int(np.prod(tail)) == int(np.prod(per)):
        batched, shape = True, tuple(tail)
    else:
        batched, shape = False, tuple(d if isinstance(d, int) else -1 for d in dims)
    fixed = dims[0] if batched and isinstance(dims[0], int) else None  # a fixed-batch export
    note = None
    if fixed:
        free = free_batch(graph)
        if free is not None:
            session = ort.InferenceSession(free, options, providers=["CPUExecutionProvider"])
            fixed, note = None, f"exported with a fixed batch of {dims[0]}: run as a copy with a free batch axis"
        else:
            note = f"exported with a fixed batch of {dims[0]}: run {dims[0]} samples a call"

    def run_fixed(x):
        pad = -len(x) % fixed
        xp = np.concatenate([x, np.zeros((pad,) + x.shape[1:], x.dtype)]) if pad else x
        outs = [session.run(None, {name: xp[i : i + fixed]})[0].reshape(fixed, -1) for i in range(0, len(xp), fixed)]
        return np.concatenate(outs)[: len(x)]

    def run(x):
        if not batched:
            y = np.stack([session.run(None, {name: s.reshape(shape)})[0] for s in x])
        else:
            xs = x.reshape(len(x), *shape)
            y = run_fixed(xs) if fixed else session.run(None, {name: xs})[0]
        return y.reshape(len(x), -1)

    run.note = note
    return run


def keras_predict_reference(ctx: Ctx) -> Callable:
    """Keras ``model.predict`` with whatever backend this process has (the keras-jax reference)."""
    model = keras_probability_model(ctx)
    return lambda a: model.predict(a, batch_size=256, verbose=0)


@contender("keras-predict", ("tensorflow", "keras"), "Keras 3 model.predict(x, batch_size=len(x)): the seeds' loop")
def _keras_predict(ctx):
    model = keras_probability_model(ctx)
    return lambda x: model.predict(x, batch_size=len(x), verbose=0)


@contender("keras-call", ("tensorflow", "keras"), "Keras 3 model(x, training=False), eager")
def _keras_call(ctx):
    model = keras_probability_model(ctx)
    return lambda x: model(x, training=False).numpy()


@contender(
    "keras-function",
    ("tensorflow", "keras"),
    "Keras 3 model in a tf.function (one graph for every batch size): Keras' fastest inference path on "
    "TensorFlow for arrays already in memory",
)
def _keras_function(ctx):
    import tensorflow as tf

    model = keras_probability_model(ctx)
    spec = tf.TensorSpec([None, *model.inputs[0].shape[1:]], tf.float32)
    f = tf.function(lambda x: model(x, training=False), input_signature=[spec])
    return lambda x: f(tf.constant(x)).numpy()


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


def _engine(
    ctx: Ctx,
    device: str,
    files: bool,
    cpu_kernels: str = "auto",
    cuda_graphs: bool = True,
    cuda_path: str = "auto",
    precision: str = "exact",
):
    import lenet

    engine = lenet.Engine(
        ctx.weights,
        device=device,
        threads=ctx.threads,
        cpu_kernels=cpu_kernels,
        cuda_graphs=cuda_graphs,
        cuda_path=cuda_path,
        precision=precision,
        **ctx.preprocessing,
    )
    if files:  # MNIST digits: drawn at the model's size as the other contenders' array was
        return lambda paths: np.stack([r.probabilities for r in engine.infer(paths, mode="mnist")])
    return engine.predict_proba


@contender(
    "lenet-cpp",
    (),
    "lenet from C++: lenet::Engine::predict_proba(x), CPU, timed by a C++ harness in its own process "
    "(the ladder's lowest rung: no Python in the call)",
    process="cpp",
)
def _lenet_cpp(ctx):
    from .harness import Harness

    return Harness("lenet-cpp", ctx, None, [], None, {})


@contender(
    "lenet-cpp-cuda",
    (),
    "lenet from C++ on the GPU: lenet::Engine::predict_proba(x), device 'cuda' (the core loading the CUDA "
    "backend's library), timed by the C++ harness in its own process",
    device="cuda",
    process="cpp",
)
def _lenet_cpp_cuda(ctx):
    from .harness import Harness

    return Harness("lenet-cpp-cuda", ctx, None, [], None, {})


@contender("lenet-cpu", (), "lenet Engine.predict_proba(x), CPU (direct kernels for this CPU's instruction set)")
def _lenet_cpu(ctx):
    return _engine(ctx, "cpu", False)


@contender(
    "lenet-cpu-fast",
    (),
    "lenet Engine.predict_proba(x), CPU, precision='fast': Winograd convolutions in float32 (faster where a "
    "model has 3x3 or 5x5 convolutions of 16+ channels, further from the exact answers)",
)
def _lenet_cpu_fast(ctx):
    return _engine(ctx, "cpu", False, precision="fast")


@contender(
    "lenet-cpu-blas",
    (),
    "lenet Engine.predict_proba(x), CPU, cpu_kernels='blas': im2col + OpenBLAS (the reference path)",
)
def _lenet_cpu_blas(ctx):
    return _engine(ctx, "cpu", False, "blas")


@contender("lenet-cpu-infer", (), "lenet Engine.infer(paths), CPU: read + decode PNG + preprocess + run", takes="files")
def _lenet_cpu_infer(ctx):
    return _engine(ctx, "cpu", True)


def _infer_pixels(ctx: Ctx, device: str) -> Callable:
    """lenet.Engine.infer on the uint8 digits as a user holds them: one (28, 28) array at
    batch 1, an (n, 28, 28) array above. Returns the Results (measure.correctness reads
    their probabilities): what infer costs is what a caller of it pays."""
    import lenet

    engine = lenet.Engine(ctx.weights, device=device, threads=ctx.threads, **ctx.preprocessing)
    return lambda a: [engine.infer(a[0], mode="mnist")] if len(a) == 1 else engine.infer(a, mode="mnist")


@contender(
    "lenet-cpu-infer-array",
    (),
    "lenet Engine.infer(uint8 digits), CPU: one (28, 28) array at batch 1, "
    "(n, 28, 28) above: checks, scaling, run, Results",
    takes="pixels",
)
def _lenet_cpu_infer_array(ctx):
    return _infer_pixels(ctx, "cpu")


@contender("lenet-cuda", (), "lenet Engine.predict_proba(x), CUDA, host<->device copies included", device="cuda")
def _lenet_cuda(ctx):
    return _engine(ctx, "cuda", False)


@contender(
    "lenet-cuda-eager",
    (),
    "lenet Engine(cuda_graphs=False).predict_proba(x), CUDA: each layer launched, no graph replay",
    device="cuda",
)
def _lenet_cuda_eager(ctx):
    return _engine(ctx, "cuda", False, cuda_graphs=False)


@contender(
    "lenet-cuda-library",
    (),
    "lenet Engine(cuda_path='library').predict_proba(x), CUDA: cuDNN + cuBLAS for every model (the general path)",
    device="cuda",
)
def _lenet_cuda_library(ctx):
    return _engine(ctx, "cuda", False, cuda_path="library")


@contender(
    "lenet-cuda-fused",
    (),
    "lenet Engine(cuda_path='fused').predict_proba(x), CUDA: the whole network as one kernel of lenet's "
    "wherever it can run it",
    device="cuda",
)
def _lenet_cuda_fused(ctx):
    return _engine(ctx, "cuda", False, cuda_path="fused")


@contender(
    "lenet-cuda-fast",
    (),
    "lenet Engine(cuda_path='fast').predict_proba(x), CUDA: the transfers not yet run on a GPU before "
    "issue 52 (launch parameter, mapped memory, chunks over two streams)",
    device="cuda",
)
def _lenet_cuda_fast(ctx):
    return _engine(ctx, "cuda", False, cuda_path="fast")


def _pixel_rows(ctx: Ctx, device: str, cuda_path: str = "auto") -> Callable:
    """lenet.Engine.row_probabilities on the uint8 digits: the bytes go to the core as they
    are and, on CUDA, cross PCIe as bytes (a quarter of float32's) to be scaled there."""
    import lenet

    engine = lenet.Engine(ctx.weights, device=device, threads=ctx.threads, cuda_path=cuda_path, **ctx.preprocessing)
    return engine.row_probabilities


@contender(
    "lenet-cuda-pixels",
    (),
    "lenet Engine.row_probabilities(uint8 digits), CUDA: bytes uploaded and scaled on the device",
    device="cuda",
    takes="rows",
)
def _lenet_cuda_pixels(ctx):
    return _pixel_rows(ctx, "cuda")


@contender(
    "lenet-cuda-fast-pixels",
    (),
    "lenet Engine(cuda_path='fast').row_probabilities(uint8 digits), CUDA: bytes as the launch parameter, "
    "from mapped memory or in chunks over two streams",
    device="cuda",
    takes="rows",
)
def _lenet_cuda_fast_pixels(ctx):
    return _pixel_rows(ctx, "cuda", "fast")


@contender(
    "lenet-cuda-infer",
    (),
    "lenet Engine.infer(paths), CUDA: read + decode PNG + preprocess + run",
    device="cuda",
    takes="files",
)
def _lenet_cuda_infer(ctx):
    return _engine(ctx, "cuda", True)


@contender("tflite", ("tensorflow",), "TensorFlow Lite interpreter (XNNPACK), converted from the Keras model")
def _tflite(ctx):
    import tensorflow as tf

    try:  # TensorFlow's own interpreter is deprecated in favour of LiteRT's
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = tf.lite.Interpreter
    with quiet_stderr(), contextlib.redirect_stdout(io.StringIO()):  # the converter prints its graph
        flat = tf.lite.TFLiteConverter.from_keras_model(keras_probability_model(ctx)).convert()
    by_batch = {}  # one interpreter per batch size: resizing reallocates every tensor

    def run(x):
        n = len(x)
        if n not in by_batch:
            with quiet_stderr():
                it = Interpreter(model_content=flat, num_threads=ctx.threads)
            i, o = it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]
            it.resize_tensor_input(i, list(x.shape))
            it.allocate_tensors()
            by_batch[n] = (it, i, o)
        it, i, o = by_batch[n]
        it.set_tensor(i, x)
        it.invoke()
        return it.get_tensor(o)

    return run


# --- optional: ONNX Runtime, PyTorch ---------------------------------------------------------


@contender(
    "onnxruntime",
    ("onnx", "onnxruntime"),
    "ONNX Runtime (CPU), graph built from the same weights (an ONNX file: the file itself)",
)
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


# PyTorch and JAX, on the CPU and the GPU: registered after the contenders above (table order).
from . import peers  # noqa: E402, F401

load_plugins()  # the user's own contenders (LENET_BENCH_CONTENDERS), after the built-in ones
