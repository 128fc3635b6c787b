"""What the converters share: a value of the network (``Val``) and the builder that
holds the records made so far, the values by name and the constants (``Builder``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .._native import _core
from ..errors import ModelFileError, UnsupportedModelError
from .graph import BATCH, Graph, Node


@dataclass(frozen=True)
class Val:
    record: int  # the record producing it; -1: the model input
    shape: tuple  # per-sample shape (ONNX order: C, H, W for an image)
    batched: bool  # whether the ONNX tensor has the batch axis in front


@dataclass(frozen=True)
class Ints:
    """A tensor of a quantized graph that is not a value of the network (quantized.py):
    the integers of a quantization ("values"; ``val`` is its record, which gives (q -
    zero) * scale, or q - zero for a dynamic one), a dynamic quantization's "scale"
    (times the constant ``factor``) or "zero_point", or the integer "sums" of ConvInteger
    / MatMulInteger (``val`` gives them, exact). ``source`` names the quantization it
    belongs to."""

    kind: str
    source: str
    val: Optional[Val] = None
    input: Optional[Val] = None  # values of a dynamic quantization: the value it quantized
    scale: float = 0.0  # values: the quantization's scale; 0 for a dynamic one
    zero: int = 0  # values: its zero point (a static one's)
    factor: Any = 1.0


class Builder:
    def __init__(self, g: Graph):
        self.g = g
        self.records: list = []
        self.vals: dict[str, Val] = {}
        self.consts: dict[str, np.ndarray] = dict(g.consts)
        self.ints: dict[str, Ints] = {}  # a quantized graph's integers, scales and zero points
        # A graph of one sample (its input has no batch axis): a batch axis its values get
        # (a leading 1 a Reshape or Unsqueeze adds) is a concrete 1, not graph.BATCH.
        self.no_batch = False

    @property
    def batch(self) -> int:
        """The batch axis in folded shapes: graph.BATCH, or 1 in a graph of one sample."""
        return 1 if self.no_batch else BATCH

    # ------------------------------------------------------------------ values

    def is_const(self, name: str) -> bool:
        return name in self.consts

    def const(self, n: Node, i: int, what: str = "") -> np.ndarray:
        if i >= len(n.inputs) or not n.inputs[i]:
            raise ModelFileError(f"{self.g.where_node(n)}: input {i} ({what or 'a constant'}) is missing")
        name = n.inputs[i]
        if name not in self.consts:
            raise UnsupportedModelError(
                f"{self.g.where_node(n)}: input '{name}' ({what or 'operand'}) must be a "
                "constant (an initializer or folded from constants)"
            )
        return self.consts[name]

    def opt_const(self, n: Node, i: int) -> Optional[np.ndarray]:
        return self.const(n, i) if i < len(n.inputs) and n.inputs[i] else None

    def val(self, n: Node, i: int = 0) -> Val:
        name = n.inputs[i] if i < len(n.inputs) else ""
        if name in self.ints:
            raise UnsupportedModelError(
                f"{self.g.where_node(n)}: input '{name}' is the {self.ints[name].kind.replace('_', ' ')} of a "
                f"quantization, which {n.op} cannot read (DequantizeLinear, ConvInteger and MatMulInteger can)"
            )
        if name not in self.vals:
            raise ModelFileError(f"{self.g.where_node(n)}: input '{name}' is not produced by any node")
        return self.vals[name]

    def out_shape(self, n: Node, v: Val, k: int = 0) -> Optional[tuple]:
        """The per-sample shape of output k as ONNX infers it, None when unknown."""
        dims = self.g.shapes.get(n.outputs[k])
        if dims is None:
            return None
        dims = dims[1:] if v.batched else dims
        return tuple(dims) if all(d is not None for d in dims) else None

    def need_shape(self, n: Node, v: Val, k: int = 0) -> tuple:
        s = self.out_shape(n, v, k)
        if s is None:
            raise UnsupportedModelError(
                f"{self.g.where_node(n)}: the shape of '{n.outputs[k]}' is not known "
                "(ONNX shape inference could not give it)"
            )
        return s

    def emit(
        self,
        n: Node,
        kind: str,
        inputs: list[Val],
        shape: tuple,
        batched: bool = True,
        weights: Optional[dict] = None,
        **fields: Any,
    ) -> Val:
        rec = _core.LayerSpec()
        rec.kind = kind
        rec.name = n.name
        rec.keras_class = n.op
        rec.inputs = [v.record for v in inputs]
        for k, v in fields.items():
            setattr(rec, k, v)
        for k, w in (weights or {}).items():
            rec.set_weight(k, np.ascontiguousarray(w, dtype=np.float32))
        self.records.append(rec)
        return Val(len(self.records) - 1, tuple(shape), batched)

    def fail(self, n: Node, what: str) -> None:
        raise UnsupportedModelError(f"{self.g.where_node(n)}: {what}")


def image(b: Builder, n: Node, v: Val) -> None:
    if len(v.shape) != 3 or not v.batched:
        b.fail(
            n,
            f"needs a batch of images (N, C, H, W), got {'(N, ' if v.batched else '('}{', '.join(map(str, v.shape))})",
        )


def zero_pad(b: Builder, n: Node, v: Val, pads: tuple) -> Val:
    if not any(pads):
        return v
    shape = (v.shape[0], v.shape[1] + pads[0] + pads[1], v.shape[2] + pads[2] + pads[3])
    return b.emit(n, "zero_pad2d", [v], shape, pad=pads, data_format="channels_first")
