"""Quantized ONNX graphs: ONNX Runtime's dynamic quantization (DynamicQuantizeLinear,
ConvInteger, MatMulInteger, each followed by Cast and a Mul by the scales) and static
QDQ graphs (QuantizeLinear / DequantizeLinear pairs around float operators; their
constant weights and biases are dequantized by the folding in rewrite.py).

The core computes it in float32, exact where the operators define integers:

* a dynamic quantization (the core's ``quantize`` record with ``integers``) gives each
  value's integer less the zero point, as a float; ConvInteger and MatMulInteger become a
  conv2d / dense record with ``integers`` (weights: their integers less their zero point),
  whose sums are exact in float32 (below 2^24); the Mul of those sums by the input's scale
  times the weights' becomes a ``dequantize`` record, which takes the input's scale from
  the same values the quantization saw, per sample. So every value that a later
  quantization rounds is the graph's, bit for bit, and no rounding flips (and ONNX Runtime's
  where its kernels are exact: not on x86 without VNNI, docs/model-files.md).
* a static quantization (QDQ) gives the values its integers stand for, ((q - zero) *
  scale), to the float operators after its DequantizeLinear, as the graph says.

A dynamic quantization chooses its scale per sample, as the graph's author ran it: one
image at a time (ONNX Runtime's DynamicQuantizeLinear takes one scale for the whole tensor
it is given, so a batch given to ONNX Runtime at once is quantized as one).

The graph's integer tensors, and a dynamic quantization's scale and zero point, are not
values of the network: Builder.ints holds them (``Ints``), and only the converters here
(and Cast and Mul) read them; any other operator refuses them by name.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelFileError
from .builder import Builder, Ints, Val
from .emit import channels_of, conv_of, dense_of, per_channel
from .graph import Node, attr

# ONNX's element types of quantized tensors that the core takes (TensorProto numbers).
_TYPES = {2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16}


def _range(b: Builder, n: Node, dtype: np.dtype) -> tuple[int, int]:
    if np.dtype(dtype) not in [np.dtype(t) for t in _TYPES.values()]:
        b.fail(n, f"quantization to {np.dtype(dtype).name} is not supported (to int8, uint8, int16, uint16 is)")
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _ints(b: Builder, n: Node, i: int, kind: str, what: str) -> Ints:
    name = n.inputs[i] if i < len(n.inputs) else ""
    t = b.ints.get(name)
    if t is None or t.kind != kind:
        got = f"the {t.kind.replace('_', ' ')} of a quantization" if t else "a float value"
        b.fail(n, f"its {what} '{name}' is {got}; a quantized graph's {kind.replace('_', ' ')} is expected there")
    return t


def _scalar(b: Builder, n: Node, a: np.ndarray, what: str) -> np.ndarray:
    if a.size != 1:
        b.fail(n, f"a {what} of shape {list(a.shape)} for a computed tensor is not supported (one for all of it is)")
    return a.reshape(())


def _check_input_zero(b: Builder, n: Node, q: Ints, i: int) -> None:
    """Input i, the zero point an integer operator subtracts from q, must be q's own."""
    name = n.inputs[i] if i < len(n.inputs) else ""
    if q.scale == 0.0:  # dynamic: the zero point its DynamicQuantizeLinear gave
        z = b.ints.get(name)
        if z is None or z.kind != "zero_point" or z.source != q.source:
            b.fail(n, f"its zero point '{name}' is not the one its input's DynamicQuantizeLinear gave")
        return
    z = 0 if not name else int(_scalar(b, n, b.const(n, i, "zero point"), "zero point"))
    if z != q.zero:
        b.fail(n, f"its zero point {z} is not its input's ({q.zero})")


# --------------------------------------------------------------------- quantizing


