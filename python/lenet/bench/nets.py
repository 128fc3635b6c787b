"""The same network rebuilt in other frameworks from a ``ModelSpec`` (the file lenet
loads), so that every contender runs exactly the weights of the .h5.

All four take the benchmark's input, float32 in the model's input shape ((n, H, W, C),
(n, 784), (n, 28, 28), ...) scaled for the model, and return probabilities (n, classes) as
the engine's predict_proba makes them (a softmax appended to logits, sigmoids over their
sum). They walk the model's graph of layer records (netgraph.py: residual adds, concatenated
branches); only channels_last models are rebuilt, and a layer they lack raises NotRebuilt
naming it.

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
from types import SimpleNamespace

import numpy as np

from lenet.spec import ModelSpec

from .netgraph import (  # noqa: F401 (walk, ends_in_softmax, NotRebuilt: callers look for them here)
    ACTIVATIONS,
    KINDS,
    MERGES,
    NotRebuilt,
    activation,
    bn_affine,
    chw_rows,
    ends_in_softmax,
    graph,
    merge,
    output_kind,
    pads,
    to_probabilities,
    walk,
    weight,
)

# --- TensorFlow (tf.nn) -----------------------------------------------------------


def tf_forward(spec: ModelSpec):
    """A Python function x -> probabilities made of tf.nn ops; wrap it in tf.function as you like."""
    import tensorflow as tf

    ops = SimpleNamespace(
        relu=tf.nn.relu,
        where=tf.where,
        minimum=tf.minimum,
        maximum=tf.maximum,
        exp=tf.exp,
        tanh=tf.math.tanh,
        sigmoid=tf.math.sigmoid,
        erf=tf.math.erf,
        softplus=tf.nn.softplus,
        abs=tf.abs,
        softmax=tf.nn.softmax,
        sum=lambda y: tf.reduce_sum(y, axis=-1, keepdims=True),
    )

    def node(i, layer, ins, out):
        k, pad, shape = layer.kind, "SAME" if layer.same_padding else "VALID", ins[0]
        kernel, bias = weight(layer, "kernel"), weight(layer, "bias")
        if k == "conv2d":
            f = partial(tf.nn.conv2d, filters=tf.constant(kernel), strides=layer.strides, padding=pad)
        elif k == "max_pool2d":
            f = partial(tf.nn.max_pool2d, ksize=layer.kernel, strides=layer.strides, padding=pad)
        elif k == "avg_pool2d":  # 'SAME' averages real pixels only, like Keras
            f = partial(tf.nn.avg_pool2d, ksize=layer.kernel, strides=layer.strides, padding=pad)
        elif k in ("global_max_pool2d", "global_avg_pool2d"):
            reduce = tf.reduce_max if k == "global_max_pool2d" else tf.reduce_mean
            f = partial(reduce, axis=[1, 2], keepdims=layer.keepdims)
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            f = partial(tf.pad, paddings=[[0, 0], [t, b], [l, r], [0, 0]])
        elif k in ("flatten", "reshape"):
            f = partial(tf.reshape, shape=[-1, *out])
        elif k == "dense":
            f = partial(tf.tensordot, b=tf.constant(kernel), axes=1) if len(shape) > 1 else None
            f = f or partial(tf.linalg.matmul, b=tf.constant(kernel))
        elif k == "rescaling":
            f = lambda x, s=layer.scale, o=layer.offset: x * s + o  # noqa: E731
        elif k == "batch_norm":
            scale, shift = (tf.constant(v) for v in bn_affine(layer))
            f = lambda x: x * scale + shift  # noqa: E731
        elif k == "concatenate":
            f = lambda *xs: tf.concat(xs, axis=-1)  # noqa: E731
        elif k in MERGES:
            f = merge(k, ops)
        elif k == "softmax":  # the record's activation is the softmax
            f = None if layer.activation == "softmax" else tf.nn.softmax
        elif k == "log_softmax":
            f = tf.nn.log_softmax
        else:  # activation
            f = None
        act = activation(layer, ops)
        plus = tf.constant(bias) if bias is not None else None
        return _chain(f, plus, act)

    forward = graph(spec, node)
    last = to_probabilities(output_kind(spec), ops)
    return forward if last is None else (lambda x: last(forward(x)))


def _chain(f, bias, act):
    """A layer's function, then its bias, then its activation (each optional)."""

    def run(*xs):
        x = f(*xs) if f is not None else xs[0]
        if bias is not None:
            x = x + bias
        return act(x) if act is not None else x

    return run


