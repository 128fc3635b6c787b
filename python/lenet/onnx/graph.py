"""Reading an ONNX file into a graph the converters walk: the ``onnx`` package parses
it (no protobuf reader of our own), ONNX's own shape inference gives every value's
shape, and what depends only on constants is folded here (the Shape -> Gather ->
Unsqueeze -> Concat -> Reshape chains exporters write for a flatten, Constant,
Cast, ...), with the batch axis kept as a marker so that it survives the folding.

Bounds (the same as the Keras loaders'): the file's size, the nodes, every
initializer's element count (checked from its dims before a byte is converted),
the parameters in all; external data is refused (the loader reads one file).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._native import _core
from ..errors import ModelFileError, UnsupportedModelError

LIMITS = _core.limits()
MAX_FILE_BYTES = 4 * int(LIMITS["params"]) + (64 << 20)  # the parameters as float32, plus the graph
MAX_NODES = 16 * int(LIMITS["layers"])  # exporters write several nodes per layer
MIN_OPSET = 7
# The batch axis in a folded shape (Shape of a value whose first axis is the batch).
BATCH = -(1 << 40)


def _onnx():
    try:
        import onnx
        from onnx import numpy_helper, shape_inference
    except ImportError as e:
        raise UnsupportedModelError('reading ONNX files needs the onnx package: pip install "lenet[onnx]"') from e
    return onnx, numpy_helper, shape_inference


def max_opset() -> int:
    return int(_onnx()[0].defs.onnx_opset_version())


@dataclass
class Node:
    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict


@dataclass
class Graph:
    where: str
    opset: int
    input: str
    input_shape: list  # ints; a symbolic or unknown dimension is None
    output: str
    outputs: list[str]  # every graph output (the first is the model's)
    nodes: list[Node]  # topological order, only those the output needs
    consts: dict[str, np.ndarray] = field(default_factory=dict)
    shapes: dict[str, list] = field(default_factory=dict)  # value -> dims (None: unknown)
    producer: str = ""
    metadata: dict = field(default_factory=dict)  # the model's metadata_props (bounded strings)

    def where_node(self, n: Node) -> str:
        return f"{self.where}: node '{n.name}' ({n.op})"


def read(path: Path, where: str) -> Graph:
    onnx, numpy_helper, shape_inference = _onnx()
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ModelFileError(f"{where}: {size} bytes, more than an ONNX model within the limits ({MAX_FILE_BYTES})")
    try:
        model = onnx.load_model_from_string(path.read_bytes())
    except Exception as e:
        raise ModelFileError(f"{where}: not a readable ONNX model ({type(e).__name__}: {e})") from e
    g = model.graph
    opset = _opset(model, where)
    if len(g.node) > MAX_NODES:
        raise ModelFileError(f"{where}: {len(g.node)} nodes (at most {MAX_NODES})")
    consts = _initializers(g, numpy_helper, onnx, where)
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True).graph
    except Exception:  # inference is a help, not a requirement: shapes then come from the folding
        inferred = g
    shapes = {}
    for vi in list(inferred.value_info) + list(inferred.input) + list(inferred.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            shapes[vi.name] = [
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim
            ]
    inputs = [i for i in g.input if i.name not in consts]
    if len(inputs) != 1:
        raise UnsupportedModelError(
            f"{where}: {len(inputs)} graph inputs ({', '.join(i.name for i in inputs)}); one image input is supported"
        )
    if not g.output:
        raise ModelFileError(f"{where}: the graph has no output")
    elem = inputs[0].type.tensor_type.elem_type
    if elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.UNDEFINED):
        raise UnsupportedModelError(
            f"{where}: input '{inputs[0].name}' is {onnx.TensorProto.DataType.Name(elem)}; a float32 input is supported"
        )
    nodes = []
    for i, n in enumerate(g.node):
        if n.domain not in ("", "ai.onnx"):
            raise UnsupportedModelError(
                f"{where}: node '{n.name or i}' ({n.op_type}) of domain '{n.domain}' is not supported "
                "(the standard ONNX operators are; a file ONNX Runtime saved after optimizing the graph holds "
                "its own com.microsoft operators: export or save the model without that optimization)"
            )
        attrs = {}
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH or a.type == onnx.AttributeProto.GRAPHS:
                raise UnsupportedModelError(
                    f"{where}: node '{n.name or i}' ({n.op_type}): subgraphs (control flow) are not supported"
                )
            v = onnx.helper.get_attribute_value(a)
            if a.type == onnx.AttributeProto.TENSOR:
                v = _tensor(v, numpy_helper, onnx, f"{where}: node '{n.name or i}'")
            elif isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            attrs[a.name] = v
        nodes.append(Node(n.op_type, n.name or f"#{i} {n.op_type}", list(n.input), list(n.output), attrs))
    graph = Graph(
        where,
        opset,
        inputs[0].name,
        shapes.get(inputs[0].name, []),
        g.output[0].name,
        [o.name for o in g.output],
        _needed(nodes, g.output[0].name, where),
        consts,
        shapes,
        f"{model.producer_name} {model.producer_version}".strip(),
        {p.key[:256]: p.value[:4096] for p in list(model.metadata_props)[:256]},
    )
    return graph


def _opset(model: Any, where: str) -> int:
    opset = None
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            opset = int(o.version)
    top = max_opset()
    if opset is None:
        raise ModelFileError(f"{where}: no opset of the standard ONNX domain is imported")
    if not MIN_OPSET <= opset <= top:
        raise UnsupportedModelError(f"{where}: opset {opset} is not supported (opsets {MIN_OPSET} to {top} are)")
    return opset


def _tensor(t: Any, numpy_helper: Any, onnx: Any, where: str) -> np.ndarray:
    """An initializer or constant, bounds checked from its dims before it is converted."""
    if t.data_location == onnx.TensorProto.EXTERNAL or t.external_data:
        raise UnsupportedModelError(
            f"{where}: tensor '{t.name}' keeps its data in another file (external data); "
            "a self-contained .onnx file is supported"
        )
    dims = list(t.dims)
    if any(d < 0 for d in dims) or len(dims) > 8:
        raise ModelFileError(f"{where}: tensor '{t.name}' has dims {dims}")
    count = math.prod(dims)
    if count > int(LIMITS["params"]):
        raise ModelFileError(f"{where}: tensor '{t.name}' holds {count} values (more than {LIMITS['params']})")
    try:
        a = numpy_helper.to_array(t)
    except Exception as e:
        raise ModelFileError(f"{where}: tensor '{t.name}' cannot be read ({type(e).__name__}: {e})") from e
    if a.size != count:
        raise ModelFileError(f"{where}: tensor '{t.name}' holds {a.size} values for dims {dims}")
    return a


def _initializers(g: Any, numpy_helper: Any, onnx: Any, where: str) -> dict[str, np.ndarray]:
    out, total = {}, 0
    for t in g.initializer:
        a = _tensor(t, numpy_helper, onnx, where)
        total += a.size
        if total > int(LIMITS["params"]):
            raise ModelFileError(f"{where}: the initializers hold more than {LIMITS['params']} values")
        out[t.name] = a
    if g.sparse_initializer:
        raise UnsupportedModelError(f"{where}: sparse initializers are not supported")
    return out


def _needed(nodes: list[Node], output: str, where: str) -> list[Node]:
    """The nodes the output depends on, in an order where each follows its inputs' producers."""
    by_output = {}
    for n in nodes:
        for o in n.outputs:
            if o:
                by_output[o] = n
    order, state = [], {}
    stack = [(by_output.get(output), False)]
    while stack:
        n, done = stack.pop()
        if n is None:
            continue
        key = id(n)
        if done:
            state[key] = 2
            order.append(n)
            continue
        if state.get(key) == 2:
            continue
        if state.get(key) == 1:
            raise ModelFileError(f"{where}: the graph has a cycle through node '{n.name}'")
        state[key] = 1
        stack.append((n, True))
        for i in n.inputs:
            p = by_output.get(i)
            if p is not None and state.get(id(p)) != 2:
                if state.get(id(p)) == 1:
                    raise ModelFileError(f"{where}: the graph has a cycle through node '{p.name}'")
                stack.append((p, False))
    return order


def attr(n: Node, name: str, default: Any = None) -> Any:
    return n.attrs.get(name, default)


def ints(v: Any) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]
