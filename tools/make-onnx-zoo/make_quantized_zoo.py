"""Writes the quantized files of tests/data/onnx/ (issue 43): tests/data/onnx/normalized_mnist.onnx
(pytorch/examples' MNIST net, trained on Normalize((0.1307,), (0.3081,)) pixels) quantized
by ONNX Runtime's own quantizer, as users quantize their models.

    python tools/make-onnx-zoo/make_quantized_zoo.py [OUT_DIR]

* ort_dynamic_quantized: quantize_dynamic (int8 weights, one scale per tensor) of the net
  exported for one image at a time (a fixed batch of 1): DynamicQuantizeLinear,
  ConvInteger, MatMulInteger, Cast, Mul.
* ort_dynamic_quantized_per_channel: the same with a scale per output channel (per_channel).
* ort_qdq_static: quantize_static in the QDQ format (uint8 activations, int8 weights per
  channel), calibrated on the first 200 MNIST training digits (never on the test set):
  QuantizeLinear / DequantizeLinear around the float operators.

Needs onnx, onnxruntime and the MNIST files (../shared/mnist, or LENET_MNIST_DIR).
"""

from __future__ import annotations

import gzip
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "onnx"
SOURCE = ROOT / "tests" / "data" / "onnx" / "normalized_mnist.onnx"
MNIST = Path(os.environ.get("LENET_MNIST_DIR", ROOT.parent / "shared" / "mnist"))
MEAN, STD = 0.1307, 0.3081


def batch_of_one(src: Path, dst: Path) -> None:
    m = onnx.load(str(src))
    for v in (m.graph.input[0], m.graph.output[0]):
        v.type.tensor_type.shape.dim[0].dim_value = 1
    onnx.save(m, str(dst))


class Digits(CalibrationDataReader):
    """The first 200 MNIST training digits, normalized as the net's author did."""

    def __init__(self):
        with gzip.open(MNIST / "train-images-idx3-ubyte.gz") as f:
            x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:200]
        x = (x.astype(np.float32) / np.float32(255) - np.float32(MEAN)) / np.float32(STD)
        self.rows = iter([{"input": x[i : i + 1]} for i in range(len(x))])

    def get_next(self):
        return next(self.rows, None)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        one = Path(tmp) / "one.onnx"
        batch_of_one(SOURCE, one)
        quantize_dynamic(str(one), str(OUT / "ort_dynamic_quantized.onnx"), weight_type=QuantType.QInt8)
        quantize_dynamic(
            str(one), str(OUT / "ort_dynamic_quantized_per_channel.onnx"), weight_type=QuantType.QInt8, per_channel=True
        )
        quantize_static(
            str(SOURCE),
            str(OUT / "ort_qdq_static.onnx"),
            Digits(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