# --- ONNX -------------------------------------------------------------------------


def onnx_model(spec: ModelSpec, opset: int = 17) -> bytes:
    """The serialized ONNX model: input "x" (n, *input_shape), output "probabilities" (n, classes).
    Images are NCHW inside: the graph starts with a Transpose, a Flatten followed by a Dense
    flattens CHW (the Dense's rows permuted to match), any other Flatten transposes back first."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []

    def const(arr, dtype=np.float32) -> str:
        name = f"c{len(inits)}"
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype), name))
        return name

    def op(kind: str, *inputs: str, **attrs) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def channel(v: np.ndarray, shape: tuple) -> str:  # a per-channel vector, broadcast on NCHW
        return const(v.reshape(-1, 1, 1) if len(shape) == 3 else v)

    def act(x: str, layer) -> str:
        name, a = layer.activation, layer
        plain = a.alpha == 0 and a.threshold == 0 and a.max_value == float("inf")
        if name == "linear":
            return x
        if name == "relu" and plain:
            return op("Relu", x)
        if name == "relu" and a.threshold == 0:
            y = op("LeakyRelu", x, alpha=float(a.alpha)) if a.alpha else op("Relu", x)
            return op("Min", y, const(np.float32(a.max_value))) if a.max_value != float("inf") else y
        simple = {"tanh": "Tanh", "sigmoid": "Sigmoid", "softplus": "Softplus", "softsign": "Softsign"}
        if name in simple:
            return op(simple[name], x)
        if name == "elu":
            return op("Elu", x, alpha=float(a.alpha))
        if name == "selu":
            return op("Selu", x)
        if name == "exponential":
            return op("Exp", x)
        if name == "swish":
            return op("Mul", x, op("Sigmoid", x))
        if name == "gelu":
            erf = op("Erf", op("Mul", x, const(np.float32(0.7071067811865476))))
            return op("Mul", op("Mul", x, const(np.float32(0.5))), op("Add", erf, const(np.float32(1))))
        if name == "softmax":
            return op("Softmax", x, axis=-1)
        raise NotRebuilt(f"no ONNX rebuild of activation {name!r} (layer {layer.name!r})")

    image = len(spec.input_shape) == 3
    values = {-1: (op("Transpose", "x", perm=[0, 3, 1, 2]) if image else "x", None)}  # (name, flattened HWC)
    users = {}
    for layer in spec.layers:
        for j in layer.inputs:
            users.setdefault(j, []).append(layer.kind)
    for i, layer, ins, out in walk(spec):
        k, shape = layer.kind, ins[0]
        xs = [values[j][0] for j in layer.inputs]
        if any(values[j][1] is not None for j in layer.inputs) and k != "dense":
            raise NotRebuilt(f"no ONNX rebuild of a Flatten feeding {k} (layer {layer.name!r})")
        x, flattened = xs[0], None
        kernel, bias_w = weight(layer, "kernel"), weight(layer, "bias")
        t, b, l, r = pads(layer, shape)
        window = dict(kernel_shape=list(layer.kernel), strides=list(layer.strides), pads=[t, l, b, r])
        if k == "conv2d":
            bias = [const(bias_w)] if bias_w is not None else []
            y = op("Conv", x, const(kernel.transpose(3, 2, 0, 1)), *bias, **window)
            bias_w = None
        elif k == "max_pool2d":
            y = op("MaxPool", x, **window)
        elif k == "avg_pool2d":
            y = op("AveragePool", x, count_include_pad=0, **window)
        elif k in ("global_max_pool2d", "global_avg_pool2d"):
            y = op(
                "ReduceMax" if k == "global_max_pool2d" else "ReduceMean", x, axes=[2, 3], keepdims=int(layer.keepdims)
            )
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            y = op("Pad", x, const(np.array([0, 0, t, l, 0, 0, b, r]), np.int64))
        elif k == "flatten" and len(shape) == 3 and users.get(i) == ["dense"]:
            y, flattened = op("Flatten", x, axis=1), shape
        elif k in ("flatten", "reshape"):
            if len(shape) == 3:
                x = op("Transpose", x, perm=[0, 2, 3, 1])
            y = op("Reshape", x, const(np.array([-1, *out]), np.int64))
            if len(out) == 3:
                y = op("Transpose", y, perm=[0, 3, 1, 2])
        elif k == "dense":
            if len(shape) != 1:
                raise NotRebuilt(f"no ONNX rebuild of a Dense on a {len(shape)}-D input (layer {layer.name!r})")
            hwc = values[layer.inputs[0]][1]
            w = chw_rows(kernel, hwc) if hwc else kernel
            y = op("Gemm", x, const(w), const(bias_w)) if bias_w is not None else op("MatMul", x, const(w))
            bias_w = None
        elif k == "rescaling":
            y = op("Add", op("Mul", x, const(np.float32(layer.scale))), const(np.float32(layer.offset)))
        elif k == "batch_norm":
            scale, shift = bn_affine(layer)
            y = op("Add", op("Mul", x, channel(scale, shape)), channel(shift, shape))
        elif k == "concatenate":
            y = op("Concat", *xs, axis=1 if len(shape) in (1, 3) else -1)
        elif k in ("add", "subtract", "multiply", "maximum", "minimum"):
            name = {"add": "Sum", "subtract": "Sub", "multiply": "Mul", "maximum": "Max", "minimum": "Min"}[k]
            y = op(name, *xs)
        elif k == "average":
            y = op("Mul", op("Sum", *xs), const(np.float32(1 / len(xs))))
        elif k in ("softmax", "log_softmax"):
            if len(shape) == 3:
                raise NotRebuilt(f"no ONNX rebuild of a {k} on an image (layer {layer.name!r})")
            y = x if layer.activation == "softmax" else op("Softmax" if k == "softmax" else "LogSoftmax", x, axis=-1)
        else:
            y = x
        if bias_w is not None:
            y = op("Add", y, channel(bias_w, out))
        values[i] = (act(y, layer), flattened)
    kind = output_kind(spec)
    y = values[len(spec.layers) - 1][0]
    if kind == "sigmoid":
        y = op("Div", y, op("ReduceSum", y, const(np.array([-1]), np.int64), keepdims=1))
    elif kind != "softmax":
        y = op("Softmax", y, axis=-1)
    nodes.append(helper.make_node("Identity", [y], ["probabilities"]))
    graph_ = helper.make_graph(
        nodes,
        spec.name or "lenet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", *spec.input_shape])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", None])],
        inits,
    )
    model = helper.make_model(graph_, opset_imports=[helper.make_opsetid("", opset)], producer_name="lenet-bench")
    model.ir_version = 8  # the IR of opset 17: readable by any ONNX Runtime of the last years
    onnx.checker.check_model(model)
    return model.SerializeToString()


# --- PyTorch ----------------------------------------------------------------------


def torch_module(spec: ModelSpec, device: str = "cpu"):
    """A torch.nn.Module taking (n, *input_shape) float32 and returning probabilities; its
    weights, parameters of the module that never need a gradient, live on ``device`` (Inductor
    freezes them into the compiled graph as constants: torch.compile as PyTorch advises for
    inference on the CPU, issue 75). Images are NCHW inside (a
    permuted view of the NHWC input: channels_last memory); a Flatten followed by a Dense
    flattens CHW (the Dense's rows permuted to match), any other permutes back first. A
    channels_first model (an ONNX file from PyTorch) runs as its records say: NCHW in,
    flattened CHW, its Permutes (a tf2onnx file's Transposes) as they are."""
    import torch
    import torch.nn.functional as F

    import lenet

    cf = lenet.Model(spec).network.channels_first

    params = []  # every weight the forward reads, registered on the module below

    def tensor(a: np.ndarray) -> torch.Tensor:
        t = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(device), requires_grad=False)
        params.append(t)
        return t

    def padded(x, p, value=0.0):  # F.pad takes (left, right, top, bottom)
        return F.pad(x, (p[2], p[3], p[0], p[1]), value=value) if any(p) else x

    def avg_same(x, p, k, s, count):  # mean over real pixels only, like Keras 'same'
        return F.avg_pool2d(padded(x, p), k, s, divisor_override=1) / count

    ops = SimpleNamespace(
        relu=F.relu,
        where=torch.where,
        minimum=lambda x, v: torch.clamp(x, max=v) if isinstance(v, float) else torch.minimum(x, v),
        maximum=torch.maximum,
        exp=torch.exp,
        tanh=torch.tanh,
        sigmoid=torch.sigmoid,
        erf=torch.special.erf,
        softplus=F.softplus,
        abs=torch.abs,
        softmax=partial(F.softmax, dim=-1),
        sum=lambda y: y.sum(dim=-1, keepdim=True),
    )
    users = {}
    for layer in spec.layers:
        for j in layer.inputs:
            users.setdefault(j, []).append(layer.kind)
    chw_flat = {}  # layer index -> the (H, W, C) it flattened channels first

    def node(i, layer, ins, out):
        k, shape = layer.kind, ins[0]
        if any(j in chw_flat for j in layer.inputs) and k != "dense":
            raise NotRebuilt(f"no torch rebuild of a Flatten feeding {k} (layer {layer.name!r})")
        image = cf and len(shape) == 3
        if image:  # (C, H, W) as (H, W, C), for the padding and window arithmetic below
            shape = (*shape[1:], shape[0])
        p = pads(layer, shape)
        kernel, bias_w = weight(layer, "kernel"), weight(layer, "bias")
        bias = tensor(bias_w) if bias_w is not None else None
        if k == "conv2d":
            w = tensor(kernel.transpose(3, 2, 0, 1))
            f = lambda x, p=p, w=w, b=bias: F.conv2d(padded(x, p), w, b, layer.strides)  # noqa: E731
            bias = None
        elif k == "max_pool2d":
            f = lambda x, p=p: F.max_pool2d(padded(x, p, float("-inf")), layer.kernel, layer.strides)  # noqa: E731
        elif k == "avg_pool2d" and any(p):
            ones = padded(torch.ones(1, 1, *shape[:2], device=device), p)
            count = F.avg_pool2d(ones, layer.kernel, layer.strides, divisor_override=1)
            f = partial(avg_same, p=p, k=layer.kernel, s=layer.strides, count=count)
        elif k == "avg_pool2d":
            f = partial(F.avg_pool2d, kernel_size=layer.kernel, stride=layer.strides)
        elif k in ("global_max_pool2d", "global_avg_pool2d"):
            reduce = torch.amax if k == "global_max_pool2d" else torch.mean
            f = partial(reduce, dim=(2, 3), keepdim=layer.keepdims)
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            f = partial(padded, p=(t, b, l, r))
        elif cf and k in ("flatten", "reshape"):  # the records' own order: nothing to permute
            f = lambda x, out=out: x.reshape(-1, *out)  # noqa: E731
        elif k == "permute":  # only in a channels_first model (walk)
            f = lambda x, d=tuple(layer.axes): x.permute(0, *d)  # noqa: E731
        elif k == "flatten" and len(shape) == 3 and users.get(i) == ["dense"]:
            chw_flat[i] = shape
            f = partial(torch.flatten, start_dim=1)
        elif k in ("flatten", "reshape"):

            def f(x, image_in=len(shape) == 3, image_out=len(out) == 3, out=out):
                x = x.permute(0, 2, 3, 1) if image_in else x
                x = x.reshape(-1, *out)
                return x.permute(0, 3, 1, 2) if image_out else x

        elif k == "dense":
            hwc = next((chw_flat[j] for j in layer.inputs if j in chw_flat), None)
            w = tensor((chw_rows(kernel, hwc) if hwc else kernel).T)
            f = partial(F.linear, weight=w, bias=bias)
            bias = None
        elif k == "rescaling":
            f = lambda x, s=layer.scale, o=layer.offset: x * s + o  # noqa: E731
        elif k == "batch_norm":
            scale, shift = (tensor(v.reshape(-1, 1, 1) if len(shape) == 3 else v) for v in bn_affine(layer))
            f = lambda x: x * scale + shift  # noqa: E731
        elif k == "concatenate":
            axis = 1 if len(shape) in (1, 3) else -1
            f = lambda *xs, d=axis: torch.cat(xs, dim=d)  # noqa: E731
        elif k in MERGES:
            f = merge(k, ops)
        elif k in ("softmax", "log_softmax"):
            if len(shape) == 3:
                raise NotRebuilt(f"no torch rebuild of a {k} on an image (layer {layer.name!r})")
            f = (
                None
                if layer.activation == "softmax"
                else partial(F.softmax if k == "softmax" else F.log_softmax, dim=-1)
            )
        else:
            f = None
        if bias is not None and len(out) == 3:
            bias = bias.reshape(-1, 1, 1)
        return _chain(f, bias, activation(layer, ops))

    forward = graph(spec, node, channels_first=True)
    last = to_probabilities(output_kind(spec), ops)
    image = len(spec.input_shape) == 3 and not cf

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weights = torch.nn.ParameterList(params)

        def forward(self, x):
            y = forward(x.permute(0, 3, 1, 2) if image else x)  # NHWC in, NCHW inside (a view)
            return y if last is None else last(y)

    return Net().eval()


# --- JAX ------------------------------------------------------------------------------


def jax_forward(spec: ModelSpec):
    """A function x -> probabilities of JAX lax ops, the weights closed over as device
    arrays; wrap it in jax.jit."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    hi = lax.Precision.HIGHEST
    ops = SimpleNamespace(
        relu=jax.nn.relu,
        where=jnp.where,
        minimum=jnp.minimum,
        maximum=jnp.maximum,
        exp=jnp.exp,
        tanh=jnp.tanh,
        sigmoid=jax.nn.sigmoid,
        erf=jax.scipy.special.erf,
        softplus=jax.nn.softplus,
        abs=jnp.abs,
        softmax=partial(jax.nn.softmax, axis=-1),
        sum=lambda y: y.sum(axis=-1, keepdims=True),
    )

    def window(layer, p):
        return dict(
            window_dimensions=(1, *layer.kernel, 1),
            window_strides=(1, *layer.strides, 1),
            padding=((0, 0), (p[0], p[1]), (p[2], p[3]), (0, 0)),
        )

    def node(i, layer, ins, out):
        k, shape = layer.kind, ins[0]
        p = pads(layer, shape)
        kernel, bias = weight(layer, "kernel"), weight(layer, "bias")
        if k == "conv2d":
            f = partial(
                lax.conv_general_dilated,
                rhs=jnp.asarray(kernel),
                window_strides=layer.strides,
                padding=((p[0], p[1]), (p[2], p[3])),
                dimension_numbers=("NHWC", "HWIO", "NHWC"),
                precision=hi,
            )
        elif k == "max_pool2d":
            f = partial(lax.reduce_window, init_value=-jnp.inf, computation=lax.max, **window(layer, p))
        elif k == "avg_pool2d":  # 'same' averages real pixels only, like Keras
            count = lax.reduce_window(jnp.ones((1, *shape[:2], 1), jnp.float32), 0.0, lax.add, **window(layer, p))
            f = lambda x, w=window(layer, p), c=count: lax.reduce_window(x, 0.0, lax.add, **w) / c  # noqa: E731
        elif k in ("global_max_pool2d", "global_avg_pool2d"):
            reduce = jnp.max if k == "global_max_pool2d" else jnp.mean
            f = partial(reduce, axis=(1, 2), keepdims=layer.keepdims)
        elif k == "zero_pad2d":
            t, b, l, r = layer.pad
            f = partial(jnp.pad, pad_width=((0, 0), (t, b), (l, r), (0, 0)))
        elif k in ("flatten", "reshape"):
            f = lambda x, out=out: x.reshape(x.shape[0], *out)  # noqa: E731
        elif k == "dense":
            f = lambda x, w=jnp.asarray(kernel): jnp.matmul(x, w, precision=hi)  # noqa: E731
        elif k == "rescaling":
            f = lambda x, s=layer.scale, o=layer.offset: x * s + o  # noqa: E731
        elif k == "batch_norm":
            scale, shift = (jnp.asarray(v) for v in bn_affine(layer))
            f = lambda x: x * scale + shift  # noqa: E731
        elif k == "concatenate":
            f = lambda *xs: jnp.concatenate(xs, axis=-1)  # noqa: E731
        elif k in MERGES:
            f = merge(k, ops)
        elif k in ("softmax", "log_softmax"):
            f = (
                None
                if layer.activation == "softmax"
                else partial(jax.nn.softmax if k == "softmax" else jax.nn.log_softmax, axis=-1)
            )
        else:
            f = None
        return _chain(f, jnp.asarray(bias) if bias is not None else None, activation(layer, ops))

    forward = graph(spec, node)
    last = to_probabilities(output_kind(spec), ops)
    return forward if last is None else (lambda x: last(forward(x)))
