"""ONNX model files -> a ``ModelSpec``: the same layer records the Keras loaders make.

``graph`` reads the file with the ``onnx`` package (the ``onnx`` extra: ``pip install
"lenet[onnx]"``), infers every shape with ONNX's own shape inference and lists the
nodes the first output needs; ``ops`` turns each operator into records (one
converter per operator, ``ops.CONVERTERS``) and folds what depends on constants
only. The first graph output is the model's (a second one, such as features beside
the class scores, is left out). Opsets 7 to the onnx package's newest are read.

Raises ``ModelFileError`` for a missing, unreadable, corrupt or inconsistent file and
``UnsupportedModelError`` naming the operator, the node and the file for what the
engine does not run; nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Union

import numpy as np

from ..errors import Error, ModelFileError
from ..spec import ModelSpec
from . import graph, ops

PathLike = Union[str, "os.PathLike[str]"]


def looks_like_onnx(head: bytes, path: PathLike = "") -> bool:
    """Whether a file starting with ``head`` is an ONNX model: a protobuf ModelProto
    opens with its ir_version (field 1, varint: byte 0x08), which neither HDF5 nor a
    zip does; the .onnx extension is taken too (a corrupt file then gets ONNX's error)."""
    if head[:8] == b"\x89HDF\r\n\x1a\n" or head[:4] == b"PK\x03\x04":
        return False
    return head[:1] == b"\x08" or str(path).lower().endswith(".onnx")


def read_model(path: PathLike) -> ModelSpec:
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
    return ModelSpec(
        layers=records,
        input_shape=input_shape,
        input_scale=None,
        name=Path(where).stem,
        source=where,
        extra={"format": "onnx", "opset": g.opset, "producer": g.producer, "output": g.output, "outputs": g.outputs},
    )


__all__ = ["looks_like_onnx", "read_model"]
