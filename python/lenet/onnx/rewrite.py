"""What happens to a graph's nodes before they become records: constants folded with
numpy (shape chains such as Shape -> Gather -> Unsqueeze -> Concat -> Reshape, with
graph.BATCH standing for the batch axis), and GELU written as Erf fused into one node."""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from ..errors import ModelFileError
from .builder import Builder
from .graph import BATCH, Node, attr, ints

# --------------------------------------------------------------------- constants


def fold(b: Builder, n: Node) -> bool:
    """Evaluates n when every input is a constant (or a Shape of a computed value);
    False when it cannot."""
    if n.op == "Constant":
        for key in ("value", "value_float", "value_int", "value_floats", "value_ints"):
            if key in n.attrs:
                b.consts[n.outputs[0]] = np.asarray(n.attrs[key], np.float32 if "float" in key else None)
                return True
        b.fail(n, f"a Constant of kind {sorted(n.attrs)} is not supported")
    if n.op == "Shape" and n.inputs[0] in b.vals:
        v = b.vals[n.inputs[0]]
        whole = ((b.batch,) if v.batched else ()) + v.shape
        start, end = int(attr(n, "start", 0)), attr(n, "end", None)
        b.consts[n.outputs[0]] = np.asarray(whole, np.int64)[start : None if end is None else int(end)]
        return True
    ins = [i for i in n.inputs if i]
    if not ins or not all(i in b.consts for i in ins):
        return False
    a = [b.consts[i] if i else None for i in n.inputs]
    fn = _FOLDS.get(n.op)
    if fn is None:
        return False
    try:
        out = fn(b, n, a)
    except (ValueError, IndexError, TypeError) as e:
        raise ModelFileError(f"{b.g.where_node(n)}: cannot evaluate it on its constants ({e})") from e
    outs = out if isinstance(out, list) else [out]
    for name, value in zip(n.outputs, outs):
        b.consts[name] = np.asarray(value)
    return True


def _axes_input(b: Builder, n: Node, a: list) -> list[int]:
    if b.g.opset < 13 or len(a) < 2 or a[1] is None:
        return ints(attr(n, "axes", []))
    return ints(a[1])


def _slice(b: Builder, n: Node, a: list) -> np.ndarray:
    x = a[0]
    if b.g.opset < 10:
        starts, ends = ints(attr(n, "starts")), ints(attr(n, "ends"))
        axes = ints(attr(n, "axes", list(range(len(starts)))))
        steps = [1] * len(starts)
    else:
        starts, ends = ints(a[1]), ints(a[2])
        axes = ints(a[3]) if len(a) > 3 and a[3] is not None else list(range(len(starts)))
        steps = ints(a[4]) if len(a) > 4 and a[4] is not None else [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        big = 1 << 62
        sl[ax] = slice(max(min(s, big), -big), max(min(e, big), -big), st)
    return x[tuple(sl)]


_ARITH = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum}


