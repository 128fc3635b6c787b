"""ONNX operators -> the core's layer records, one converter per operator (``CONVERTERS``).

ONNX tensors are NCHW: an image is the record's channels_first (C, H, W) per-sample
shape, and every spatial record says ``data_format='channels_first'``. Weights are
turned into the records' Keras layouts (a Conv's OIHW kernel to HWIO, a Gemm's
(out, in) matrix to (in, out)). A value is either a constant (folded here with
numpy, graph.BATCH standing for the batch axis in folded shapes) or a value of the
network: a record's output, its per-sample shape as ONNX's shape inference gives it,
and whether it has a batch axis (a model may have none: it then adds one itself).
What no converter takes raises UnsupportedModelError naming the operator, the node
and the file.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np

from .._native import _core
from ..errors import ModelFileError, UnsupportedModelError
from .builder import Builder, Val, image, zero_pad
from .graph import Graph, Node, attr, ints
from .rewrite import fold, fuse_gelu
from .shapes import cast, concat, identity, pad, quantized, reshape, transpose

# --------------------------------------------------------------------- windows


def _pads(b: Builder, n: Node, v: Val, kernel: tuple, strides: tuple, dilations: tuple) -> tuple[bool, tuple]:
    """(TensorFlow 'same', (top, bottom, left, right)) of a window node."""
    auto = attr(n, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        if auto == "SAME_UPPER":
            return True, (0, 0, 0, 0)
        pads = []
        for size, k, s, d in zip(v.shape[1:], kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            pads.append((total - total // 2, total // 2))  # SAME_LOWER: the extra pixel before
        return False, (pads[0][0], pads[0][1], pads[1][0], pads[1][1])
    if auto not in ("NOTSET", "VALID"):
        b.fail(n, f"auto_pad '{auto}' is not supported")
    p = ints(attr(n, "pads", [0, 0, 0, 0])) if auto == "NOTSET" else [0, 0, 0, 0]
    if len(p) != 4 or min(p) < 0:
        raise ModelFileError(f"{b.g.where_node(n)}: pads {p} (4 non-negative values for an image)")
    return False, (p[0], p[2], p[1], p[3])


def _window(b: Builder, n: Node, v: Val, kernel: Optional[tuple] = None) -> tuple:
    kernel = tuple(ints(attr(n, "kernel_shape", kernel)))
    if len(kernel) != 2:
        b.fail(n, f"kernel_shape {list(kernel)}: only 2-D windows are supported")
    strides = tuple(ints(attr(n, "strides", [1, 1])))
    dilations = tuple(ints(attr(n, "dilations", [1, 1])))
    same, pads = _pads(b, n, v, kernel, strides, dilations)
    return kernel, strides, dilations, same, pads


def conv(b: Builder, n: Node) -> None:
    v = b.val(n)
    image(b, n, v)
    w = b.const(n, 1, "weights")
    if w.ndim != 4:
        b.fail(n, f"weights of rank {w.ndim}: only 2-D convolutions are supported")
    kernel, strides, dilations, same, pads = _window(b, n, v, w.shape[2:])
    bias = b.opt_const(n, 2)
    weights = {"kernel": w.transpose(2, 3, 1, 0)}  # OIHW -> HWIO
    if bias is not None:
        weights["bias"] = bias.reshape(-1)
    x = zero_pad(b, n, v, pads)
    b.vals[n.outputs[0]] = b.emit(
        n,
        "conv2d",
        [x],
        b.need_shape(n, v),
        weights=weights,
        kernel=kernel,
        strides=strides,
        dilation=dilations,
        same_padding=same,
        filters=int(w.shape[0]),
        groups=int(attr(n, "group", 1)),
        use_bias=bias is not None,
        data_format="channels_first",
    )


def pool(b: Builder, n: Node) -> None:
    v = b.val(n)
    image(b, n, v)
    kernel, strides, dilations, same, pads = _window(b, n, v)
    if dilations != (1, 1):
        b.fail(n, f"dilations {list(dilations)} are not supported")
    avg = n.op == "AveragePool"
    shape = b.need_shape(n, v)
    include = avg and int(attr(n, "count_include_pad", 0))
    if same and include:
        b.fail(n, "auto_pad SAME with count_include_pad=1 is not supported")
    if include and any(pads):  # the padding's zeros are averaged in: a zero padding, then a pool
        v, pads = zero_pad(b, n, v, pads), (0, 0, 0, 0)
    if not same:
        # ceil_mode's partial windows at the end: absent pixels after, as many as ONNX's output
        # shape needs (pads are absent pixels too: max ignores them, average does not count them)
        extra = [
            max((o - 1) * st + k - (size + p0 + p1), 0)
            for o, size, k, st, p0, p1 in zip(shape[1:], v.shape[1:], kernel, strides, pads[::2], pads[1::2])
        ]
        if any(extra) and not int(attr(n, "ceil_mode", 0)):
            raise ModelFileError(f"{b.g.where_node(n)}: output {shape} does not follow from its input {v.shape}")
        pads = (pads[0], pads[1] + extra[0], pads[2], pads[3] + extra[1])
    b.vals[n.outputs[0]] = b.emit(
        n,
        "avg_pool2d" if avg else "max_pool2d",
        [v],
        shape,
        kernel=kernel,
        strides=strides,
        same_padding=same,
        pad=pads,
        data_format="channels_first",
    )


def global_pool(b: Builder, n: Node) -> None:
    v = b.val(n)
    image(b, n, v)
    kind = "global_avg_pool2d" if n.op == "GlobalAveragePool" else "global_max_pool2d"
    b.vals[n.outputs[0]] = b.emit(n, kind, [v], (v.shape[0], 1, 1), keepdims=True, data_format="channels_first")


# --------------------------------------------------------------------- dense


def _dense(b: Builder, n: Node, v: Val, kernel: np.ndarray, bias: Optional[np.ndarray]) -> Val:
    if len(v.shape) != 1:
        b.fail(n, f"a matrix product on a value of shape {v.shape} per sample is not supported (a flat one is)")
    if kernel.ndim != 2 or kernel.shape[0] != v.shape[0]:
        raise ModelFileError(f"{b.g.where_node(n)}: weights of shape {kernel.shape} for {v.shape[0]} inputs")
    weights = {"kernel": kernel}
    if bias is not None:
        weights["bias"] = np.broadcast_to(bias.reshape(-1) if bias.size != 1 else bias.reshape(()), (kernel.shape[1],))
    return b.emit(
        n,
        "dense",
        [v],
        (kernel.shape[1],),
        v.batched,
        weights=weights,
        units=int(kernel.shape[1]),
        use_bias=bias is not None,
    )


def gemm(b: Builder, n: Node) -> None:
    v = b.val(n)
    if int(attr(n, "transA", 0)):
        b.fail(n, "transA=1 (the input transposed) is not supported")
    w = b.const(n, 1, "B")
    if w.ndim != 2:
        raise ModelFileError(f"{b.g.where_node(n)}: B of rank {w.ndim}")
    w = (w.T if int(attr(n, "transB", 0)) else w) * np.float32(attr(n, "alpha", 1.0))
    c = b.opt_const(n, 2)
    bias = None if c is None else c.astype(np.float32) * np.float32(attr(n, "beta", 1.0))
    if bias is not None and bias.size not in (1, w.shape[1]):
        b.fail(n, f"C of shape {c.shape} (a per-row bias) is not supported")
    b.vals[n.outputs[0]] = _dense(b, n, v, w.astype(np.float32), bias)


def matmul(b: Builder, n: Node) -> None:
    if not b.is_const(n.inputs[1]):
        b.fail(n, "a product of two computed values is not supported (the second operand must be a constant)")
    b.vals[n.outputs[0]] = _dense(b, n, b.val(n), b.const(n, 1).astype(np.float32), None)


# --------------------------------------------------------------------- element-wise


def _act(kind: str, **fields: Any) -> Callable:
    def convert(b: Builder, n: Node) -> None:
        v = b.val(n)
        extra = {k: (f(n) if callable(f) else f) for k, f in fields.items()}
        b.vals[n.outputs[0]] = b.emit(n, "activation", [v], v.shape, v.batched, activation=kind, **extra)

    return convert


def clip(b: Builder, n: Node) -> None:
    v = b.val(n)
    if b.g.opset < 11:
        lo, hi = float(attr(n, "min", -math.inf)), float(attr(n, "max", math.inf))
    else:
        lo_c, hi_c = b.opt_const(n, 1), b.opt_const(n, 2)
        lo = -math.inf if lo_c is None else float(lo_c.reshape(-1)[0])
        hi = math.inf if hi_c is None else float(hi_c.reshape(-1)[0])
    if lo != 0.0 or not hi > 0:
        b.fail(n, f"Clip to [{lo}, {hi}] is not supported (Clip from 0: ReLU with a ceiling, is)")
    b.vals[n.outputs[0]] = b.emit(n, "activation", [v], v.shape, v.batched, activation="relu", max_value=hi)


def softmax(b: Builder, n: Node) -> None:
    v = b.val(n)
    axis = int(attr(n, "axis", 1 if b.g.opset < 13 else -1))
    rank = len(v.shape) + v.batched
    if axis < 0:
        axis += rank
    if axis != rank - 1 or len(v.shape) != 1:
        b.fail(
            n,
            f"{n.op} over axis {attr(n, 'axis', 'default')} of a value of shape {v.shape} per sample is not "
            "supported (over the class scores of a flat value is)",
        )
    kind = "log_softmax" if n.op == "LogSoftmax" else "softmax"
    b.vals[n.outputs[0]] = b.emit(n, kind, [v], v.shape, v.batched, axes=[-1])


def batch_norm(b: Builder, n: Node) -> None:
    v = b.val(n)
    if b.g.opset < 9 and not int(attr(n, "spatial", 1)):
        b.fail(n, "spatial=0 (statistics per pixel) is not supported")
    gamma, beta, mean, var = (b.const(n, i).astype(np.float32).reshape(-1) for i in (1, 2, 3, 4))
    b.vals[n.outputs[0]] = b.emit(
        n,
        "batch_norm",
        [v],
        v.shape,
        v.batched,
        epsilon=float(attr(n, "epsilon", 1e-5)),
        axes=[1] if len(v.shape) == 3 else [-1],
        weights={"gamma": gamma, "beta": beta, "moving_mean": mean, "moving_variance": var},
    )


def _channels(v: Val) -> int:
    return v.shape[0] if len(v.shape) == 3 else v.shape[-1]


def _per_channel(b: Builder, n: Node, v: Val, c: np.ndarray) -> Optional[np.ndarray]:
    """c as one value per channel of v (broadcast as ONNX does), None for one value in all."""
    c = np.asarray(c, dtype=np.float64)
    if c.size == 1:
        return None
    full = (1,) + tuple(v.shape) if v.batched else tuple(v.shape)
    try:
        bc = np.broadcast_to(c, np.broadcast_shapes(c.shape, full))
    except ValueError:
        raise ModelFileError(
            f"{b.g.where_node(n)}: a constant of shape {c.shape} does not broadcast to {full}"
        ) from None
    if bc.shape != full:
        b.fail(n, f"a constant of shape {c.shape} that widens {full} is not supported")
    axis = (1 if v.batched else 0) if len(v.shape) == 3 else len(full) - 1
    lead = [slice(None) if i == axis else 0 for i in range(len(full))]
    per = bc[tuple(lead)]
    if not np.array_equal(np.broadcast_to(per.reshape([-1 if i == axis else 1 for i in range(len(full))]), full), bc):
        b.fail(n, f"a constant of shape {c.shape} that varies within a channel is not supported")
    return per


def _affine(b: Builder, n: Node, v: Val, scale: Any, shift: Any) -> Val:
    """y = x * scale + shift, one value in all (rescaling) or per channel (a batch norm
    with mean 0, variance 1 and epsilon 0: exactly x * gamma + beta)."""
    if np.ndim(scale) == 0 and np.ndim(shift) == 0:
        return b.emit(n, "rescaling", [v], v.shape, v.batched, scale=float(scale), offset=float(shift))
    ch = _channels(v)
    gamma = np.broadcast_to(np.asarray(scale, np.float64), (ch,)).astype(np.float32)
    beta = np.broadcast_to(np.asarray(shift, np.float64), (ch,)).astype(np.float32)
    return b.emit(
        n,
        "batch_norm",
        [v],
        v.shape,
        v.batched,
        epsilon=0.0,
        axes=[1] if len(v.shape) == 3 else [-1],
        weights={
            "gamma": gamma,
            "beta": beta,
            "moving_mean": np.zeros(ch, np.float32),
            "moving_variance": np.ones(ch, np.float32),
        },
    )


_MERGES = {
    "Add": "add",
    "Sum": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Max": "maximum",
    "Min": "minimum",
    "Mean": "average",
}


def binary(b: Builder, n: Node) -> None:
    dyn = [i for i, name in enumerate(n.inputs) if name in b.vals]
    if len(dyn) == len(n.inputs):  # every operand computed: a merge layer
        if n.op not in _MERGES:
            b.fail(n, f"{n.op} of two computed values is not supported")
        vs = [b.val(n, i) for i in dyn]
        if any(x.shape != vs[0].shape or x.batched != vs[0].batched for x in vs):
            b.fail(n, f"operands of shapes {[x.shape for x in vs]}: broadcasting is not supported")
        b.vals[n.outputs[0]] = b.emit(n, _MERGES[n.op], vs, vs[0].shape, vs[0].batched)
        return
    if len(n.inputs) != 2 or len(dyn) != 1 or n.op not in ("Add", "Sub", "Mul", "Div"):
        b.fail(n, f"{n.op} with these operands is not supported")
    i = dyn[0]
    v = b.val(n, i)
    c = b.const(n, 1 - i).astype(np.float64)
    per = _per_channel(b, n, v, c)
    k = float(c.reshape(-1)[0]) if per is None else per
    if n.op == "Add":
        out = _affine(b, n, v, 1.0, k)
    elif n.op == "Sub":
        out = _affine(b, n, v, 1.0, -np.asarray(k)) if i == 0 else _affine(b, n, v, -1.0, k)
    elif n.op == "Mul":
        out = _affine(b, n, v, k, 0.0)
    elif i == 0:
        out = _affine(b, n, v, 1.0 / np.asarray(k), 0.0)
    else:
        b.fail(n, "a constant divided by a computed value is not supported")
    b.vals[n.outputs[0]] = out


# --------------------------------------------------------------------- GELU


def gelu(b: Builder, n: Node) -> None:
    v = b.val(n)
    approx = attr(n, "approximate", "none")
    b.vals[n.outputs[0]] = b.emit(
        n, "activation", [v], v.shape, v.batched, activation="gelu_tanh" if approx == "tanh" else "gelu"
    )


# --------------------------------------------------------------------- the table

CONVERTERS: dict[str, Callable[[Builder, Node], None]] = {
    "Conv": conv,
    "Gemm": gemm,
    "MatMul": matmul,
    "MaxPool": pool,
    "AveragePool": pool,
    "GlobalAveragePool": global_pool,
    "GlobalMaxPool": global_pool,
    "BatchNormalization": batch_norm,
    "Relu": _act("relu"),
    "LeakyRelu": _act("relu", alpha=lambda n: float(attr(n, "alpha", 0.01))),
    "Tanh": _act("tanh"),
    "Sigmoid": _act("sigmoid"),
    "Elu": _act("elu", alpha=lambda n: float(attr(n, "alpha", 1.0))),
    "Softplus": _act("softplus"),
    "Softsign": _act("softsign"),
    "HardSigmoid": _act(
        "hard_sigmoid", alpha=lambda n: float(attr(n, "alpha", 0.2)), beta=lambda n: float(attr(n, "beta", 0.5))
    ),
    "Gelu": gelu,
    "Clip": clip,
    "Softmax": softmax,
    "LogSoftmax": softmax,
    "Add": binary,
    "Sub": binary,
    "Mul": binary,
    "Div": binary,
    "Sum": binary,
    "Max": binary,
    "Min": binary,
    "Mean": binary,
    "Flatten": reshape,
    "Reshape": reshape,
    "Squeeze": reshape,
    "Unsqueeze": reshape,
    "Transpose": transpose,
    "Concat": concat,
    "Pad": pad,
    "Identity": identity,
    "Dropout": identity,
    "Cast": cast,
    **{
        op: quantized
        for op in (
            "QuantizeLinear",
            "DequantizeLinear",
            "DynamicQuantizeLinear",
            "ConvInteger",
            "MatMulInteger",
            "QLinearConv",
            "QLinearMatMul",
        )
    },
}


def input_axes(g: Graph) -> tuple[bool, tuple]:
    """Whether the input has a batch axis, and its per-sample shape: (N, C, H, W) and
    (N, features) have one; (N, H, W) when its first axis is not a fixed size (Keras'
    Flatten(input_shape=(28, 28)) through tf2onnx, PyTorch's nn.Flatten first); a
    fixed (C, H, W), (H, W) or (features,) is one sample, the graph's author running it
    one at a time (the engine batches it)."""
    dims = list(g.input_shape)
    if len(dims) not in (1, 2, 3, 4):
        raise UnsupportedModelError(
            f"{g.where}: input '{g.input}' of rank {len(dims)} is not supported "
            "((N, C, H, W), (N, H, W), (N, features), or (C, H, W), (features,) without a batch axis)"
        )
    batched = len(dims) in (2, 4) or (len(dims) == 3 and dims[0] is None)
    per = tuple(dims[1:] if batched else dims)
    unknown = [i + batched for i, d in enumerate(per) if d is None]
    if unknown:
        shown = ", ".join(("N" if batched and i == 0 else "?" if d is None else str(d)) for i, d in enumerate(dims))
        raise UnsupportedModelError(
            f"{g.where}: input '{g.input}' of shape [{shown}]: its axis {', '.join(map(str, unknown))} "
            f"({'its size' if len(unknown) == 1 else 'their sizes'} is not fixed in the file) must have a fixed "
            "size; only the batch axis may vary. Export the model with a fixed image size"
        )
    return batched, per


def input_layout(g: Graph) -> str:
    """'nhwc' for a 4-D input every reader of which transposes it to NCHW first (tf2onnx and
    keras2onnx write Keras' channels_last models so): images go in as they are in memory."""
    if len(g.input_shape) != 4:
        return ""
    readers = [n for n in g.nodes if g.input in n.inputs]
    if readers and all(n.op == "Transpose" and ints(attr(n, "perm", [])) == [0, 3, 1, 2] for n in readers):
        return "nhwc"
    return ""


def convert(g: Graph) -> tuple[list, tuple]:
    """The records of g's output and the model's per-sample input shape."""
    b = Builder(g)
    batched, per = input_axes(g)
    b.no_batch = not batched
    b.vals[g.input] = Val(-1, per, batched)
    nodes = fuse_gelu(g.nodes, g.consts)
    for n in nodes:
        if fold(b, n):
            continue
        fn = CONVERTERS.get(n.op)
        if fn is None:
            raise UnsupportedModelError(f"{g.where_node(n)}: the operator {n.op} is not supported")
        fn(b, n)
    out = b.vals.get(g.output)
    if out is None:
        if g.output in b.consts:
            raise UnsupportedModelError(f"{g.where}: the output '{g.output}' is a constant")
        raise ModelFileError(f"{g.where}: the output '{g.output}' is not produced by any node")
    if out.record < 0:
        raise UnsupportedModelError(f"{g.where}: the model computes nothing (its output is its input)")
    if out.record != len(b.records) - 1:
        raise UnsupportedModelError(f"{g.where}: the output is not the last value computed")
    if len(per) == 3 and not any(r.data_format for r in b.records):
        _mark_channels_first(b.records, g)
    return b.records, per


def _mark_channels_first(records: list, g: Graph) -> None:
    """An image input read by no convolution or pooling: the core takes a model's data
    format from its spatial layers, so a zero padding of nothing says (C, H, W) (a copy)."""
    rec = _core.LayerSpec()
    rec.kind, rec.name, rec.keras_class = "zero_pad2d", g.input, "input"
    rec.inputs, rec.data_format = [-1], "channels_first"
    for r in records:
        r.inputs = [i + 1 if i >= 0 else 0 for i in r.inputs]
    records.insert(0, rec)
