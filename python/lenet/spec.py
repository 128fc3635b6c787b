"""What the loader (lenet.keras) hands to the core: the model's layer records,
with their weights, and what the file says about the model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass
class ModelSpec:
    # lenet._core.LayerSpec records (csrc/net/layer.h), each after the layers it reads;
    # the last one is the model's output.
    layers: list
    input_shape: tuple                 # Keras' per-sample input shape, e.g. (28, 28, 1), (784,), (1, 28, 28)
    # Pixel scale the model was trained with (x * input_scale), from the file's
    # ``lenet_input_scale`` attribute; None when the file does not say.
    input_scale: Optional[float] = None
    name: str = ""                     # the Keras model name
    source: str = ""                   # the file it came from, for messages
    keras_version: str = ""
    extra: dict = field(default_factory=dict)
