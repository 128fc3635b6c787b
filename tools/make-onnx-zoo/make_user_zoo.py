"""Writes the issue-43 files of tests/data/onnx/: the forms users' MNIST classifiers take
that make_onnx_zoo.py's TorchScript exports do not, each a zoo case of its own.

torch has no CPU-only build on PyPI for this project's environment (its wheel needs the
CUDA libraries), so these files are written node by node with onnx.helper, the way the
named exporter writes them: its node and value names, its operators, its opset, its
producer. Weights are seeded, He-scaled, as trained ones are in size.

    python tools/make-onnx-zoo/make_user_zoo.py [OUT_DIR]

* flatten_first_softmax: PyTorch, nn.Flatten first on a (batch, 28, 28) input, ends in a
  softmax (torch.onnx.export with dynamic_axes, opset 17).
* sigmoid_head: PyTorch, conv -> pool -> Linear -> sigmoid (a one-vs-rest head).
* dynamo_no_batch: torch.onnx.export(dynamo=True) of a net run on one image (1, 28, 28):
  view(-1), linear on a vector (MatMul + Add), softmax over dim 0 (opset 18).
* tf2onnx_nhwc: Keras Conv2D net through tf2onnx: NHWC input, Transpose to NCHW, and back
  before the Flatten (Reshape), MatMul + Add, softmax (opset 13).
* tf2onnx_flatten_28x28: Keras Flatten(input_shape=(28, 28)) through tf2onnx: (unk, 28, 28).
* tf2onnx_nhwc_mlp: a Keras MLP on (28, 28, 1) images through tf2onnx: the NHWC input goes
  straight into the Flatten's Reshape (no Transpose), MatMul + Add, softmax (opset 13).
* keras2onnx_nhwc_flatten: the same model through keras2onnx: an ONNX Flatten on the NHWC
  input (opset 11).
* normalized_mnist: the graph of PyTorch's MNIST example for Normalize((0.1307,), (0.3081,))
  pixels, ending in log_softmax; the file does not say so (as in the wild). Its weights are
  seeded, not trained: examples/mnist_normalized.onnx (make_trained_normalized.py) is the
  same graph trained.
* normalized_half_recorded: trained on (x - 0.5) / 0.5, and the file records it in its
  metadata (lenet_mean, lenet_std), which lenet reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "tests" / "data" / "onnx"
RNG = np.random.default_rng(43)


def he(*shape):
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    return (RNG.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def bias(n):
    return (RNG.standard_normal(n) * 0.05).astype(np.float32)


def init(name, a):
    a = np.asarray(a)
    return numpy_helper.from_array(a.astype(np.int64 if a.dtype.kind in "iu" else np.float32), name)


def conv(x, w, b, out, name, k, pads=(0, 0, 0, 0)):
    """A Conv node with every attribute torch.onnx.export writes."""
    return helper.make_node(
        "Conv", [x, w, b], [out], name, dilations=[1, 1], group=1, kernel_shape=[k, k], pads=list(pads), strides=[1, 1]
    )


def max_pool(x, out, name):
    """A 2x2 MaxPool of stride 2, with the attributes torch.onnx.export writes."""
    return helper.make_node(
        "MaxPool", [x], [out], name, ceil_mode=0, kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2]
    )


def gemm(x, w, b, out, name):
    """nn.Linear as torch.onnx.export writes it: Gemm with the weight transposed."""
    return helper.make_node("Gemm", [x, w, b], [out], name, alpha=1.0, beta=1.0, transB=1)


def save(name, nodes, inits, in_name, in_shape, out_name, out_shape, opset, producer, metadata=None):
    graph = helper.make_graph(
        nodes,
        {"pytorch": "main_graph", "keras2onnx": "sequential"}.get(producer[0], "tf2onnx"),
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    model.producer_name, model.producer_version = producer
    for k, v in (metadata or {}).items():
        model.metadata_props.append(onnx.StringStringEntryProto(key=k, value=v))
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(OUT / f"{name}.onnx"))


TORCH = ("pytorch", "2.5.1")


def flatten_first_softmax():
    nodes = [
        helper.make_node("Flatten", ["input"], ["/flatten/Flatten_output_0"], "/flatten/Flatten", axis=1),
        gemm("/flatten/Flatten_output_0", "fc1.weight", "fc1.bias", "/fc1/Gemm_output_0", "/fc1/Gemm"),
        helper.make_node("Relu", ["/fc1/Gemm_output_0"], ["/relu/Relu_output_0"], "/relu/Relu"),
        gemm("/relu/Relu_output_0", "fc2.weight", "fc2.bias", "/fc2/Gemm_output_0", "/fc2/Gemm"),
        helper.make_node("Softmax", ["/fc2/Gemm_output_0"], ["output"], "/Softmax", axis=1),
    ]
    inits = [
        init("fc1.weight", he(64, 784)),
        init("fc1.bias", bias(64)),
        init("fc2.weight", he(10, 64)),
        init("fc2.bias", bias(10)),
    ]
    save(
        "flatten_first_softmax", nodes, inits, "input", ["batch_size", 28, 28], "output", ["batch_size", 10], 17, TORCH
    )


def sigmoid_head():
    nodes = [
        conv("input", "conv.weight", "conv.bias", "/conv/Conv_output_0", "/conv/Conv", 5),
        helper.make_node("Relu", ["/conv/Conv_output_0"], ["/Relu_output_0"], "/Relu"),
        max_pool("/Relu_output_0", "/pool/MaxPool_output_0", "/pool/MaxPool"),
        helper.make_node("Flatten", ["/pool/MaxPool_output_0"], ["/Flatten_output_0"], "/Flatten", axis=1),
        gemm("/Flatten_output_0", "fc.weight", "fc.bias", "/fc/Gemm_output_0", "/fc/Gemm"),
        helper.make_node("Sigmoid", ["/fc/Gemm_output_0"], ["output"], "/Sigmoid"),
    ]
    inits = [
        init("conv.weight", he(6, 1, 5, 5)),
        init("conv.bias", bias(6)),
        init("fc.weight", he(10, 864)),
        init("fc.bias", bias(10)),
    ]
    save("sigmoid_head", nodes, inits, "input", ["batch_size", 1, 28, 28], "output", ["batch_size", 10], 13, TORCH)


def dynamo_no_batch():
    nodes = [
        helper.make_node("Reshape", ["x", "val_0"], ["view"], "node_view", allowzero=1),
        helper.make_node("MatMul", ["view", "val_1"], ["val_2"], "node_MatMul_1"),
        helper.make_node("Add", ["val_2", "fc1.bias"], ["linear"], "node_linear"),
        helper.make_node("Relu", ["linear"], ["relu"], "node_relu"),
        helper.make_node("MatMul", ["relu", "val_3"], ["val_4"], "node_MatMul_3"),
        helper.make_node("Add", ["val_4", "fc2.bias"], ["linear_1"], "node_linear_1"),
        helper.make_node("Softmax", ["linear_1"], ["softmax"], "node_softmax", axis=0),
    ]
    inits = [
        init("val_0", np.array([784], np.int64)),
        init("val_1", he(64, 784).T.copy()),
        init("fc1.bias", bias(64)),
        init("val_3", he(10, 64).T.copy()),
        init("fc2.bias", bias(10)),
    ]
    save("dynamo_no_batch", nodes, inits, "x", [1, 28, 28], "softmax", [10], 18, TORCH)


TF2ONNX = ("tf2onnx", "1.16.1 15c810")
KERAS2ONNX = ("keras2onnx", "1.7.0")


def tf2onnx_nhwc(name="tf2onnx_nhwc", metadata=None, mean_std=None):
    nodes = [
        helper.make_node(
            "Transpose",
            ["conv2d_input"],
            ["sequential/conv2d/Conv2D__6:0"],
            "sequential/conv2d/Conv2D__6",
            perm=[0, 3, 1, 2],
        ),
        helper.make_node(
            "Conv",
            [
                "sequential/conv2d/Conv2D__6:0",
                "sequential/conv2d/Conv2D/ReadVariableOp:0",
                "sequential/conv2d/BiasAdd/ReadVariableOp:0",
            ],
            ["sequential/conv2d/BiasAdd:0"],
            "sequential/conv2d/BiasAdd",
            dilations=[1, 1],
            group=1,
            kernel_shape=[3, 3],
            strides=[1, 1],
            auto_pad="VALID",
        ),
        helper.make_node(
            "Relu", ["sequential/conv2d/BiasAdd:0"], ["sequential/conv2d/Relu:0"], "sequential/conv2d/Relu"
        ),
        helper.make_node(
            "MaxPool",
            ["sequential/conv2d/Relu:0"],
            ["sequential/max_pooling2d/MaxPool:0"],
            "sequential/max_pooling2d/MaxPool",
            kernel_shape=[2, 2],
            strides=[2, 2],
        ),
        helper.make_node(
            "Transpose",
            ["sequential/max_pooling2d/MaxPool:0"],
            ["sequential/max_pooling2d/MaxPool__16:0"],
            "sequential/max_pooling2d/MaxPool__16",
            perm=[0, 2, 3, 1],
        ),
        helper.make_node(
            "Reshape",
            ["sequential/max_pooling2d/MaxPool__16:0", "const_fold_opt__21"],
            ["sequential/flatten/Reshape:0"],
            "sequential/flatten/Reshape",
        ),
        helper.make_node(
            "MatMul",
            ["sequential/flatten/Reshape:0", "sequential/dense/MatMul/ReadVariableOp:0"],
            ["sequential/dense/MatMul:0"],
            "sequential/dense/MatMul",
        ),
        helper.make_node(
            "Add",
            ["sequential/dense/MatMul:0", "sequential/dense/BiasAdd/ReadVariableOp:0"],
            ["sequential/dense/BiasAdd:0"],
            "sequential/dense/BiasAdd",
        ),
        helper.make_node("Softmax", ["sequential/dense/BiasAdd:0"], ["dense"], "sequential/dense/Softmax", axis=-1),
    ]
    inits = [
        init("sequential/conv2d/Conv2D/ReadVariableOp:0", he(8, 1, 3, 3)),
        init("sequential/conv2d/BiasAdd/ReadVariableOp:0", bias(8)),
        init("const_fold_opt__21", np.array([-1, 1352], np.int64)),
        init("sequential/dense/MatMul/ReadVariableOp:0", he(10, 1352).T.copy()),
        init("sequential/dense/BiasAdd/ReadVariableOp:0", bias(10)),
    ]
    save(name, nodes, inits, "conv2d_input", ["unk__27", 28, 28, 1], "dense", ["unk__28", 10], 13, TF2ONNX, metadata)


def tf2onnx_flatten_28x28():
    nodes = [
        helper.make_node(
            "Reshape",
            ["flatten_input", "const_fold_opt__10"],
            ["sequential/flatten/Reshape:0"],
            "sequential/flatten/Reshape",
        ),
        helper.make_node(
            "MatMul",
            ["sequential/flatten/Reshape:0", "sequential/dense/MatMul/ReadVariableOp:0"],
            ["sequential/dense/MatMul:0"],
            "sequential/dense/MatMul",
        ),
        helper.make_node(
            "Add",
            ["sequential/dense/MatMul:0", "sequential/dense/BiasAdd/ReadVariableOp:0"],
            ["sequential/dense/BiasAdd:0"],
            "sequential/dense/BiasAdd",
        ),
        helper.make_node("Relu", ["sequential/dense/BiasAdd:0"], ["sequential/dense/Relu:0"], "sequential/dense/Relu"),
        helper.make_node(
            "MatMul",
            ["sequential/dense/Relu:0", "sequential/dense_1/MatMul/ReadVariableOp:0"],
            ["sequential/dense_1/MatMul:0"],
            "sequential/dense_1/MatMul",
        ),
        helper.make_node(
            "Add",
            ["sequential/dense_1/MatMul:0", "sequential/dense_1/BiasAdd/ReadVariableOp:0"],
            ["dense_1"],
            "sequential/dense_1/BiasAdd",
        ),
    ]
    inits = [
        init("const_fold_opt__10", np.array([-1, 784], np.int64)),
        init("sequential/dense/MatMul/ReadVariableOp:0", he(128, 784).T.copy()),
        init("sequential/dense/BiasAdd/ReadVariableOp:0", bias(128)),
        init("sequential/dense_1/MatMul/ReadVariableOp:0", he(10, 128).T.copy()),
        init("sequential/dense_1/BiasAdd/ReadVariableOp:0", bias(10)),
    ]
    save(
        "tf2onnx_flatten_28x28",
        nodes,
        inits,
        "flatten_input",
        ["unk__12", 28, 28],
        "dense_1",
        ["unk__13", 10],
        13,
        TF2ONNX,
    )


def _keras_mlp_on_nhwc(flatten, out_name):
    """Dense(128, relu) -> Dense(10, softmax) after `flatten` (the node that reads the input)."""
    nodes = [
        flatten,
        helper.make_node("MatMul", ["flat", "dense/kernel"], ["dense/MatMul:0"], "dense/MatMul"),
        helper.make_node("Add", ["dense/MatMul:0", "dense/bias"], ["dense/BiasAdd:0"], "dense/BiasAdd"),
        helper.make_node("Relu", ["dense/BiasAdd:0"], ["dense/Relu:0"], "dense/Relu"),
        helper.make_node("MatMul", ["dense/Relu:0", "dense_1/kernel"], ["dense_1/MatMul:0"], "dense_1/MatMul"),
        helper.make_node("Add", ["dense_1/MatMul:0", "dense_1/bias"], ["dense_1/BiasAdd:0"], "dense_1/BiasAdd"),
        helper.make_node("Softmax", ["dense_1/BiasAdd:0"], [out_name], "dense_1/Softmax", axis=-1),
    ]
    inits = [
        init("dense/kernel", he(128, 784).T.copy()),
        init("dense/bias", bias(128)),
        init("dense_1/kernel", he(10, 128).T.copy()),
        init("dense_1/bias", bias(10)),
    ]
    return nodes, inits


def tf2onnx_nhwc_mlp():
    flatten = helper.make_node(
        "Reshape", ["flatten_input", "const_fold_opt__9"], ["flat"], "sequential/flatten/Reshape"
    )
    nodes, inits = _keras_mlp_on_nhwc(flatten, "dense_1")
    inits.append(init("const_fold_opt__9", np.array([-1, 784], np.int64)))
    save(
        "tf2onnx_nhwc_mlp",
        nodes,
        inits,
        "flatten_input",
        ["unk__11", 28, 28, 1],
        "dense_1",
        ["unk__12", 10],
        13,
        TF2ONNX,
    )


def keras2onnx_nhwc_flatten():
    nodes, inits = _keras_mlp_on_nhwc(helper.make_node("Flatten", ["input_1"], ["flat"], "flatten", axis=1), "dense_1")
    save("keras2onnx_nhwc_flatten", nodes, inits, "input_1", ["N", 28, 28, 1], "dense_1", ["N", 10], 11, KERAS2ONNX)


def normalized(name, metadata=None, weights=None):
    """pytorch/examples' MNIST net at a quarter of its widths, trained on normalized pixels
    (seeded weights of a trained one's scale; ``weights``: trained ones, by initializer name,
    as make_trained_normalized.py gives them)."""
    nodes = [
        conv("input", "conv1.weight", "conv1.bias", "/conv1/Conv_output_0", "/conv1/Conv", 3),
        helper.make_node("Relu", ["/conv1/Conv_output_0"], ["/Relu_output_0"], "/Relu"),
        conv("/Relu_output_0", "conv2.weight", "conv2.bias", "/conv2/Conv_output_0", "/conv2/Conv", 3),
        helper.make_node("Relu", ["/conv2/Conv_output_0"], ["/Relu_1_output_0"], "/Relu_1"),
        max_pool("/Relu_1_output_0", "/MaxPool_output_0", "/MaxPool"),
        helper.make_node("Flatten", ["/MaxPool_output_0"], ["/Flatten_output_0"], "/Flatten", axis=1),
        gemm("/Flatten_output_0", "fc1.weight", "fc1.bias", "/fc1/Gemm_output_0", "/fc1/Gemm"),
        helper.make_node("Relu", ["/fc1/Gemm_output_0"], ["/Relu_2_output_0"], "/Relu_2"),
        gemm("/Relu_2_output_0", "fc2.weight", "fc2.bias", "/fc2/Gemm_output_0", "/fc2/Gemm"),
        helper.make_node("LogSoftmax", ["/fc2/Gemm_output_0"], ["output"], "/LogSoftmax", axis=1),
    ]
    inits = [
        init("conv1.weight", he(8, 1, 3, 3)),
        init("conv1.bias", bias(8)),
        init("conv2.weight", he(16, 8, 3, 3)),
        init("conv2.bias", bias(16)),
        init("fc1.weight", he(32, 2304)),
        init("fc1.bias", bias(32)),
        init("fc2.weight", he(10, 32)),
        init("fc2.bias", bias(10)),
    ]
    if weights is not None:
        inits = [init(t.name, weights[t.name]) for t in inits]
    save(name, nodes, inits, "input", ["batch_size", 1, 28, 28], "output", ["batch_size", 10], 17, TORCH, metadata)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    flatten_first_softmax()
    sigmoid_head()
    dynamo_no_batch()
    tf2onnx_nhwc()
    tf2onnx_flatten_28x28()
    normalized("normalized_mnist")
    normalized("normalized_half_recorded", {"lenet_mean": "0.5", "lenet_std": "0.5"})
    tf2onnx_nhwc_mlp()
    keras2onnx_nhwc_flatten()
