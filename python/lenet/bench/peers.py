"""PyTorch and JAX contenders, on the CPU and on the GPU (the GPU engine's peers), and
Keras on the JAX backend in a process of its own."""

from __future__ import annotations

import numpy as np

from .registry import Ctx, Unavailable, contender, keras_probability_model


def _torch(ctx: Ctx, compiled: bool):
    import torch

    from .nets import torch_module

    net = torch_module(ctx.spec)
    if compiled:
        # Every model's forward() is the same code object, and Dynamo caches per code object:
        # forget the previous models' graphs, or their guards pile up to the recompile limit.
        torch.compiler.reset()
        # As PyTorch's CPU inference guide advises: Inductor's freezing (the weights folded into
        # the graph as constants, laid out for its kernels; it applies with gradients off, as
        # every call here is) and static shapes, one graph per batch size, each compiled at its
        # first call (the warm-up, never a timed call).
        torch._inductor.config.freezing = True
        net = torch.compile(net, dynamic=False)

    def run(x):
        with torch.inference_mode():
            return net(torch.from_numpy(x)).numpy()

    return run


@contender("torch-eager", ("torch",), "PyTorch (CPU) functional ops, eager")
def _torch_eager(ctx):
    return _torch(ctx, False)


@contender(
    "torch-compile",
    ("torch",),
    "PyTorch (CPU), torch.compile(dynamic=False) with Inductor's freezing (a graph per batch size, the weights "
    "constants): PyTorch's advice for CPU inference",
)
def _torch_compile(ctx):
    return _torch(ctx, True)


# --- GPU peers: PyTorch and JAX on CUDA, Keras on the JAX backend -----------------------------
# All in FP32 as this engine computes by default: TF32 is turned off where the framework would
# use it for float32 convolutions or products (cuDNN in torch; XLA's default precision in JAX).
# Each in a process of its own (process="own"): a framework's crash on the GPU (a SIGSEGV in
# torch.cuda.CUDAGraph.replay was seen on 2026-11-26) costs its row, not every figure of the run;
# the worker times its blocks itself, so the pipe is never inside a timed call.


def _torch_on_gpu():
    import torch

    if not torch.cuda.is_available():
        raise Unavailable(f"torch {torch.__version__} sees no CUDA GPU")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # cuDNN's algorithm search per shape, as the engine's cudnnFind
    return torch


def pixel_input(ctx: Ctx, device: str):
    """A function of uint8 pixel rows (n, h, w, c), already on ``device``, to the model's input
    there: each pixel value looked up in the engine's own table of what its preprocessing makes
    of it (so the same float32 values as lenet's), laid out as the model takes them. The GPU
    peers' uint8 rows: the same bytes over PCIe as lenet-cuda-pixels sends (issue 75)."""
    import torch

    import lenet

    engine = lenet.Engine(ctx.weights, device="cpu", threads=1, **ctx.preprocessing)
    pre, c = engine.preprocessing, engine.image_shape[2]
    table = torch.from_numpy(pre.table(c)).to(device)
    channels = torch.arange(c, device=device)
    scale = torch.tensor(pre.scale, dtype=torch.float32, device=device)
    mean, std = (torch.tensor(v, dtype=torch.float32, device=device) for v in (pre.mean, pre.std))
    rest = tuple(engine.model.input_shape[1:])
    transpose = c > 1 and engine.model.images_channels_first

    def to_input(rows):
        if rows.dtype == torch.uint8:
            x = table[rows.long(), channels]  # (n, h, w, c) float32
        else:  # rows resized to the model's size are float32: Preprocessing.apply's arithmetic
            x = rows * scale
            if not pre.plain:
                x = (x - mean) / std
        return (x.permute(0, 3, 1, 2) if transpose else x).reshape(len(rows), *rest)

    return to_input


def _torch_cuda(ctx: Ctx, pixels: bool):
    from .nets import torch_module

    torch = _torch_on_gpu()
    net = torch_module(ctx.spec, device="cuda")
    to_input = pixel_input(ctx, "cuda") if pixels else (lambda x: x)

    def run(x):
        with torch.inference_mode():
            return net(to_input(torch.from_numpy(x).to("cuda"))).cpu().numpy()

    return run


@contender(
    "torch-cuda",
    ("torch",),
    "PyTorch on CUDA, functional ops, eager (FP32, TF32 off, cudnn.benchmark); host<->device copies included",
    device="cuda",
    process="own",
)
def _torch_cuda_floats(ctx):
    return _torch_cuda(ctx, False)