def dynamic_quantize(b: Builder, n: Node) -> None:
    """DynamicQuantizeLinear: uint8, its scale and zero point from each sample's range."""
    v = b.val(n)
    q = n.outputs[0]
    rec = b.emit(n, "quantize", [v], v.shape, v.batched, integers=True)  # quant_scale 0: dynamic
    b.ints[q] = Ints("values", q, rec, input=v)
    for out, kind in zip(n.outputs[1:3], ("scale", "zero_point")):
        if out:
            b.ints[out] = Ints(kind, q)


def quantize(b: Builder, n: Node) -> None:
    """QuantizeLinear of a computed value by constants (a static quantization)."""
    v = b.val(n)
    if int(attr(n, "block_size", 0)):
        b.fail(n, "blocked quantization (block_size) is not supported")
    scale = np.float32(_scalar(b, n, b.const(n, 1, "y_scale"), "scale"))
    zero = b.opt_const(n, 2)
    if zero is not None:
        dtype = zero.dtype
    else:  # no zero point: opset 21's output_dtype (0: unset), else uint8
        dtype = _TYPES.get(int(attr(n, "output_dtype", 0)) or 2, np.float32)
    lo, hi = _range(b, n, dtype)
    z = 0 if zero is None else int(_scalar(b, n, zero, "zero point"))
    if not (np.isfinite(scale) and scale > 0):
        raise ModelFileError(f"{b.g.where_node(n)}: scale {scale} (a positive number is needed)")
    rec = b.emit(n, "quantize", [v], v.shape, v.batched, quant_scale=float(scale), zero_point=z, quant_range=(lo, hi))
    b.ints[n.outputs[0]] = Ints("values", n.outputs[0], rec, scale=float(scale), zero=z)


def dequantize(b: Builder, n: Node) -> None:
    """DequantizeLinear of a quantization computed here, by its own scale and zero point:
    the quantize record's output, or for a dynamic one a dequantize record (constants are
    dequantized when folded)."""
    q = _ints(b, n, 0, "values", "input")
    if q.scale == 0.0:
        s = b.ints.get(n.inputs[1]) if len(n.inputs) > 1 else None
        if s is None or s.kind != "scale" or s.source != q.source or np.any(np.asarray(s.factor) != 1):
            b.fail(n, "it dequantizes by another scale than its DynamicQuantizeLinear's: not supported")
        _check_input_zero(b, n, q, 2)
        b.vals[n.outputs[0]] = _dequantized(b, n, q.val, q, np.float32(1))
        return
    s = np.float32(_scalar(b, n, b.const(n, 1, "x_scale"), "scale"))
    if s != np.float32(q.scale):
        b.fail(n, f"it dequantizes by scale {s}, its quantization used {q.scale}: not supported")
    _check_input_zero(b, n, q, 2)
    b.vals[n.outputs[0]] = q.val


# --------------------------------------------------------------------- integer layers


def _weight_ints(b: Builder, n: Node, i: int, zero_i: int, axis: int) -> np.ndarray:
    """The integer weights (input i) less their zero point (input zero_i: one for all, or
    one per output channel along `axis`), as float32 (exact: at most 2^17 apart)."""
    w = b.const(n, i, "weights")
    if w.dtype.kind not in "iu":
        raise ModelFileError(f"{b.g.where_node(n)}: weights of type {w.dtype.name} (integers are expected)")
    w = w.astype(np.int64)
    z = b.opt_const(n, zero_i)
    if z is not None and z.size > 1:
        if z.size != w.shape[axis]:
            raise ModelFileError(f"{b.g.where_node(n)}: {z.size} weight zero points for {w.shape[axis]} outputs")
        z = z.reshape([-1 if k == axis else 1 for k in range(w.ndim)])
    return (w - (0 if z is None else z.astype(np.int64))).astype(np.float32)