def _arith(b: Builder, n: Node, a: list) -> np.ndarray:
    if any(np.any(np.asarray(x) == BATCH) for x in a):
        b.fail(n, "arithmetic on the batch size is not supported")
    if n.op == "Div":
        return (a[0] // a[1]) if np.asarray(a[0]).dtype.kind in "iu" else a[0] / a[1]
    return _ARITH[n.op](a[0], a[1])


def _axis_shape(n: Node, x: np.ndarray, a: np.ndarray) -> np.ndarray:
    """a (one value, or one per slice along the node's axis of x) shaped to broadcast on x."""
    a = np.asarray(a)
    if a.size == 1:
        return a.reshape(())
    axis = int(attr(n, "axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis < x.ndim or x.shape[axis] != a.size:
        raise ValueError(f"{a.size} scales or zero points along axis {axis} of shape {list(x.shape)}")
    return a.reshape([-1 if k == axis else 1 for k in range(x.ndim)])


def _dequantize(b: Builder, n: Node, a: list) -> np.ndarray:
    """DequantizeLinear of constants (a QDQ graph's weights and biases): (x - zero) * scale
    in float32, as ONNX Runtime computes it."""
    if int(attr(n, "block_size", 0)):
        b.fail(n, "blocked quantization (block_size) is not supported")
    x = a[0]
    zero = a[2] if len(a) > 2 and a[2] is not None else np.zeros((), np.int64)
    scale = _axis_shape(n, x, np.asarray(a[1], np.float32))
    shifted = x.astype(np.int64) - _axis_shape(n, x, zero).astype(np.int64)
    return shifted.astype(np.float32) * scale


def _quantize(b: Builder, n: Node, a: list) -> np.ndarray:
    """QuantizeLinear of constants (float weights quantized in the graph)."""
    if int(attr(n, "block_size", 0)):
        b.fail(n, "blocked quantization (block_size) is not supported")
    x = np.asarray(a[0], np.float32)
    zero = a[2] if len(a) > 2 and a[2] is not None else np.zeros((), np.uint8)
    if zero.dtype.kind not in "iu":
        b.fail(n, f"quantization to {zero.dtype.name} is not supported")
    info = np.iinfo(zero.dtype)
    q = np.rint(x / _axis_shape(n, x, np.asarray(a[1], np.float32))) + _axis_shape(n, x, zero).astype(np.float32)
    return np.clip(q, info.min, info.max).astype(zero.dtype)


_FOLDS: dict[str, Callable] = {
    "DequantizeLinear": _dequantize,
    "QuantizeLinear": _quantize,
    "Identity": lambda b, n, a: a[0],
    "Dropout": lambda b, n, a: a[0],
    "Cast": lambda b, n, a: (
        a[0]
        if np.asarray(a[0]).dtype == np.int64 and int(attr(n, "to", 1)) == 7
        else a[0].astype(
            {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}.get(
                int(attr(n, "to", 1)), np.float32
            )
        )
    ),
    "Gather": lambda b, n, a: np.take(a[0], a[1].astype(np.int64), axis=int(attr(n, "axis", 0))),
    "Unsqueeze": lambda b, n, a: np.expand_dims(
        a[0], tuple(sorted(x + a[0].ndim + len(_axes_input(b, n, a)) if x < 0 else x for x in _axes_input(b, n, a)))
    ),
    "Squeeze": lambda b, n, a: np.squeeze(a[0], tuple(_axes_input(b, n, a)) or None),
    "Concat": lambda b, n, a: np.concatenate([np.atleast_1d(x) for x in a], axis=int(attr(n, "axis", 0))),
    "Reshape": lambda b, n, a: a[0].reshape([d if d != 0 else a[0].shape[i] for i, d in enumerate(ints(a[1]))]),
    "Slice": _slice,
    "Transpose": lambda b, n, a: np.transpose(a[0], ints(attr(n, "perm")) if "perm" in n.attrs else None),
    "Add": _arith,
    "Sub": _arith,
    "Mul": _arith,
    "Div": _arith,
    "Max": _arith,
    "Min": _arith,
    "Sqrt": lambda b, n, a: np.sqrt(a[0]),
    "Neg": lambda b, n, a: -a[0],
    "ConstantOfShape": lambda b, n, a: np.full(
        ints(a[0]), np.asarray(attr(n, "value", np.zeros(1, np.float32))).reshape(-1)[0]
    ),
    "Flatten": lambda b, n, a: a[0].reshape(math.prod(a[0].shape[: int(attr(n, "axis", 1))]), -1),
}


# --------------------------------------------------------------------- GELU


def fuse_gelu(nodes: list[Node], consts: dict[str, np.ndarray]) -> list[Node]:
    """x * 0.5 * (1 + erf(x / sqrt 2)), as exporters before opset 20 write GELU
    (Div -> Erf -> Add 1 -> Mul x -> Mul 0.5, or 0.5 x first), -> one Gelu node."""
    consts = dict(consts)
    for nd in nodes:
        if nd.op == "Constant" and "value" in nd.attrs:
            consts[nd.outputs[0]] = np.asarray(nd.attrs["value"])
    by_out = {o: nd for nd in nodes for o in nd.outputs}
    readers: dict[str, list[Node]] = {}
    for nd in nodes:
        for i in nd.inputs:
            readers.setdefault(i, []).append(nd)

    def const_of(nd: Node, value: float) -> Optional[str]:
        for i, name in enumerate(nd.inputs):
            c = consts.get(name)
            if c is not None and c.size == 1 and abs(float(c.reshape(-1)[0]) - value) < 1e-6 * max(1, abs(value)):
                return nd.inputs[1 - i]
        return None

    def sole(name: str) -> Optional[Node]:
        r = readers.get(name, [])
        return r[0] if len(r) == 1 else None

    drop, replace = set(), {}
    for erf in (nd for nd in nodes if nd.op == "Erf"):
        scale = by_out.get(erf.inputs[0])
        if scale is None:
            continue
        x = (
            const_of(scale, math.sqrt(2.0))
            if scale.op == "Div"
            else const_of(scale, 1 / math.sqrt(2.0))
            if scale.op == "Mul"
            else None
        )
        add = sole(erf.outputs[0])
        if x is None or add is None or add.op != "Add" or const_of(add, 1.0) is None:
            continue
        m1 = sole(add.outputs[0])
        if m1 is None or m1.op != "Mul":
            continue
        other = m1.inputs[0] if m1.inputs[1] == add.outputs[0] else m1.inputs[1]
        if other == x:  # x * (1 + erf) then * 0.5
            m2 = sole(m1.outputs[0])
            if m2 is None or m2.op != "Mul" or const_of(m2, 0.5) is None:
                continue
            chain, last = [scale, erf, add, m1, m2], m2
        else:  # (0.5 x) * (1 + erf)
            half = by_out.get(other)
            if half is None or half.op != "Mul" or const_of(half, 0.5) != x:
                continue
            chain, last = [scale, erf, add, half, m1], m1
        if any(len(readers.get(c.outputs[0], [])) != 1 for c in chain[:-1] if c is not chain[-1]):
            continue
        drop.update(id(c) for c in chain)
        replace[id(last)] = Node("Gelu", erf.name + " (GELU)", [x], list(last.outputs), {})
    return [replace.get(id(nd), nd) for nd in nodes if id(nd) not in drop or id(nd) in replace]
