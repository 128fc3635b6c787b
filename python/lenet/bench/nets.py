"""The same network rebuilt in other frameworks from a ``ModelSpec`` (the file lenet
loads), so that every contender runs exactly the weights of the .h5.

All four take the benchmark's input, float32 (n, H, W, C) scaled for the model, and
return probabilities (n, classes); a model that ends in logits gets a softmax appended,
as the engine does. Only channels_last models are rebuilt.

- ``tf_forward``: TensorFlow low-level ops (``tf.nn``), NHWC like Keras.
- ``onnx_model``: an ONNX graph built by hand. Conv is NCHW in ONNX: the graph starts
  with a Transpose, kernels go HWIO -> OIHW, the first Dense after a Flatten gets its
  rows permuted HWC -> CHW, and 'same' padding becomes explicit (possibly asymmetric)
  pads, the extra pixel at the bottom/right as in TensorFlow.
- ``torch_module``: PyTorch functional ops, NCHW inside, with the same conversions, its
  weights on the device asked for.
- ``jax_forward``: JAX ``lax`` ops, NHWC like Keras, every product and convolution at
  precision HIGHEST (FP32 even where XLA would use TF32); wrap it in ``jax.jit``.
"""

from __future__ import annotations

from functools import partial
from typing import Iterator

import numpy as np

import lenet
from lenet.spec import ModelSpec

# The record kinds rebuilt here (a chain of them, channels_last).
KINDS = ("conv2d", "max_pool2d", "avg_pool2d", "zero_pad2d", "flatten", "dense", "activation", "rescaling")
ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax")


def ends_in_softmax(spec: ModelSpec) -> bool:
    return bool(spec.layers) and spec.layers[-1].activation == "softmax"


def walk(spec: ModelSpec) -> Iterator[tuple[object, tuple]]:
    """Each layer record with the shape of its input as the core infers it: (H, W, C),
    or (features,) after Flatten."""
    net = lenet.Model(spec).network
    if net.channels_first:
        raise ValueError("the rebuilt networks take channels_last models only")
    shapes = [tuple(row[2]) for row in net.layers()]
    for i, layer in enumerate(spec.layers):
        if (
            layer.kind not in KINDS
            or list(layer.inputs) != [i - 1]
            or layer.activation not in ACTIVATIONS
            or (layer.activation == "relu" and (layer.alpha or layer.threshold or layer.max_value != float("inf")))
        ):
            raise ValueError(f"layer {layer.name!r} ({layer.kind}) is not rebuilt in other frameworks")
        yield layer, tuple(net.input_shape) if i == 0 else shapes[i - 1]


def weight(layer, name: str):
    """A record's weight as a float32 array, or None."""
    return layer.weight(name)


