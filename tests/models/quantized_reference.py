"""What a quantized ONNX graph computes, independent of the CPU (issue 61).

ONNX Runtime's integer kernels on x86-64 CPUs without VNNI (AVX2; most laptops, AMD before
Zen 4) multiply uint8 by int8 with VPMADDUBSW, which sums each pair of products into 16 bits
and saturates: the answer then depends on the CPU (its quantization guide says so, and
offers ``reduce_range``). The yardstick here is the graph's own arithmetic instead, evaluated
one sample at a time (a DynamicQuantizeLinear takes its scale from what it is given: the
author's one image):

* integer operators (ConvInteger, MatMulInteger) in exact integers (int64);
* elementwise float32 operators (Cast, Mul, Add, Relu, DequantizeLinear) as float32, which
  IEEE 754 defines to the bit whatever the CPU;
* QuantizeLinear and DynamicQuantizeLinear as the operators define them: x / scale in
  float32, rounded half to even, the zero point added, saturated;
* float Conv, Gemm and MatMul as the float32 nearest to the exact sum (summed in float64: the
  order of float32 additions is an implementation's choice, so no float32 order is "the"
  answer);
* LogSoftmax and Softmax in float64.

The one place an implementation may rightly differ: a float sum (Conv, Gemm, MatMul) feeding a
quantization lands so close to a rounding boundary (half a step) that the order of its float32
additions decides the integer. ``Run.near_ties`` lists those roundings (within ``NEAR_TIE``
steps of a boundary); ``evaluate(..., flip=tie)`` gives the graph's answer with that one
integer rounded the other way, which onnx_reference.graph_outputs admits in its place — and
nothing else.

``saturate_matmul_integer=True`` gives ONNX Runtime's answer on such a CPU: MatMulInteger's
products of uint8 by int8 summed in pairs of consecutive reduction indices (k, k + 1), each
pair saturated to int16 as VPMADDUBSW does, the pairs then summed in int32 and the zero points
applied exactly. It reproduced ONNX Runtime 1.32's integers bit for bit on an AVX2 AMD EPYC
without VNNI (2026-11-28), whose ConvInteger was exact (it takes another kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import onnx
from onnx import numpy_helper

F32 = np.float32
NEAR_TIE = 1e-3  # steps from a rounding boundary: far wider than float32's error in these sums


@dataclass
class Run:
    """One sample through the graph."""

    outputs: list[np.ndarray]
    near_ties: list[tuple[int, int]] = field(default_factory=list)  # (rounding, flat index)
    saturated: int = 0  # pairs of products clipped (saturate_matmul_integer only)


@dataclass
class _Tensor:
    value: np.ndarray
    from_float_sum: bool = False  # a float Conv / Gemm / MatMul's, through shape-only operators


@dataclass
class _State:
    saturate: bool
    flip: tuple[int, int] | None
    run: Run = field(default_factory=lambda: Run([]))
    roundings: int = 0


def _attrs(node) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _round(st: _State, t: np.ndarray, from_float_sum: bool) -> np.ndarray:
    """t (float32) rounded half to even; the near ties noted, the flipped one rounded the other way."""
    t64 = np.asarray(t, np.float64)
    r = np.rint(t64)
    k = st.roundings
    st.roundings += 1
    if from_float_sum:
        near = np.flatnonzero(np.abs(np.abs(t64 - np.floor(t64)) - 0.5) < NEAR_TIE)
        st.run.near_ties += [(k, int(i)) for i in near]
    if st.flip is not None and st.flip[0] == k:
        i = st.flip[1]
        r.flat[i] = r.flat[i] + (1 if t64.flat[i] >= r.flat[i] else -1)
    return r


def _quantize(st: _State, x: _Tensor, scale, zero, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    t = (x.value.astype(F32) / scale.astype(F32)).astype(F32)
    return np.clip(_round(st, t, x.from_float_sum) + zero.astype(np.int64), info.min, info.max).astype(dtype)


def _per_axis(p: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if p.ndim == 0 or p.size == 1:
        return p.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = p.size
    return p.reshape(shape)


def _int_products(st: _State, raw_a: np.ndarray, raw_b: np.ndarray, za, zb, saturate: bool = False) -> np.ndarray:
    """sum_k (a[.., k] - za) (b[k, n] - zb) for raw integers a (..., K) and b (K, N); za a
    scalar, zb a scalar or (N,). saturate: the pairs of raw products clipped to int16."""
    a64, b64 = raw_a.astype(np.int64), raw_b.astype(np.int64)
    za, zb = np.int64(za), np.asarray(zb, np.int64)
    if not (saturate and raw_a.dtype == np.uint8 and raw_b.dtype == np.int8):
        return (a64 - za) @ (b64 - zb)
    k = a64.shape[-1]
    if k % 2:
        a64 = np.concatenate([a64, np.zeros(a64.shape[:-1] + (1,), np.int64)], axis=-1)
        b64 = np.concatenate([b64, np.zeros((1,) + b64.shape[1:], np.int64)], axis=0)
    pairs = a64[..., 0::2, None] * b64[0::2] + a64[..., 1::2, None] * b64[1::2]  # (..., K/2, N)
    clipped = np.clip(pairs, -32768, 32767)
    st.run.saturated += int((clipped != pairs).sum())
    # The zero points' terms, exact: -zb sum(a) - za sum(b) + K za zb.
    return clipped.sum(axis=-2) - zb * a64.sum(-1, keepdims=True) - za * b64.sum(0) + k * za * zb


def _im2col(x: np.ndarray, kh: int, kw: int, strides, pads, dilations, fill=0) -> tuple[np.ndarray, int, int]:
    """(C, H, W) -> (OH * OW, C * kh * kw), the reduction ordered (c, ky, kx) as ONNX's weights;
    the padding holds `fill`."""
    c, h, w = x.shape
    x = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=fill)
    oh = (x.shape[1] - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (x.shape[2] - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    cols = np.empty((oh, ow, c, kh, kw), x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dilations[0], kx * dilations[1]
            rows = slice(y0, y0 + strides[0] * (oh - 1) + 1, strides[0])
            columns = slice(x0, x0 + strides[1] * (ow - 1) + 1, strides[1])
            cols[:, :, :, ky, kx] = x[:, rows, columns].transpose(1, 2, 0)
    return cols.reshape(oh * ow, c * kh * kw), oh, ow


def _conv_args(node, w_shape):
    a = _attrs(node)
    if a.get("group", 1) != 1 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError(f"{node.op_type} '{node.name}': groups and auto_pad are not in this reference")
    kh, kw = a.get("kernel_shape", w_shape[2:])
    return kh, kw, a.get("strides", [1, 1]), a.get("pads", [0, 0, 0, 0]), a.get("dilations", [1, 1])


def _conv_integer(st, node, x, w, zx=None, zw=None):
    kh, kw, strides, pads, dil = _conv_args(node, w.shape)
    zx = 0 if zx is None else int(zx.reshape(()))
    zw = np.zeros(w.shape[0], np.int64) if zw is None else np.broadcast_to(zw.astype(np.int64), (w.shape[0],))
    out = []
    for sample in x:  # the padding holds the zero point: it stands for 0
        cols, oh, ow = _im2col(sample, kh, kw, strides, pads, dil, fill=zx)
        y = _int_products(st, cols, w.reshape(w.shape[0], -1).T, zx, zw)
        out.append(y.T.reshape(w.shape[0], oh, ow))
    return np.stack(out).astype(np.int32)


def _conv_float(node, x, w, bias=None):
    kh, kw, strides, pads, dil = _conv_args(node, w.shape)
    out = []
    for sample in x.astype(np.float64):
        cols, oh, ow = _im2col(sample, kh, kw, strides, pads, dil)
        y = cols @ w.reshape(w.shape[0], -1).T.astype(np.float64)
        if bias is not None:
            y = y + bias.astype(np.float64)
        out.append(y.T.reshape(w.shape[0], oh, ow))
    return np.stack(out).astype(F32)


def _max_pool(node, x):
    a = _attrs(node)
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    if any(a.get("pads", [0, 0, 0, 0])) or a.get("ceil_mode", 0) or a.get("dilations", [1, 1]) != [1, 1]:
        raise NotImplementedError(f"MaxPool '{node.name}': padding, ceil_mode and dilations are not in this reference")
    n, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    y = np.full((n, c, oh, ow), -np.inf, x.dtype)
    for ky in range(kh):
        for kx in range(kw):
            y = np.maximum(y, x[:, :, ky : ky + sh * (oh - 1) + 1 : sh, kx : kx + sw * (ow - 1) + 1 : sw])
    return y


def _dynamic_quantize(st: _State, x: _Tensor) -> list[_Tensor]:
    """DynamicQuantizeLinear: uint8, the range widened to hold 0, a scale of 1 for all zeros."""
    v = x.value.astype(F32)
    lo, hi = min(F32(0), v.min()), max(F32(0), v.max())
    scale = F32(1) if hi == lo else F32((hi - lo) / F32(255))
    zero_t = np.clip(F32(0) - F32(lo / scale), F32(0), F32(255))
    zero = np.uint8(_round(st, np.asarray(zero_t), x.from_float_sum))
    q = _quantize(st, x, np.asarray(scale), np.asarray(zero), np.uint8)
    return [_Tensor(q), _Tensor(np.asarray(scale, F32)), _Tensor(np.asarray(zero))]


def _gemm(node, v):
    a = _attrs(node)
    x, w = v[0].astype(np.float64), v[1].astype(np.float64)
    if node.op_type == "MatMul":
        return x @ w
    x = x.T if a.get("transA", 0) else x
    w = w.T if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    if len(v) > 2 and v[2] is not None:
        y = y + a.get("beta", 1.0) * v[2].astype(np.float64)
    return y


def _node(st: _State, node, env: dict[str, _Tensor]) -> list[_Tensor]:
    ins = [env[i] if i else None for i in node.input]
    v = [t.value if t is not None else None for t in ins]
    op, a = node.op_type, _attrs(node)
    floated = any(t is not None and t.from_float_sum for t in ins)
    if op == "Reshape":
        shape = [d if d != 0 else v[0].shape[i] for i, d in enumerate(v[1].tolist())]
        return [_Tensor(v[0].reshape(shape), floated)]
    if op == "Flatten":
        axis = a.get("axis", 1) % max(v[0].ndim, 1)
        return [_Tensor(v[0].reshape(int(np.prod(v[0].shape[:axis])), -1), floated)]
    if op == "Relu":
        return [_Tensor(np.maximum(v[0], v[0].dtype.type(0)), floated)]
    if op == "MaxPool":
        return [_Tensor(_max_pool(node, v[0]), floated)]
    if op == "Cast":
        return [_Tensor(v[0].astype(onnx.helper.tensor_dtype_to_np_dtype(a["to"])))]
    if op in ("Mul", "Add"):
        r = (np.multiply if op == "Mul" else np.add)(v[0], v[1])
        return [_Tensor(r.astype(F32) if r.dtype.kind == "f" else r, floated)]
    if op == "DynamicQuantizeLinear":
        return _dynamic_quantize(st, ins[0])
    if op == "QuantizeLinear":
        zero = v[2] if len(v) > 2 and v[2] is not None else np.uint8(0)
        axis = a.get("axis", 1)
        s, z = _per_axis(v[1], v[0].ndim, axis), _per_axis(np.asarray(zero), v[0].ndim, axis)
        return [_Tensor(_quantize(st, ins[0], s, z, np.asarray(zero).dtype))]
    if op == "DequantizeLinear":
        zero = v[2] if len(v) > 2 and v[2] is not None else np.zeros((), v[0].dtype)
        axis = a.get("axis", 1)
        s = _per_axis(v[1], v[0].ndim, axis).astype(F32)
        z = _per_axis(np.asarray(zero), v[0].ndim, axis).astype(np.int64)
        return [_Tensor(((v[0].astype(np.int64) - z).astype(F32) * s).astype(F32))]
    if op == "ConvInteger":
        return [_Tensor(_conv_integer(st, node, *v))]
    if op == "MatMulInteger":
        za = 0 if len(v) < 3 or v[2] is None else int(v[2].reshape(()))
        zb = 0 if len(v) < 4 or v[3] is None else v[3].astype(np.int64)
        return [_Tensor(_int_products(st, v[0], v[1], za, zb, st.saturate).astype(np.int32))]
    if op == "Conv":
        return [_Tensor(_conv_float(node, *v), True)]
    if op in ("Gemm", "MatMul"):
        return [_Tensor(_gemm(node, v).astype(F32), True)]
    if op in ("LogSoftmax", "Softmax"):
        x = v[0].astype(np.float64)
        axis = a.get("axis", -1)
        m = x.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
        return [_Tensor(x - lse if op == "LogSoftmax" else np.exp(x - lse))]
    raise NotImplementedError(f"{op} '{node.name}' is not in this reference")


@lru_cache(maxsize=8)
def _load(path: str):
    m = onnx.load(path)
    return m, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


_runs: dict = {}  # (path, saturate, the sample's bytes) -> Run: the tests ask for the same digits often


def evaluate(path, sample: np.ndarray, saturate_matmul_integer: bool = False, flip=None) -> Run:
    """The graph of `path` on one sample (without its batch axis); flip: a (rounding, flat
    index) of an earlier Run's near_ties, rounded the other way."""
    sample = np.ascontiguousarray(sample, F32)
    key = (str(path), saturate_matmul_integer, sample.shape, sample.tobytes())
    if flip is None and key in _runs:
        return _runs[key]
    run = _evaluate(path, sample, saturate_matmul_integer, flip)
    if flip is None:
        _runs[key] = run
    return run


def _evaluate(path, sample, saturate_matmul_integer, flip) -> Run:
    m, consts = _load(str(path))
    st = _State(saturate_matmul_integer, flip)
    env = {k: _Tensor(val) for k, val in consts.items()}
    env[m.graph.input[0].name] = _Tensor(sample[None])
    for node in m.graph.node:
        for out, t in zip(node.output, _node(st, node, env)):
            env[out] = t
    st.run.outputs = [env[o.name].value for o in m.graph.output]
    return st.run


def run(path, x: np.ndarray, saturate_matmul_integer: bool = False) -> list[Run]:
    """The graph on each sample of x, one at a time, as the graph's author called it."""
    return [evaluate(path, s, saturate_matmul_integer) for s in x]
