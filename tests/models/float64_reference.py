"""The judge when lenet and Keras disagree: the same Keras model evaluated in float64, and how far
from it float32 arithmetic may land.

``float64_twin`` rebuilds a Keras model (Keras 3 or tf_keras, Sequential or functional) from its own
config with every dtype float64 and gives it the model's weights, so Keras itself computes the same
graph on the same input without float32's rounding.

``float32_rounding`` says, per output, how far from that exact answer float32 arithmetic lands when
every sum of the graph is rounded once at the magnitude of its terms: each layer's output y_j =
sum_i t_i has a rounding error of about u * sum_i |t_i| (u = 2^-24, the unit roundoff; the sum of
|t_i| bounds every partial sum, in any order), and that error reaches the output through the
sensitivity |d out / d y_j|, which the float64 twin gives by automatic differentiation. Independent
roundings add in quadrature, so the scale of an output's error is

    sigma = u * sqrt(sum over layers and elements j of (|d out / d y_j| * sum_i |t_i|)^2)

(a softmax, or another function of one value, counts as a sum of one term). An error of sigma is
what rounding each sum once costs; an engine that sums in another order, in blocks or with fused
multiply-adds, lands within a small multiple of it, and one that sums large cancelling terms (a
batch norm folded badly) lands far outside. Measured this way (errors in units of sigma, root mean
square over 128 digits and 10 classes) on the zoo's batch-norm models: Keras 0.21-0.71 with oneDNN
on or off, lenet 0.31-0.72 on every kernel set; with every batch norm folded into the layer after
it (issue 35's defect) bn_trained's 0.33 becomes 1.3-1.4 computed by Keras, 0.80-1.44 by lenet.

Nothing here depends on how TensorFlow was built or which float32 kernels it picks: the twin's float64
arithmetic has no oneDNN path, and the magnitudes come from the graph, not from a float32 run.
``closeness`` reports Keras' own float32 distance beside lenet's, for information.
``python tools/precision/float64.py`` prints the table for the zoo's batch-norm models or any file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras_fixtures import distribution, keras_predict

UNIT_ROUNDOFF = 2.0**-24  # float32: a correctly rounded value is within this relative distance
# Probabilities below float32's smallest normal number are flushed or denormal in any engine.
FLOAT32_TINY = float(np.finfo(np.float32).tiny)


def _float64_config(c: Any) -> Any:
    if isinstance(c, dict):
        return {k: ("float64" if k == "dtype" and v is not None else _float64_config(v)) for k, v in c.items()}
    if isinstance(c, list):
        return [_float64_config(v) for v in c]
    return c


def float64_twin(model):
    """The model rebuilt with float64 weights and arithmetic (its layers' dtype policies)."""
    twin = type(model).from_config(_float64_config(model.get_config()))
    twin.set_weights([np.asarray(w, np.float64) for w in model.get_weights()])
    return twin


def float64_predict(model, x: np.ndarray) -> np.ndarray:
    twin = float64_twin(model)
    y = twin(np.asarray(x, np.float64), training=False)
    y = np.asarray(y.numpy() if hasattr(y, "numpy") else y)
    assert y.dtype == np.float64, f"the twin computed in {y.dtype}"
    return y


# Layers whose outputs are their inputs moved, copied or selected: no rounding of their own.
_EXACT = {
    "InputLayer",
    "Flatten",
    "Reshape",
    "Permute",
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "GaussianNoise",
    "GaussianDropout",
    "ZeroPadding1D",
    "ZeroPadding2D",
    "Cropping1D",
    "Cropping2D",
    "Concatenate",
    "MaxPooling1D",
    "MaxPooling2D",
    "GlobalMaxPooling1D",
    "GlobalMaxPooling2D",
    "ReLU",
}
# Sums of their inputs with non-negative weights and no weights of their own: the layer on |x|.
_AVERAGES = {"AveragePooling1D", "AveragePooling2D", "GlobalAveragePooling1D", "GlobalAveragePooling2D"}
# Sums of their inputs' products with their weights: the layer with |weights| on |x|.
_WEIGHTED_SUMS = {"Dense", "Conv1D", "Conv2D", "DepthwiseConv2D"}
_MERGES = {"Add", "Subtract", "Average"}


def _activation_name(f) -> str:
    return getattr(f, "__name__", type(f).__name__).lower()


def _exact_activation(f) -> bool:
    return f is None or _activation_name(f) in ("relu", "linear")


class _RoundingProbe:
    """Wraps each layer of a float64 twin to record, per call, the tensor that float32 would
    round (the sums before a fused activation, so that the activation's own slope applies)
    and the magnitude of the terms it sums."""

    def __init__(self, twin, tape):
        self.tape = tape
        self.records: list[tuple[str, Any, Any]] = []  # (layer name, watched tensor, magnitude)
        for layer in twin.layers:
            self._wrap(layer)

    def _wrap(self, layer) -> None:
        kind = type(layer).__name__
        if kind in ("Sequential", "Functional", "Model"):
            raise NotImplementedError(f"{layer.name}: a nested model (no float32 rounding model for it)")
        call = layer.call

        def probe(*args, **kwargs):
            import tensorflow as tf

            inputs = args[0] if args else kwargs["inputs"]
            xs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
            act = getattr(layer, "activation", None) if kind in _WEIGHTED_SUMS else None
            if act is not None:
                layer.activation = None  # the sums, before the activation
                try:
                    z = call(*args, **kwargs)
                finally:
                    layer.activation = act
            else:
                z = call(*args, **kwargs)
            self.tape.watch(z)
            magnitude = self._magnitude(layer, kind, xs, z, call)
            if magnitude is not None:
                self.records.append((layer.name, z, magnitude))
            if act is None:
                return z
            y = act(z)
            if not _exact_activation(act):
                self.tape.watch(y)
                self.records.append((f"{layer.name}:{_activation_name(act)}", y, tf.abs(y)))
            return y

        layer.call = probe

    @staticmethod
    def _magnitude(layer, kind, xs, z, call):
        """sum |t_i| for each element of z (None: z is exact)."""
        import tensorflow as tf

        if kind in _EXACT or (kind == "Activation" and _exact_activation(layer.activation)):
            return None
        if kind in _WEIGHTED_SUMS:
            config = dict(layer.get_config(), activation="linear", name=f"{layer.name}_magnitude")
            twin = type(layer).from_config(config)
            twin.build(xs[0].shape)
            twin.set_weights([np.abs(w) for w in layer.get_weights()])
            return twin(tf.abs(xs[0]))
        if kind in _AVERAGES:
            return call(tf.abs(xs[0]))
        if kind in _MERGES:
            return tf.add_n([tf.abs(t) for t in xs])
        if kind == "BatchNormalization":
            # x * s + (beta - mean * s) with s = gamma / sqrt(var + eps), as TensorFlow and lenet compute it
            axes = [layer.axis] if isinstance(layer.axis, int) else list(layer.axis)
            shape = [1] * len(xs[0].shape)
            for a in axes:
                shape[a] = xs[0].shape[a]
            var = np.asarray(layer.moving_variance, np.float64)
            s = 1.0 / np.sqrt(var + layer.epsilon)
            if layer.gamma is not None:
                s = s * np.asarray(layer.gamma, np.float64)
            shift = np.abs(np.asarray(layer.moving_mean, np.float64) * s)
            if layer.beta is not None:
                shift = shift + np.abs(np.asarray(layer.beta, np.float64))
            return tf.abs(xs[0]) * np.abs(s).reshape(shape) + shift.reshape(shape)
        if kind == "Rescaling":
            return tf.abs(xs[0]) * abs(float(layer.scale)) + abs(float(layer.offset))
        if kind in ("Activation", "Softmax", "LeakyReLU", "ELU"):
            return tf.abs(z)  # a function of one value: rounded once at its size
        raise NotImplementedError(f"{layer.name}: no float32 rounding model for {kind} layers")


def _probabilities(y, kind: str):
    """keras_fixtures.distribution in TensorFlow, so that its slopes apply too."""
    import tensorflow as tf

    if kind == "softmax":
        return y
    if kind == "log_softmax":
        return tf.exp(y)
    if kind == "sigmoid":
        return y / tf.reduce_sum(y, axis=1, keepdims=True)
    return tf.nn.softmax(y, axis=1)


def float32_rounding(model, x: np.ndarray, kind: str = "softmax") -> tuple[np.ndarray, np.ndarray]:
    """(exact, sigma): the model's probabilities (keras_fixtures.distribution of its outputs of
    `kind`) computed in float64, and per probability the scale of float32's rounding error
    (the module's docstring says how). Needs TensorFlow (Keras 3 on its backend, or tf_keras)."""
    import tensorflow as tf

    twin = float64_twin(model)
    tape = tf.GradientTape(persistent=True)
    probe = _RoundingProbe(twin, tape)
    with tape:
        t = tf.constant(np.asarray(x, np.float64))
        tape.watch(t)
        p = _probabilities(twin(t, training=False), kind)
        # The samples are independent (inference), so the slope of a column's sum is every sample's own.
        columns = [tf.reduce_sum(p[:, k]) for k in range(p.shape[1])]
    exact = np.asarray(p, np.float64)
    if kind != "softmax":  # predict_proba's conversion, rounded once at the probability's size
        probe.records.append(("probabilities", p, tf.abs(p)))
    squares = np.zeros(exact.shape)
    for k, column in enumerate(columns):
        slopes = tape.gradient(column, [r[1] for r in probe.records])
        for (_, _, magnitude), slope in zip(probe.records, slopes):
            if slope is not None:
                v = np.abs(np.asarray(slope)) * np.asarray(magnitude)
                squares[:, k] += np.sum(v.reshape(len(v), -1) ** 2, axis=1)
    sigma = UNIT_ROUNDOFF * np.sqrt(squares) + FLOAT32_TINY
    return exact, sigma


def closeness(model, engine, x: np.ndarray, rounding: tuple | None = None) -> dict:
    """How far lenet's and Keras' float32 probabilities (predict_proba's rule on each one's raw
    outputs) are from each other and from the float64 evaluation: the largest |difference|, and
    each one's error in units of float32's rounding scale (float32_rounding's sigma): its root
    mean square and its largest value over all samples and classes. rounding: float32_rounding's
    answer for (model, x), when the caller has it already. A model with a layer the rounding scale
    has no model for gets the distances only, and "no_rounding_scale" saying why."""
    lenet = engine.predict_proba(x).astype(np.float64)  # lenet's own conversion of its outputs
    kind = engine.model.network.output_kind
    keras32 = distribution(keras_predict(model, x), kind)
    try:
        exact, sigma = rounding if rounding is not None else float32_rounding(model, x, kind)
    except NotImplementedError as e:
        exact, sigma = distribution(float64_predict(model, x), kind), None
        why = str(e)
    c = {
        "lenet_vs_keras": float(np.abs(lenet - keras32).max()),
        "lenet_vs_float64": float(np.abs(lenet - exact).max()),
        "keras_vs_float64": float(np.abs(keras32 - exact).max()),
    }
    if sigma is None:
        return dict(c, no_rounding_scale=why)
    for who, answer in (("lenet", lenet), ("keras", keras32)):
        units = np.abs(answer - exact) / sigma
        c[f"{who}_rounding_rms"] = float(np.sqrt(np.mean(units**2)))
        c[f"{who}_rounding_max"] = float(units.max())
    return c
