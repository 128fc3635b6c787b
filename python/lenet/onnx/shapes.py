"""ONNX operators that move or reshape values (Identity, Reshape and Flatten,
Transpose, Concat, Pad, Cast): converters of ops.py's table, onto the same layer
records."""

from __future__ import annotations

import math

from ..errors import ModelFileError
from . import quantized
from .builder import Builder, Val, image, zero_pad
from .graph import BATCH, Node, attr, ints


def _alias(b: Builder, n: Node, v: Val) -> None:
    b.vals[n.outputs[0]] = v


def identity(b: Builder, n: Node) -> None:
    _alias(b, n, b.val(n))


def _reshaped(b: Builder, n: Node, v: Val, full: tuple) -> None:
    """v reshaped to the ONNX shape ``full`` (C order, as ONNX reshapes)."""
    if b.no_batch:  # one sample: a leading 1 is where a batch axis is, if there is one
        full = tuple(1 if d in (None, BATCH) else d for d in full)
        batched = len(full) >= 2 and full[0] == 1
        per = tuple(full[1:]) if batched else tuple(full)
    elif v.batched:
        fixed = b.g.input_shape[0] if b.g.input_shape else None  # a fixed-batch export's N
        if not full or (full[0] not in (None, BATCH) and full[0] != fixed):
            b.fail(n, f"a reshape to {full} that moves the batch axis is not supported")
        batched, per = True, tuple(full[1:])
    elif len(full) == len(v.shape) + 1 and full[0] == 1:
        batched, per = True, tuple(full[1:])  # the model adds its batch axis
    else:
        batched, per = False, tuple(full)
    if any(d is None or d < 1 for d in per):
        b.fail(n, f"the shape of '{n.outputs[0]}' is not known")
    if math.prod(per) != math.prod(v.shape):
        raise ModelFileError(f"{b.g.where_node(n)}: cannot reshape {v.shape} into {per} per sample")
    if per == v.shape:
        b.vals[n.outputs[0]] = Val(v.record, v.shape, batched)
    elif len(per) == 1:
        b.vals[n.outputs[0]] = b.emit(n, "flatten", [v], per, batched)
    else:
        b.vals[n.outputs[0]] = b.emit(n, "reshape", [v], per, batched, target_shape=list(per))


def _full_shape(b: Builder, n: Node) -> tuple:
    dims = b.g.shapes.get(n.outputs[0])
    return tuple(dims) if dims is not None else None


def reshape(b: Builder, n: Node) -> None:
    """Reshape, Flatten, Squeeze, Unsqueeze of a computed value: its ONNX output shape (the
    batch axis as BATCH) from the constant operands, else from ONNX's shape inference."""
    v = b.val(n)
    whole = ((b.batch,) if v.batched else ()) + v.shape
    full = _full_shape(b, n)
    if n.op == "Reshape" and b.is_const(n.inputs[1]):
        full = _resolve_reshape(b, n, v, ints(b.const(n, 1)))
    elif n.op == "Flatten":
        axis = int(attr(n, "axis", 1))
        axis = axis + len(whole) if axis < 0 else axis
        if v.batched and axis != 1 and not b.no_batch:
            b.fail(n, f"Flatten at axis {attr(n, 'axis')} (not right after the batch axis) is not supported")
        full = (BATCH if v.batched and not b.no_batch else math.prod(whole[:axis]), math.prod(whole[axis:]))
    elif n.op in ("Squeeze", "Unsqueeze"):
        if b.g.opset < 13:
            axes = ints(attr(n, "axes", []))
        else:
            axes = ints(b.const(n, 1)) if len(n.inputs) > 1 and n.inputs[1] else []
        if n.op == "Squeeze":
            axes = [a + len(whole) if a < 0 else a for a in axes] or [i for i, d in enumerate(whole) if d == 1]
            if v.batched and 0 in axes:  # a model of one sample dropping its batch axis at the end
                if axes != [0]:
                    b.fail(n, "squeezing the batch axis together with others is not supported")
                b.vals[n.outputs[0]] = Val(v.record, v.shape, False)
                return
            full = tuple(d for i, d in enumerate(whole) if i not in axes)
        else:
            out = list(whole)
            rank = len(whole) + len(axes)
            for a in sorted(a + rank if a < 0 else a for a in axes):
                out.insert(a, 1)
            full = tuple(out)
    if full is None:
        b.fail(n, f"the shape of '{n.outputs[0]}' is not known")
    if v.batched and full and full[0] == BATCH:
        full = (None,) + tuple(full[1:])
    _reshaped(b, n, v, tuple(full))


