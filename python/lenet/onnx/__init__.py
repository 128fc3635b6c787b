"""ONNX model files -> a ``ModelSpec``: the same layer records the Keras loaders make.

``graph`` reads the file with the ``onnx`` package (the ``onnx`` extra: ``pip install
"lenet[onnx]"``), infers every shape with ONNX's own shape inference and lists the
nodes the first output needs (and its metadata: how its pixels are prepared, when it
records ``lenet_input_scale``, ``lenet_mean`` and ``lenet_std``); ``ops`` turns each operator into records (one
converter per operator, ``ops.CONVERTERS``) and folds what depends on constants
only. The first graph output is the model's (a second one, such as features beside
the class scores, is left out). Opsets 7 to the onnx package's newest are read.

Raises ``ModelFileError`` for a missing, unreadable, corrupt or inconsistent file and
``UnsupportedModelError`` naming the operator, the node and the file for what the
engine does not run; nothing else.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from ..errors import Error, ModelFileError
from ..spec import ModelSpec

if TYPE_CHECKING:
    from . import graph

PathLike = Union[str, "os.PathLike[str]"]


def looks_like_onnx(head: bytes, path: PathLike = "") -> bool:
    """Whether a file starting with ``head`` is an ONNX model: a protobuf ModelProto
    opens with its ir_version (field 1, varint: byte 0x08), which neither HDF5 nor a
    zip does; the .onnx extension is taken too (a corrupt file then gets ONNX's error)."""
    if head[:8] == b"\x89HDF\r\n\x1a\n" or head[:4] == b"PK\x03\x04":
        return False
    return head[:1] == b"\x08" or str(path).lower().endswith(".onnx")


def read_model(path: PathLike) -> ModelSpec:
    from . import graph, ops  # the onnx package and the converters, for ONNX files only

    p = Path(path)
    where = str(p)
    try:
        g = graph.read(p, where)
        with np.errstate(all="ignore"):  # hostile constants may overflow; the core refuses non-finite weights
            records, input_shape = ops.convert(g)
    except Error:
        raise
    except RecursionError as e:
        raise ModelFileError(f"{where}: the model nests too deeply") from e
    except Exception as e:  # onnx, numpy: wrapped, never leaked raw
        raise ModelFileError(f"{where}: cannot read the ONNX model ({type(e).__name__}: {e})") from e
    scale, mean, std = (_recorded(g, k, where) for k in ("lenet_input_scale", "lenet_mean", "lenet_std"))
    if scale is not None and len(scale) != 1:
        raise ModelFileError(f"{where}: metadata lenet_input_scale must be one number, got {scale}")
    if std is not None and min(std) <= 0:
        raise ModelFileError(f"{where}: metadata lenet_std must be above 0, got {std}")
    preprocessing = {k: v for k, v in (("mean", mean), ("std", std)) if v is not None}
    return ModelSpec(
        layers=records,
        input_shape=input_shape,
        input_scale=None if scale is None else scale[0],
        name=Path(where).stem,
        source=where,
        extra={
            "format": "onnx",
            "opset": g.opset,
            "producer": g.producer,
            "output": g.output,
            "outputs": g.outputs,
            "batch_axis": ops.input_axes(g)[0],
            "input_layout": ops.input_layout(g),
            **preprocessing,
        },
    )


def _recorded(g: "graph.Graph", key: str, where: str) -> Optional[tuple]:
    """A preprocessing value the file records in its metadata: numbers separated by commas."""
    if key not in g.metadata:
        return None
    try:
        values = tuple(float(x) for x in g.metadata[key].split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) for v in values) or len(values) > 4:
        raise ModelFileError(f"{where}: metadata {key} must be 1 to 4 finite numbers, got {g.metadata[key]!r}")
    return values


__all__ = ["looks_like_onnx", "read_model"]
