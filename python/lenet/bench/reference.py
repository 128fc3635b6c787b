"""What every contender's predictions are checked against: Keras' ``model.predict`` on the
TensorFlow backend, else Keras on JAX in a process of its own, else this engine's CPU
backend (itself checked against Keras by the tests)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import numpy as np

from . import contenders
from .contenders import Ctx, keras_probability_model

# The oracle every contender's probabilities are checked against: Keras' model.predict on
# the TensorFlow backend; where TensorFlow is missing (the GPU machine), Keras on the JAX
# backend, in a process of its own on the CPU (float32 throughout); else this engine's CPU
# backend, itself checked against Keras by the tests.
REFERENCES = {
    "keras-predict": "Keras 3 model.predict, TensorFlow backend",
    "onnxruntime-file": "ONNX Runtime (CPU) on the ONNX file itself",
    "keras-jax": "Keras 3 model.predict, JAX backend on the CPU, in a process of its own",
    "lenet-cpu": "this engine's CPU backend (no Keras here)",
}
KERAS_JAX_REFERENCE_ENV = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}


def choose_reference() -> tuple[str, str]:
    """(reference name, why the better ones cannot be used: "" for Keras on TensorFlow)."""
    failed = contenders.setup(["keras-predict"]).get("keras-predict")
    if failed is None:
        return "keras-predict", ""
    why = [f"Keras on TensorFlow: {failed}"]
    missing = [m for m in ("keras", "jax") if importlib.util.find_spec(m) is None]
    if not missing:
        return "keras-jax", why[0]
    why.append(f"Keras on JAX: {', '.join(missing)} not installed")
    return "lenet-cpu", "; ".join(why)


def reference(ctx: Ctx, x: np.ndarray, name: str = "keras-predict", tmp: Optional[Path] = None) -> np.ndarray:
    """The reference's probabilities on the whole array (``name`` from ``REFERENCES``)."""
    if name == "keras-predict":
        return keras_probability_model(ctx).predict(x, batch_size=256, verbose=0)
    if name == "keras-jax":
        from .child import Remote

        with Remote("keras-jax-reference", ctx, x, [], tmp, KERAS_JAX_REFERENCE_ENV) as worker:
            return worker(x)
    if name == "lenet-cpu":
        import lenet

        return lenet.Engine(ctx.weights, device="cpu", threads=ctx.threads).predict_proba(x)
    if name == "onnxruntime-file":
        return contenders.onnx_file_session(ctx)(x)
    raise ValueError(f"unknown reference {name!r}")
