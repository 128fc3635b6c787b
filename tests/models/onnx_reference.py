"""The reference answers for ONNX graphs.

A float graph: ONNX Runtime's, as users run it. For a graph in the QDQ format (QuantizeLinear /
DequantizeLinear pairs) ONNX Runtime's default session fuses the pairs into integer kernels
(QLinearConv, QGemm) whose requantization rounds otherwise than the graph says (on
tests/data/onnx/ort_qdq_static.onnx, up to 1.1e-2 on 2 of 500 MNIST test digits against
ONNX Runtime's own unfused run): its session runs the graph as written, optimizations off.

A quantized graph (integer operators, quantizations): the graph's own arithmetic, evaluated
one sample at a time by quantized_reference.py, never ONNX Runtime's: its integer kernels
saturate on x86 CPUs without VNNI (issue 61), so its answer depends on the CPU.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx
import onnxruntime as ort
import quantized_reference

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"}


@lru_cache(maxsize=64)
def _ops(path: str) -> frozenset[str]:
    return frozenset(n.op_type for n in onnx.load(path).graph.node)


def is_quantized(path) -> bool:
    return bool(_ops(str(path)) & QUANTIZED_OPS)


def session(path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if "QuantizeLinear" in _ops(str(path)):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def graph_outputs(path, x: np.ndarray, like: np.ndarray | None = None, tol: float = 1e-5) -> np.ndarray:
    """A quantized graph's first output on each sample of x (with its batch axis), stacked.

    With `like` (an engine's answer to x): where a sample's answer is more than `tol` from
    `like`'s row and one of its float sums lands within float32's reach of a rounding boundary,
    the answer with that one integer rounded the other way (quantized_reference's flip), if
    that one is within `tol`. Nothing else is admitted."""
    rows = []
    for i, sample in enumerate(x):
        run = quantized_reference.evaluate(path, sample)
        want = np.asarray(run.outputs[0][0], np.float64)
        if like is not None:
            got = np.asarray(like[i], np.float64).reshape(want.shape)
            for tie in run.near_ties if np.abs(want - got).max() > tol else ():
                other = np.asarray(quantized_reference.evaluate(path, sample, flip=tie).outputs[0][0], np.float64)
                if np.abs(other - got).max() <= tol:
                    want = other
                    break
        rows.append(want)
    return np.stack(rows)
