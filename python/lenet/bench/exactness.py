"""How close a contender's answers are to the exact ones (issue 74): the model evaluated in
float64, and float32's rounding scale on the same graph, so that an error reads in units a
float32 engine can be held to whatever the model.

The float64 evaluation walks the model's layer records (the weights lenet loads from the Keras
or ONNX file, the shapes the core infers) with TensorFlow's ops in float64.
The rounding scale of each probability is what rounding every sum of the graph once at the
magnitude of its terms costs: a layer's output y_j = sum_i t_i rounds by about u * sum_i |t_i|
(u = 2^-24; the sum of |t_i| bounds every partial sum, in any order), which reaches the
probability through the sensitivity |dp / dy_j| (automatic differentiation of the float64
graph); independent roundings add in quadrature:

    sigma = u * sqrt(sum over layers and elements j of (|dp / dy_j| * sum_i |t_i|)^2)

(a function of one value, a softmax or a sigmoid, counts as a sum of one term). An engine that
sums in another order, in blocks or with fused multiply-adds lands within a small multiple of
sigma: Keras and lenet land at 0.3-0.75 units in root mean square on every model the tests know.
An engine that sums large cancelling terms (a batch norm folded badly, Winograd's transforms in
float32) lands several units out. Nothing here depends on the CPU: float64 has no oneDNN or
XNNPACK path, and the magnitudes come from the graph. tests/models/float64_reference.py judges
the same way from Keras' own float64 twin of a Keras file; tests/bench/test_exactness.py checks
that the two agree.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from lenet.spec import ModelSpec

from . import netgraph
from .netgraph import ACTIVATIONS, MERGES, NotRebuilt, activation, merge, output_kind, to_probabilities, weight

UNIT_ROUNDOFF = 2.0**-24  # float32: a correctly rounded value is within this relative distance
# Probabilities below float32's smallest normal number are flushed or denormal in any engine.
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def _exact_activation(layer) -> bool:
    a = layer
    plain_relu = a.activation == "relu" and a.alpha == 0 and a.threshold == 0
    return a.activation == "linear" or plain_relu


# The record kinds evaluated here: the rebuilt contenders' (netgraph.py) and Permute, which an
# ONNX file's Transposes become; a model with another raises NotRebuilt (no float64 column).
KINDS = (*netgraph.KINDS, "permute")


class _Graph:
    """The float64 graph of a spec, recording per layer the tensor float32 rounds (the sums
    before the activation, then the activation's output where it rounds) and the magnitude
    of its terms. Tensors keep the layout the core infers for each layer (an ONNX file's
    images channels first); the image operations run channels last inside."""

    def __init__(self, spec: ModelSpec):
        import tensorflow as tf

        import lenet

        self.tf = tf
        self.tape: Any = None
        self.records: list[tuple[Any, Any]] = []
        self.ops = type(
            "Ops",
            (),
            dict(
                relu=staticmethod(tf.nn.relu),
                where=staticmethod(tf.where),
                minimum=staticmethod(tf.minimum),
                maximum=staticmethod(tf.maximum),
                exp=staticmethod(tf.exp),
                tanh=staticmethod(tf.math.tanh),
                sigmoid=staticmethod(tf.math.sigmoid),
                erf=staticmethod(tf.math.erf),
                softplus=staticmethod(tf.nn.softplus),
                abs=staticmethod(tf.abs),
                softmax=staticmethod(tf.nn.softmax),
                sum=staticmethod(lambda y: tf.reduce_sum(y, axis=-1, keepdims=True)),
            ),
        )
        net = lenet.Model(spec).network
        self.channels_first = net.channels_first
        shapes = [tuple(row[2]) for row in net.layers()]
        self.steps = []
        for i, layer in enumerate(spec.layers):
            what = None
            if layer.kind not in KINDS:
                what = layer.kind
            elif layer.activation not in ACTIVATIONS:
                what = f"{layer.kind}, activation {layer.activation}"
            elif layer.kind == "conv2d" and layer.groups != 1:
                what = "grouped conv2d"
            elif layer.kind in ("softmax", "log_softmax") and list(layer.axes) not in ([-1], [len(shapes[i])]):
                what = f"{layer.kind} on axis {list(layer.axes)}"
            if what:
                raise NotRebuilt(f"no float64 evaluation of layer {layer.name!r} ({what})")
            self.steps.append((list(layer.inputs), self._node(layer, shapes[i])))
        self.kind = output_kind(spec)

    def const(self, v):
        return self.tf.constant(np.asarray(v, np.float64), dtype=self.tf.float64)

    def _record(self, z, magnitude) -> None:
        self.tape.watch(z)
        self.records.append((z, magnitude))

    def _channel_axis(self, rank: int, axes) -> int:
        """The axis a per-channel vector runs along on a tensor of ``rank`` (batch counted)."""
        if axes:
            return axes[0] if axes[0] >= 0 else rank + axes[0]
        return 1 if self.channels_first and rank == 4 else rank - 1

    def _image(self, f):
        """f (channels last) on the layer's tensors as the core holds them."""
        tf = self.tf
        if not self.channels_first:
            return f
        return lambda x: tf.transpose(f(tf.transpose(x, [0, 2, 3, 1])), [0, 3, 1, 2])

    def _node(self, layer, out: tuple):
        tf, k, c = self.tf, layer.kind, self.const
        pad = "SAME" if layer.same_padding else "VALID"
        kernel, bias = weight(layer, "kernel"), weight(layer, "bias")
        w = c(kernel) if kernel is not None else None
        wabs = c(np.abs(kernel.astype(np.float64))) if kernel is not None else None
        image = self._image
        magnitude_of = None  # (inputs) -> sum |t_i| of each output, for the sums that round

        if k == "conv2d":

            def nhwc(x, w=w):  # tf.nn.convolution dilates through space_to_batch, whose gradient the CPU has
                return tf.nn.convolution(x, w, strides=layer.strides, padding=pad, dilations=layer.dilation)

            f = image(nhwc)
            magnitude_of = image(lambda x: nhwc(tf.abs(x), wabs))  # noqa: E731
        elif k == "dense":

            def f(x, w=w):
                return tf.tensordot(x, w, axes=1)

            magnitude_of = lambda x: f(tf.abs(x), wabs)  # noqa: E731
        elif k in ("avg_pool2d", "global_avg_pool2d"):
            if k == "avg_pool2d":  # 'SAME' averages real pixels only, like Keras
                f = image(lambda x: tf.nn.avg_pool2d(x, ksize=layer.kernel, strides=layer.strides, padding=pad))  # noqa: E731
            else:
                axes = [2, 3] if self.channels_first else [1, 2]
                f = lambda x: tf.reduce_mean(x, axis=axes, keepdims=layer.keepdims)  # noqa: E731
            magnitude_of = f
        elif k == "max_pool2d":
            f = image(lambda x: tf.nn.max_pool2d(x, ksize=layer.kernel, strides=layer.strides, padding=pad))  # noqa: E731
        elif k == "global_max_pool2d":
            axes = [2, 3] if self.channels_first else [1, 2]
            f = lambda x: tf.reduce_max(x, axis=axes, keepdims=layer.keepdims)  # noqa: E731
        elif k == "zero_pad2d":
            t, bo, le, r = layer.pad
            f = image(lambda x: tf.pad(x, [[0, 0], [t, bo], [le, r], [0, 0]]))  # noqa: E731
        elif k in ("flatten", "reshape"):
            f = lambda x: tf.reshape(x, [-1, *out])  # noqa: E731
        elif k == "permute":
            f = lambda x: tf.transpose(x, [0, *layer.axes])  # noqa: E731
        elif k == "rescaling":
            s, o = layer.scale, layer.offset
            f = lambda x: x * s + o  # noqa: E731
            magnitude_of = lambda x: tf.abs(x) * abs(s) + abs(o)  # noqa: E731
        elif k == "batch_norm":
            # x * s + (beta - mean * s), s = gamma / sqrt(var + eps): as TensorFlow and lenet compute it
            mean, var = (weight(layer, n).astype(np.float64) for n in ("moving_mean", "moving_variance"))
            gamma, beta = weight(layer, "gamma"), weight(layer, "beta")
            sc = (1.0 if gamma is None else gamma.astype(np.float64)) / np.sqrt(var + layer.epsilon)
            shift = (0.0 if beta is None else beta.astype(np.float64)) - mean * sc
            shift_abs = np.abs(mean * sc) + (0.0 if beta is None else np.abs(beta.astype(np.float64)))

            def along(v, x):  # a per-channel vector shaped to broadcast on x
                shape = [1] * len(x.shape)
                shape[self._channel_axis(len(x.shape), list(layer.axes))] = -1
                return c(np.reshape(v, shape))

            f = lambda x: x * along(sc, x) + along(shift, x)  # noqa: E731
            magnitude_of = lambda x: tf.abs(x) * along(np.abs(sc), x) + along(shift_abs, x)  # noqa: E731
        elif k == "concatenate":
            f = lambda *xs: tf.concat(xs, axis=self._channel_axis(len(xs[0].shape), list(layer.axes)))  # noqa: E731
        elif k in MERGES:
            f = merge(k, self.ops)
            if k in ("add", "average"):  # sums of their inputs
                magnitude_of = lambda *xs: f(*[tf.abs(v) for v in xs])  # noqa: E731
            elif k == "subtract":
                magnitude_of = lambda a, b: tf.abs(a) + tf.abs(b)  # noqa: E731
            elif k == "multiply":  # a product rounds once, at its size
                magnitude_of = lambda *xs: tf.abs(f(*xs))  # noqa: E731
        elif k == "softmax":  # the record's activation is the softmax
            f = (lambda x: x) if layer.activation == "softmax" else tf.nn.softmax
            magnitude_of = lambda x: tf.abs(f(x))  # noqa: E731
        elif k == "log_softmax":
            f = tf.nn.log_softmax
            magnitude_of = lambda x: tf.abs(f(x))  # noqa: E731
        else:  # an activation record: only its activation
            f = lambda x: x  # noqa: E731
        act = activation(layer, self.ops)
        b = c(bias) if bias is not None else None
        babs = c(np.abs(bias.astype(np.float64))) if bias is not None else None

        def add_bias(z):  # per output channel
            if not self.channels_first or len(z.shape) != 4:
                return z + b, babs
            return z + tf.reshape(b, [-1, 1, 1]), tf.reshape(babs, [-1, 1, 1])

        def run(*xs):
            z = f(*xs)
            magnitude = magnitude_of(*xs) if magnitude_of is not None else None
            if b is not None:
                z, terms = add_bias(z)
                magnitude = magnitude + terms
            if magnitude is not None:
                self._record(z, magnitude)
            if act is None:
                return z
            y = act(z)
            if not _exact_activation(layer):
                self._record(y, tf.abs(y))
            return y

        return run

    def forward(self, x):
        values = {-1: x}
        for i, (inputs, fn) in enumerate(self.steps):
            values[i] = fn(*[values[j] for j in inputs])
        return values[len(self.steps) - 1]

    def evaluate(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        tf = self.tf
        self.records = []
        with tf.GradientTape(persistent=True) as tape:
            self.tape = tape
            t = tf.constant(np.asarray(x, np.float64))
            y = self.forward(t)
            last = to_probabilities(self.kind, self.ops)
            p = y if last is None else last(y)
            if self.kind == "log_softmax":
                p = tf.exp(y)
            if self.kind != "softmax":  # predict_proba's conversion, rounded once at the probability's size
                self._record(p, tf.abs(p))
            # The samples are independent (inference), so the slope of a column's sum is each sample's own.
            columns = [tf.reduce_sum(p[:, j]) for j in range(p.shape[1])]
        exact = np.asarray(p, np.float64)
        squares = np.zeros(exact.shape)
        for j, column in enumerate(columns):
            slopes = tape.gradient(column, [z for z, _ in self.records])
            for (_, magnitude), slope in zip(self.records, slopes):
                if slope is not None:
                    v = np.abs(np.asarray(slope)) * np.asarray(magnitude)
                    squares[:, j] += np.sum(v.reshape(len(v), -1) ** 2, axis=1)
        self.tape, self.records = None, []
        return exact, UNIT_ROUNDOFF * np.sqrt(squares) + FLOAT32_TINY


# What one chunk of rows may hold in float64 (every layer's output and its slope kept for the
# gradients): a 224x224x3 model's chunk is a few rows, a LeNet's 256.
CHUNK_BYTES = 512 << 20


def float64_reference(spec: ModelSpec, x: np.ndarray, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(exact, sigma): the model's probabilities (as predict_proba converts its outputs) on x
    computed in float64, and per probability the scale of float32's rounding error (the
    module's docstring), ``chunk`` rows at a time at most (fewer within CHUNK_BYTES). Raises
    netgraph.NotRebuilt for a layer the walk has no rebuild of. Needs TensorFlow."""
    import lenet

    from .workload import activation_floats

    _, floats = activation_floats(lenet.Model(spec))
    chunk = max(1, min(chunk, CHUNK_BYTES // (3 * 8 * floats)))
    g = _Graph(spec)
    parts = [g.evaluate(x[i : i + chunk]) for i in range(0, len(x), chunk)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def distance(answer: Any, exact: Optional[np.ndarray], sigma: Optional[np.ndarray]) -> dict:
    """An answer's distance from the exact probabilities: the largest |difference| and, in units
    of sigma, its root mean square and largest value over every sample and class (None where
    there is no reference, or the answer's shape is not the reference's)."""
    none = {"f64_max_abs": None, "f64_rms_units": None, "f64_max_units": None}
    if exact is None:
        return none
    answer = np.asarray(answer, np.float64)
    if answer.shape != exact.shape:
        return none
    units = np.abs(answer - exact) / sigma
    return {
        "f64_max_abs": float(np.max(np.abs(answer - exact))),
        "f64_rms_units": float(np.sqrt(np.mean(units**2))),
        "f64_max_units": float(np.max(units)),
    }


# The precision contract (docs/how-it-works.md#precision): an engine's answers are no further from
# the float64 ones than a reference float32 engine's (Keras for a Keras file, ONNX Runtime for an
# ONNX one) by more than CONTRACT_RMS in root mean square and CONTRACT_MAX at the largest, in
# rounding units; or, where the reference lands nearer than rounding every sum once predicts,
# within that scale itself (FLOOR_RMS, FLOOR_MAX: float32 engines land at 0.2-0.8 / 1-5).
CONTRACT_RMS, CONTRACT_MAX = 1.5, 2.0
FLOOR_RMS, FLOOR_MAX = 1.0, 8.0


def within_contract(d: dict, reference: dict) -> bool:
    """Whether ``distance`` d keeps the contract against the reference engine's distance."""
    rms_ok = d["f64_rms_units"] <= max(CONTRACT_RMS * reference["f64_rms_units"], FLOOR_RMS)
    max_ok = d["f64_max_units"] <= max(CONTRACT_MAX * reference["f64_max_units"], FLOOR_MAX)
    return rms_ok and max_ok


def float32_probabilities(y: Any, kind: str) -> np.ndarray:
    """A model's outputs ``y`` of ``kind`` (output_kind) made probabilities in float32, as a
    float32 engine makes them (predict_proba's rule): a softmax as it is, log-probabilities
    exponentiated, sigmoids over their sum, anything else softmaxed. Converting a reference
    engine's logits in float64 instead would hand it an exact softmax that lenet's own float32
    one is then compared with."""
    y = np.asarray(y, np.float32).reshape(len(y), -1)
    if kind == "softmax":
        return y
    if kind == "log_softmax":
        return np.exp(y)
    if kind == "sigmoid":
        return y / y.sum(axis=1, keepdims=True)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