def _resolve_reshape(b: Builder, n: Node, v: Val, target: list[int]) -> tuple:
    whole = ((b.batch,) if v.batched else ()) + v.shape
    out = []
    for i, t in enumerate(target):
        if t == 0 and not int(attr(n, "allowzero", 0)):
            if i >= len(whole):
                raise ModelFileError(f"{b.g.where_node(n)}: shape {target} copies a dimension the input lacks")
            out.append(whole[i])
        else:
            out.append(t)
    known = [d for d in out if d not in (-1, BATCH)]
    total = math.prod(v.shape)
    rest = total // max(math.prod(known), 1) if -1 in out else None
    if out.count(-1) > 1:
        raise ModelFileError(f"{b.g.where_node(n)}: shape {target} has more than one -1")
    if BATCH in out:
        if out[0] != BATCH or out.count(BATCH) > 1:
            b.fail(n, f"a reshape to {target} that moves the batch axis is not supported")
        return (None,) + tuple(rest if d == -1 else d for d in out[1:])
    if v.batched and out and out[0] == -1 and not b.no_batch:
        # (-1, k): the batch axis inferred (a fixed-batch export)
        return (None,) + tuple(out[1:])
    return tuple(rest if d == -1 else d for d in out)


def transpose(b: Builder, n: Node) -> None:
    v = b.val(n)
    perm = ints(attr(n, "perm", list(range(len(v.shape) + v.batched))[::-1]))
    if v.batched:
        if perm[0] != 0:
            b.fail(n, f"perm {perm} moves the batch axis")
        dims = [p for p in perm[1:]]
    else:
        dims = [p + 1 for p in perm]
    if dims == sorted(dims):
        _alias(b, n, v)
        return
    shape = tuple(v.shape[d - 1] for d in dims)
    b.vals[n.outputs[0]] = b.emit(n, "permute", [v], shape, v.batched, axes=dims)


def concat(b: Builder, n: Node) -> None:
    vs = [b.val(n, i) for i in range(len(n.inputs))]
    v = vs[0]
    rank = len(v.shape) + v.batched
    axis = int(attr(n, "axis", 1))
    axis = axis + rank if axis < 0 else axis
    keras_axis = axis if v.batched else axis + 1
    if v.batched and axis == 0:
        b.fail(n, "concatenation along the batch axis is not supported")
    shape = list(v.shape)
    shape[keras_axis - 1] = sum(x.shape[keras_axis - 1] for x in vs)
    b.vals[n.outputs[0]] = b.emit(n, "concatenate", vs, tuple(shape), v.batched, axes=[keras_axis])


def pad(b: Builder, n: Node) -> None:
    v = b.val(n)
    image(b, n, v)
    mode = attr(n, "mode", "constant")
    if b.g.opset < 11:
        p, value = ints(attr(n, "pads", [])), float(attr(n, "value", 0.0))
    else:
        p = ints(b.const(n, 1, "pads"))
        cv = b.opt_const(n, 2)
        value = 0.0 if cv is None else float(cv.reshape(-1)[0])
        if len(n.inputs) > 3 and n.inputs[3]:
            b.fail(n, "padding over chosen axes is not supported")
    if mode != "constant" or value != 0.0:
        b.fail(n, f"padding mode '{mode}' with value {value} is not supported (zeros are)")
    if len(p) != 8 or any(p[i] for i in (0, 1, 4, 5)) or min(p) < 0:
        b.fail(n, f"pads {p} are not supported (zero padding of the height and width is)")
    b.vals[n.outputs[0]] = zero_pad(b, n, v, (p[2], p[6], p[3], p[7]))


def cast(b: Builder, n: Node) -> None:
    if quantized.cast(b, n):
        return
    if int(attr(n, "to", 1)) != 1:  # TensorProto.FLOAT
        b.fail(n, f"a cast of a computed value to type {attr(n, 'to')} is not supported (to float is)")
    identity(b, n)