def integer_layer(b: Builder, n: Node) -> None:
    """ConvInteger (weights OIHW, a zero point per output channel O) or MatMulInteger
    (weights (in, out), one per column) of a DynamicQuantizeLinear's integers by constant
    integers: a conv2d / dense record on them whose sums are exact."""
    q = _ints(b, n, 0, "values", "input")
    _dynamic_only(b, n, q)
    _check_input_zero(b, n, q, 2)
    conv = n.op == "ConvInteger"
    w = _weight_ints(b, n, 1, 3, 0 if conv else 1)
    emit = conv_of if conv else dense_of
    b.ints[n.outputs[0]] = Ints("sums", q.source, emit(b, n, q.val, w, None, integers=True))


def _dynamic_only(b: Builder, n: Node, q: Ints) -> None:
    if q.scale != 0.0:
        b.fail(
            n,
            f"{n.op} of a QuantizeLinear's integers is not supported (of a DynamicQuantizeLinear's is; a "
            "static quantization in the QDQ format is, DequantizeLinear then float operators)",
        )


def cast(b: Builder, n: Node) -> bool:
    """Cast of integer sums or a scale to float: the same tensor. False for other tensors."""
    t = b.ints.get(n.inputs[0])
    if t is None:
        return False
    if t.kind not in ("sums", "scale") or int(attr(n, "to", 1)) != 1:
        b.fail(
            n, f"a cast of the {t.kind.replace('_', ' ')} of a quantization to type {attr(n, 'to')} is not supported"
        )
    b.ints[n.outputs[0]] = t
    return True


def scaled(b: Builder, n: Node) -> None:
    """Mul of a dynamic scale by constants (the weights' scales), or of integer sums by
    their input's scale times those: the sums' record times the constants."""
    if n.op != "Mul" or len(n.inputs) != 2:
        b.fail(n, f"{n.op} of a quantization's integers or scale is not supported (Mul by their scale is)")
    a, c = (b.ints.get(x) for x in n.inputs)
    if a is not None and c is not None:
        sums, scale = (a, c) if a.kind == "sums" else (c, a)
        if sums.kind != "sums" or scale.kind != "scale" or scale.source != sums.source:
            b.fail(n, "only integer sums times their own input's scale (and constants) is supported")
        b.vals[n.outputs[0]] = _dequantized(b, n, sums.val, b.ints[sums.source], np.asarray(scale.factor, np.float32))
        return
    t, other = (a, 1) if a is not None else (c, 0)
    if t.kind != "scale" or not b.is_const(n.inputs[other]):
        b.fail(n, f"the {t.kind.replace('_', ' ')} of a quantization times a computed value is not supported")
    factor = np.asarray(t.factor, np.float32) * b.consts[n.inputs[other]].astype(np.float32)
    b.ints[n.outputs[0]] = Ints("scale", t.source, factor=factor)


def _dequantized(b: Builder, n: Node, sums: Val, q: Ints, factor: np.ndarray) -> Val:
    """sums times the scale q's dynamic quantization chose (per sample, from q.input)
    times factor (one value, or one per channel of sums): a dequantize record."""
    per = per_channel(b, n, sums, factor)
    scale = np.broadcast_to(factor.reshape(()) if per is None else per, (channels_of(sums),)).astype(np.float32)
    return b.emit(n, "dequantize", [sums, q.input], sums.shape, sums.batched, weights={"scale": scale})


def qoperator(b: Builder, n: Node) -> None:
    b.fail(
        n,
        "the QOperator format (QLinearConv, QLinearMatMul, ...) is not supported: quantize to the QDQ format "
        "(onnxruntime.quantization.quantize_static(..., quant_format=QuantFormat.QDQ)) or dynamically "
        "(quantize_dynamic), which lenet runs, or load the float model",
    )


CONVERTERS = {
    "DynamicQuantizeLinear": dynamic_quantize,
    "QuantizeLinear": quantize,
    "DequantizeLinear": dequantize,
    "ConvInteger": integer_layer,
    "MatMulInteger": integer_layer,
    **{op: qoperator for op in ("QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearMul", "QGemm")},
}