@contender(
    "torch-cuda-pixels",
    ("torch",),
    "PyTorch on CUDA, eager, fed the uint8 digits as lenet-cuda-pixels is: bytes uploaded, scaled on the device",
    device="cuda",
    process="own",
    takes="rows",
)
def _torch_cuda_pixels(ctx):
    return _torch_cuda(ctx, True)


@contender(
    "torch-cuda-graph",
    ("torch",),
    "PyTorch on CUDA, one torch.cuda.CUDAGraph per batch size replayed, "
    "the copies from and to pinned buffers in the graph (FP32)",
    device="cuda",
    process="own",
)
def _torch_cuda_graph_floats(ctx):
    return _torch_cuda_graph(ctx, False)


@contender(
    "torch-cuda-graph-pixels",
    ("torch",),
    "PyTorch on CUDA, a CUDAGraph per batch size, fed the uint8 digits: bytes uploaded and scaled in the graph",
    device="cuda",
    process="own",
    takes="rows",
)
def _torch_cuda_graph_pixels(ctx):
    return _torch_cuda_graph(ctx, True)


def _torch_cuda_graph(ctx: Ctx, pixels: bool):
    from .nets import torch_module

    torch = _torch_on_gpu()
    net = torch_module(ctx.spec, device="cuda")
    to_input = pixel_input(ctx, "cuda") if pixels else (lambda x: x)
    graphs = {}

    def capture(x):
        """A graph for batch n, with every tensor it reads or writes: a graph holds device
        addresses, not references, so a tensor freed after the capture (the device input
        was, until 2026-11-27) hands its memory to the next allocation while replays keep
        using it."""
        host_in = torch.empty(x.shape, dtype=torch.from_numpy(x[:0]).dtype).pin_memory()  # float32 or uint8
        dev_in = torch.zeros(host_in.shape, dtype=host_in.dtype, device="cuda")
        side = torch.cuda.Stream()  # warm-up before capture, on a side stream (torch's rule)
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                y = net(to_input(dev_in))
        torch.cuda.current_stream().wait_stream(side)
        host_out = torch.empty(y.shape, dtype=torch.float32).pin_memory()
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph):
            dev_in.copy_(host_in, non_blocking=True)
            dev_out = net(to_input(dev_in))
            host_out.copy_(dev_out, non_blocking=True)
        return {
            "graph": graph,
            "tensors": (host_in, dev_in, dev_out, host_out),
            "in": host_in.numpy(),
            "out": host_out.numpy(),
        }

    def run(x):
        if len(x) not in graphs:
            graphs[len(x)] = capture(x)
        g = graphs[len(x)]
        np.copyto(g["in"], x)
        g["graph"].replay()
        torch.cuda.current_stream().synchronize()
        return g["out"].copy()

    return run


def _jax_on_gpu():
    import jax

    if jax.default_backend() != "gpu":
        raise Unavailable(f"JAX {jax.__version__} sees no GPU (its backend: {jax.default_backend()})")
    return jax


@contender(
    "jax-jit",
    ("jax",),
    "JAX on CUDA: the model's layers as one jax.jit function (lax ops, "
    "precision HIGHEST: FP32); host<->device copies included",
    device="cuda",
    process="own",
)
def _jax_jit(ctx):
    from .nets import jax_forward

    jax = _jax_on_gpu()
    f = jax.jit(jax_forward(ctx.spec))
    return lambda x: np.asarray(f(x))


@contender(
    "keras-jax",
    ("jax", "keras"),
    "Keras 3 on the JAX backend (CUDA): the model's stateless_call under jax.jit (FP32), in a process of its own",
    device="cuda",
    process="own",
    env={"KERAS_BACKEND": "jax", "JAX_DEFAULT_MATMUL_PRECISION": "highest"},
)
def _keras_jax(ctx):
    jax = _jax_on_gpu()
    jax.config.update("jax_default_matmul_precision", "highest")
    import keras

    if keras.backend.backend() != "jax":
        raise RuntimeError(f"Keras runs on {keras.backend.backend()}, not JAX: KERAS_BACKEND was set too late")
    model = keras_probability_model(ctx)
    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]
    f = jax.jit(lambda t, n, x: model.stateless_call(t, n, x, training=False)[0])
    return lambda x: np.asarray(f(trainable, fixed, x))