def pads(layer, shape: tuple) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) that make a 'same' window valid (TensorFlow's rule)."""
    if not layer.same_padding:
        return (0, 0, 0, 0)
    out = []
    for size, k, s in zip(shape[:2], layer.kernel, layer.strides):
        total = max((-(-size // s) - 1) * s + k - size, 0)
        out += [total // 2, total - total // 2]
    return tuple(out)


def chw_rows(weights: np.ndarray, hwc: tuple) -> np.ndarray:
    """A Dense kernel whose rows follow a Flatten of HWC, reordered for a Flatten of CHW."""
    h, w, c = hwc
    return np.ascontiguousarray(weights.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(h * w * c, -1))


# --- TensorFlow (tf.nn) -----------------------------------------------------------


def tf_forward(spec: ModelSpec):
    """A Python function x -> probabilities made of tf.nn ops; wrap it in tf.function as you like."""
    import tensorflow as tf

    acts = {"relu": tf.nn.relu, "tanh": tf.math.tanh, "sigmoid": tf.math.sigmoid, "softmax": tf.nn.softmax}
    steps = []
    for layer, shape in walk(spec):
        k, pad = layer.kind, "SAME" if layer.same_padding else "VALID"
        kernel, bias = weight(layer, "kernel"), weight(layer, "bias")
        if k == "conv2d":
            steps.append(partial(tf.nn.conv2d, filters=tf.constant(kernel), strides=layer.strides, padding=pad))
        elif k == "max_pool2d":
            steps.append(partial(tf.nn.max_pool2d, ksize=layer.kernel, strides=layer.strides, padding=pad))
        elif k == "avg_pool2d":  # 'SAME' averages real pixels only, like Keras
            steps.append(partial(tf.nn.avg_pool2d, ksize=layer.kernel, strides=layer.strides, padding=pad))
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            steps.append(partial(tf.pad, paddings=[[0, 0], [t, b], [l, r], [0, 0]]))
        elif k == "flatten":
            steps.append(partial(tf.reshape, shape=[-1, int(np.prod(shape))]))
        elif k == "dense":
            steps.append(partial(tf.linalg.matmul, b=tf.constant(kernel)))
        elif k == "rescaling":
            steps.append(lambda x, s=layer.scale, o=layer.offset: x * s + o)
        if bias is not None:
            steps.append(partial(tf.nn.bias_add, bias=tf.constant(bias)))
        if layer.activation != "linear":
            steps.append(acts[layer.activation])
    if not ends_in_softmax(spec):
        steps.append(tf.nn.softmax)

    def forward(x):
        for step in steps:
            x = step(x)
        return x

    return forward


# --- ONNX -------------------------------------------------------------------------


def onnx_model(spec: ModelSpec, opset: int = 17) -> bytes:
    """The serialized ONNX model: input "x" (n, H, W, C), output "probabilities" (n, classes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    cur = "x"

    def const(arr: np.ndarray, dtype=np.float32) -> str:
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype), name))
        return name

    def add(op: str, *inputs: str, **attrs) -> None:
        nonlocal cur
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, [cur, *inputs], [out], **attrs))
        cur = out

    acts = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid", "softmax": "Softmax"}
    add("Transpose", perm=[0, 3, 1, 2])
    flattened = None  # (H, W, C) of the last Flatten, until the Dense that follows it
    for layer, shape in walk(spec):
        k = layer.kind
        kernel, bias_w = weight(layer, "kernel"), weight(layer, "bias")
        t, b, l, r = pads(layer, shape)
        window = dict(kernel_shape=list(layer.kernel), strides=list(layer.strides), pads=[t, l, b, r])
        if k == "conv2d":
            bias = [const(bias_w)] if bias_w is not None else []
            add("Conv", const(kernel.transpose(3, 2, 0, 1)), *bias, **window)
        elif k == "max_pool2d":
            add("MaxPool", **window)
        elif k == "avg_pool2d":
            add("AveragePool", count_include_pad=0, **window)
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            add("Pad", const(np.array([0, 0, t, l, 0, 0, b, r]), np.int64))
        elif k == "flatten":
            add("Flatten", axis=1)
            flattened = shape
        elif k == "dense":
            w = chw_rows(kernel, flattened) if flattened else kernel
            flattened = None
            if bias_w is not None:
                add("Gemm", const(w), const(bias_w))
            else:
                add("MatMul", const(w))
        elif k == "rescaling":
            add("Mul", const(np.float32(layer.scale)))
            add("Add", const(np.float32(layer.offset)))
        if layer.activation != "linear":
            add(acts[layer.activation], **({"axis": -1} if layer.activation == "softmax" else {}))
    if not ends_in_softmax(spec):
        add("Softmax", axis=-1)
    nodes[-1].output[0] = "probabilities"
    h, w, c = spec.input_shape
    graph = helper.make_graph(
        nodes,
        spec.name or "lenet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", h, w, c])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", None])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="lenet-bench")
    model.ir_version = 8  # the IR of opset 17: readable by any ONNX Runtime of the last years
    onnx.checker.check_model(model)
    return model.SerializeToString()


# --- PyTorch ----------------------------------------------------------------------


def torch_module(spec: ModelSpec, device: str = "cpu"):
    """A torch.nn.Module taking (n, H, W, C) float32 and returning probabilities; its
    weights (closed over, not parameters) live on ``device``."""
    import torch
    import torch.nn.functional as F

    def tensor(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(device)

    def padded(x, p, value=0.0):  # F.pad takes (left, right, top, bottom)
        return F.pad(x, (p[2], p[3], p[0], p[1]), value=value) if any(p) else x

    def avg_same(x, p, k, s, count):  # mean over real pixels only, like Keras 'same'
        return F.avg_pool2d(padded(x, p), k, s, divisor_override=1) / count

    acts = {"relu": F.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "softmax": partial(F.softmax, dim=-1)}
    steps = []
    flattened = None
    for layer, shape in walk(spec):
        k, p = layer.kind, pads(layer, shape)
        kernel, bias_w = weight(layer, "kernel"), weight(layer, "bias")
        bias = tensor(bias_w) if bias_w is not None else None
        if k == "conv2d":
            steps.append(partial(padded, p=p))
            steps.append(
                partial(F.conv2d, weight=tensor(kernel.transpose(3, 2, 0, 1)), bias=bias, stride=layer.strides)
            )
        elif k == "max_pool2d":
            steps.append(partial(padded, p=p, value=float("-inf")))
            steps.append(partial(F.max_pool2d, kernel_size=layer.kernel, stride=layer.strides))
        elif k == "avg_pool2d" and any(p):
            ones = padded(torch.ones(1, 1, *shape[:2], device=device), p)
            count = F.avg_pool2d(ones, layer.kernel, layer.strides, divisor_override=1)
            steps.append(partial(avg_same, p=p, k=layer.kernel, s=layer.strides, count=count))
        elif k == "avg_pool2d":
            steps.append(partial(F.avg_pool2d, kernel_size=layer.kernel, stride=layer.strides))
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            steps.append(partial(padded, p=(t, b, l, r)))
        elif k == "flatten":
            steps.append(partial(torch.flatten, start_dim=1))
            flattened = shape
        elif k == "dense":
            w = chw_rows(kernel, flattened) if flattened else kernel
            flattened = None
            steps.append(partial(F.linear, weight=tensor(w.T), bias=bias))
        elif k == "rescaling":
            steps.append(lambda x, s=layer.scale, o=layer.offset: x * s + o)
        if layer.activation != "linear":
            steps.append(acts[layer.activation])
    if not ends_in_softmax(spec):
        steps.append(acts["softmax"])

    class Net(torch.nn.Module):
        def forward(self, x):
            x = x.permute(0, 3, 1, 2)  # NHWC in, NCHW inside (a view: channels_last memory)
            for step in steps:
                x = step(x)
            return x

    return Net().eval()


# --- JAX ------------------------------------------------------------------------------


def jax_forward(spec: ModelSpec):
    """A function x -> probabilities of JAX lax ops, the weights closed over as device
    arrays; wrap it in jax.jit."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    hi = lax.Precision.HIGHEST
    acts = {
        "relu": jax.nn.relu,
        "tanh": jnp.tanh,
        "sigmoid": jax.nn.sigmoid,
        "softmax": partial(jax.nn.softmax, axis=-1),
    }

    def window(layer, p):
        return dict(
            window_dimensions=(1, *layer.kernel, 1),
            window_strides=(1, *layer.strides, 1),
            padding=((0, 0), (p[0], p[1]), (p[2], p[3]), (0, 0)),
        )

    steps = []
    for layer, shape in walk(spec):
        k, p = layer.kind, pads(layer, shape)
        kernel, bias = weight(layer, "kernel"), weight(layer, "bias")
        if k == "conv2d":
            steps.append(
                partial(
                    lax.conv_general_dilated,
                    rhs=jnp.asarray(kernel),
                    window_strides=layer.strides,
                    padding=((p[0], p[1]), (p[2], p[3])),
                    dimension_numbers=("NHWC", "HWIO", "NHWC"),
                    precision=hi,
                )
            )
        elif k == "max_pool2d":
            steps.append(partial(lax.reduce_window, init_value=-jnp.inf, computation=lax.max, **window(layer, p)))
        elif k == "avg_pool2d":  # 'same' averages real pixels only, like Keras
            count = lax.reduce_window(jnp.ones((1, *shape[:2], 1), jnp.float32), 0.0, lax.add, **window(layer, p))
            steps.append(lambda x, w=window(layer, p), c=count: lax.reduce_window(x, 0.0, lax.add, **w) / c)
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            steps.append(partial(jnp.pad, pad_width=((0, 0), (t, b), (l, r), (0, 0))))
        elif k == "flatten":
            steps.append(lambda x: x.reshape(x.shape[0], -1))
        elif k == "dense":
            steps.append(lambda x, w=jnp.asarray(kernel): jnp.matmul(x, w, precision=hi))
        elif k == "rescaling":
            steps.append(lambda x, s=layer.scale, o=layer.offset: x * s + o)
        if bias is not None:
            steps.append(lambda x, b=jnp.asarray(bias): x + b)
        if layer.activation != "linear":
            steps.append(acts[layer.activation])
    if not ends_in_softmax(spec):
        steps.append(acts["softmax"])

    def forward(x):
        for step in steps:
            x = step(x)
        return x

    return forward
