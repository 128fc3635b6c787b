"""What the rebuilt networks (nets.py) share: the layer records they rebuild, the walk over the
model's graph that checks them, and the pieces every framework's builder computes the same way
(BatchNormalization folded, the activations, merges, 'same' pads, a Dense's rows after a CHW
Flatten)."""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

import lenet
from lenet.spec import ModelSpec

MERGES = ("add", "subtract", "multiply", "average", "maximum", "minimum")

# The record kinds rebuilt here, channels_last, in a graph of any shape (a residual Add, a
# Concatenate of branches). BatchNormalization is folded into one scale and shift per channel,
# as the core folds it; Dropout and the other layers that are identities at inference are not
# records at all.
KINDS = (
    "conv2d",
    "max_pool2d",
    "avg_pool2d",
    "global_max_pool2d",
    "global_avg_pool2d",
    "zero_pad2d",
    "flatten",
    "reshape",
    "dense",
    "activation",
    "softmax",
    "log_softmax",
    "rescaling",
    "batch_norm",
    "concatenate",
    *MERGES,
)
ACTIVATIONS = (
    "linear",
    "relu",
    "elu",
    "selu",
    "gelu",
    "gelu_tanh",
    "tanh",
    "sigmoid",
    "swish",
    "softplus",
    "softsign",
    "exponential",
    "mish",
    "softmax",
)


class NotRebuilt(ValueError):
    """A layer (or a form of one) the rebuilt networks do not have: the message names it, in a
    few words, for the contender's row."""


def ends_in_softmax(spec: ModelSpec) -> bool:
    return output_kind(spec) == "softmax"


def output_kind(spec: ModelSpec) -> str:
    """What the model's output is, as the core reads it: "softmax", "log_softmax",
    "sigmoid" or "scores" (logits)."""
    return lenet.Model(spec).network.output_kind


def _last_axis(layer, shape: tuple) -> bool:
    """Whether a layer's Keras axes (the batch axis counted) are the last axis of ``shape``."""
    return list(layer.axes) in ([-1], [len(shape)])


def _channels_axis(layer, shape: tuple) -> bool:
    """Whether a batch norm's or a concatenation's axes are a channels_first image's channels."""
    return layer.kind in ("batch_norm", "concatenate") and len(shape) == 3 and list(layer.axes) in ([1], [-3])


def walk(spec: ModelSpec, channels_first: bool = False) -> Iterator[tuple[int, object, list, tuple]]:
    """(index, layer record, the shapes of its inputs, its output shape), each shape per sample
    as the core infers it: (H, W, C) for an image, (features,) after Flatten; (C, H, W) in a
    channels_first model (an ONNX file's), which only a builder that says it takes them
    (``channels_first``: its tensors as the records say, images channels first, and the
    Permutes an ONNX file's Transposes become) gets. Raises NotRebuilt for what the rebuilt
    networks lack."""
    net = lenet.Model(spec).network
    if net.channels_first and not channels_first:
        raise NotRebuilt("no rebuild of channels_first models")
    shapes = [tuple(row[2]) for row in net.layers()]
    for i, layer in enumerate(spec.layers):
        ins = [tuple(net.input_shape) if j == -1 else shapes[j] for j in layer.inputs]
        what = None
        if layer.kind not in KINDS and not (channels_first and layer.kind == "permute"):
            what = layer.kind
        elif layer.activation not in ACTIVATIONS:
            what = f"{layer.kind}, activation {layer.activation}"
        elif layer.kind == "conv2d" and (layer.groups != 1 or tuple(layer.dilation) != (1, 1)):
            what = "grouped or dilated conv2d"
        elif layer.kind in ("batch_norm", "concatenate", "softmax", "log_softmax") and not (
            _last_axis(layer, ins[0]) or (net.channels_first and _channels_axis(layer, ins[0]))
        ):
            what = f"{layer.kind} on axis {list(layer.axes)}"
        if what:
            raise NotRebuilt(f"no rebuild of layer {layer.name!r} ({what})")
        yield i, layer, ins, shapes[i]


