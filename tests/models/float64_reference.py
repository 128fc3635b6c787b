"""The judge when lenet and Keras disagree: the same Keras model evaluated in float64.

``float64_twin`` rebuilds a Keras model (Keras 3 or tf_keras, Sequential or functional) from
its own config with every dtype float64 and gives it the model's weights, so Keras itself
computes the same graph on the same input without float32's rounding. ``closeness`` then says,
for one engine and one input, how far lenet's and Keras' float32 probabilities are from it:
where they differ from each other, which one is closer to the exact answer (issue 43).
``python tools/precision/float64.py`` prints it for the zoo's batch-norm models.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from keras_fixtures import distribution, keras_predict


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


def closeness(model, engine, x: np.ndarray) -> dict:
    """Largest |difference| in probabilities (predict_proba's rule, on the raw outputs of each):
    lenet against Keras, and each against the float64 evaluation."""
    convert = engine.predict_proba  # lenet's own conversion of its outputs
    lenet = convert(x).astype(np.float64)
    keras32 = keras_predict(model, x).astype(np.float64)
    exact = float64_predict(model, x)
    kind = engine.model.network.output_kind
    k32, k64 = distribution(keras32, kind), distribution(exact, kind)
    return {
        "lenet_vs_keras": float(np.abs(lenet - k32).max()),
        "lenet_vs_float64": float(np.abs(lenet - k64).max()),
        "keras_vs_float64": float(np.abs(k32 - k64).max()),
    }
