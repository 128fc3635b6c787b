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
from typing import Any, Callable

import numpy as np

from .._native import _core
from ..errors import ModelFileError, UnsupportedModelError
from . import quantized
from .builder import Builder, Val, image, zero_pad
from .emit import affine_of, conv_of, dense_of, per_channel, window
from .graph import Graph, Node, attr, ints
from .rewrite import fold, fuse_gelu
from .shapes import cast, concat, identity, pad, reshape, transpose

# --------------------------------------------------------------------- windows


def conv(b: Builder, n: Node) -> None:
    v = b.val(n)
    image(b, n, v)
    w = b.const(n, 1, "weights")
    b.vals[n.outputs[0]] = conv_of(b, n, v, w, b.opt_const(n, 2))


def pool(b: Builder, n: Node) -> None:
    v = b.val(n)
    image(b, n, v)
    kernel, strides, dilations, same, pads = window(b, n, v)
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
    b.vals[n.outputs[0]] = dense_of(b, n, v, w.astype(np.float32), bias)


def matmul(b: Builder, n: Node) -> None:
    if not b.is_const(n.inputs[1]):
        b.fail(n, "a product of two computed values is not supported (the second operand must be a constant)")
    b.vals[n.outputs[0]] = dense_of(b, n, b.val(n), b.const(n, 1).astype(np.float32), None)


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
    if any(name in b.ints for name in n.inputs):  # a quantized graph's scales and sums
        quantized.scaled(b, n)
        return
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
    per = per_channel(b, n, v, c)
    k = float(c.reshape(-1)[0]) if per is None else per
    if n.op == "Add":
        out = affine_of(b, n, v, 1.0, k)
    elif n.op == "Sub":
        out = affine_of(b, n, v, 1.0, -np.asarray(k)) if i == 0 else affine_of(b, n, v, -1.0, k)
    elif n.op == "Mul":
        out = affine_of(b, n, v, k, 0.0)
    elif i == 0:
        out = affine_of(b, n, v, 1.0 / np.asarray(k), 0.0)
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
    **quantized.CONVERTERS,
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
    """'nhwc' for a 4-D input of Keras' layout, whose images go in as they are in memory: every
    reader transposes it to NCHW first (tf2onnx and keras2onnx write Keras' channels_last
    convolutions so), or every reader only flattens it (a Keras MLP's Flatten: a Reshape or a
    Flatten) and its shape reads as an image only that way, [N, H, W, 1 or 3]."""
    if len(g.input_shape) != 4:
        return ""
    readers = [n for n in g.nodes if g.input in n.inputs]
    if readers and all(n.op == "Transpose" and ints(attr(n, "perm", [])) == [0, 3, 1, 2] for n in readers):
        return "nhwc"
    _, second, _, last = g.input_shape
    if readers and all(n.op in ("Reshape", "Flatten") for n in readers) and last in (1, 3) and second not in (1, 3):
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
            raise UnsupportedModelError(
                f"{g.where_node(n)}: the operator {n.op} is not supported; lenet runs "
                f"{', '.join(sorted(CONVERTERS))} (and folds what depends on constants alone): export the "
                "model with those operators, or run it in ONNX Runtime"
            )
        fn(b, n)
    out = b.vals.get(g.output)
    if out is None:
        if g.output in b.consts:
            raise UnsupportedModelError(f"{g.where}: the output '{g.output}' is a constant")
        if g.output in b.ints:
            raise UnsupportedModelError(
                f"{g.where}: the output '{g.output}' is the {b.ints[g.output].kind.replace('_', ' ')} of a "
                "quantization, not float values: a model lenet runs ends in float scores (DequantizeLinear, or "
                "Cast and Mul by the scales, after the integer operators)"
            )
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