def graph(spec: ModelSpec, node, channels_first: bool = False) -> "Callable":
    """forward(x): the spec's layers evaluated in order, ``node(index, layer, input shapes,
    output shape)`` giving each layer's function of its inputs' values (``channels_first``:
    as walk's)."""
    steps = [(layer.inputs, node(i, layer, ins, out)) for i, layer, ins, out in walk(spec, channels_first)]

    def forward(x):
        values = {-1: x}
        for i, (inputs, fn) in enumerate(steps):
            values[i] = fn(*[values[j] for j in inputs])
        return values[len(steps) - 1]

    return forward


def bn_affine(layer) -> tuple[np.ndarray, np.ndarray]:
    """BatchNormalization at inference as y = x * scale + shift, per channel (float32)."""
    mean, var = weight(layer, "moving_mean").astype(np.float64), weight(layer, "moving_variance").astype(np.float64)
    gamma, beta = weight(layer, "gamma"), weight(layer, "beta")
    scale = (1.0 if gamma is None else gamma.astype(np.float64)) / np.sqrt(var + layer.epsilon)
    shift = (0.0 if beta is None else beta.astype(np.float64)) - mean * scale
    return scale.astype(np.float32), shift.astype(np.float32)


def activation(layer, ops) -> "Callable | None":
    """The record's activation as a function of ``ops`` (a namespace of the framework's
    where, minimum, exp, tanh, sigmoid, erf, softplus, abs, softmax), or None for linear."""
    a, name = layer, layer.activation
    if name == "linear":
        return None
    if name == "relu":
        if a.alpha == 0 and a.threshold == 0 and a.max_value == float("inf"):
            return ops.relu
        cap = a.max_value

        def relu(x):  # Keras' relu(x, negative_slope, max_value, threshold)
            y = ops.where(x >= a.threshold, x, (x - a.threshold) * a.alpha)
            return ops.minimum(y, cap) if cap != float("inf") else y

        return relu
    selu_alpha, selu_scale = 1.6732632423543772, 1.0507009873554805
    return {
        "elu": lambda x: ops.where(x > 0, x, (ops.exp(ops.minimum(x, 0.0)) - 1) * a.alpha),
        "selu": lambda x: ops.where(x > 0, x, (ops.exp(ops.minimum(x, 0.0)) - 1) * selu_alpha) * selu_scale,
        "gelu": lambda x: 0.5 * x * (1 + ops.erf(x * 0.7071067811865476)),
        "gelu_tanh": lambda x: 0.5 * x * (1 + ops.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))),
        "tanh": ops.tanh,
        "sigmoid": ops.sigmoid,
        "swish": lambda x: x * ops.sigmoid(x),
        "softplus": ops.softplus,
        "softsign": lambda x: x / (1 + ops.abs(x)),
        "exponential": ops.exp,
        "mish": lambda x: x * ops.tanh(ops.softplus(x)),
        "softmax": ops.softmax,
    }[name]


def to_probabilities(kind: str, ops):
    """What turns the model's output into probabilities, as the engine's predict_proba does:
    nothing after a softmax, a division by their sum for sigmoids, else a softmax."""
    if kind == "softmax":
        return None
    if kind == "sigmoid":
        return lambda y: y / ops.sum(y)
    return ops.softmax


def merge(kind: str, ops):
    return {
        "add": lambda *xs: _fold(lambda a, b: a + b, xs),
        "subtract": lambda a, b: a - b,
        "multiply": lambda *xs: _fold(lambda a, b: a * b, xs),
        "average": lambda *xs: _fold(lambda a, b: a + b, xs) * (1.0 / len(xs)),
        "maximum": lambda *xs: _fold(ops.maximum, xs),
        "minimum": lambda *xs: _fold(ops.minimum, xs),
    }[kind]


def _fold(f, xs):
    out = xs[0]
    for x in xs[1:]:
        out = f(out, x)
    return out


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
