"""ONNX Runtime as the reference for the ONNX zoo: the graph's own arithmetic.

For a graph in the QDQ format (QuantizeLinear / DequantizeLinear pairs) ONNX Runtime's
default session fuses the pairs into integer kernels (QLinearConv, QGemm) whose
requantization rounds otherwise than the graph says (on tests/data/onnx/ort_qdq_static.onnx,
up to 1.1e-2 on 2 of 500 MNIST test digits against ONNX Runtime's own unfused run): the
reference for those is the graph as written, graph optimizations off. Other graphs run in
the default session, as users run them.
"""

from __future__ import annotations

import onnx
import onnxruntime as ort


def session(path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if any(n.op_type == "QuantizeLinear" for n in onnx.load(str(path)).graph.node):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
