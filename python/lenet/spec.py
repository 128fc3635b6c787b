"""What the loader (lenet.keras) hands to the core: the model's layer records,
with their weights, and what the file says about the model."""

from __future__ import annotations

import copyreg
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ._native import _core


@dataclass
class ModelSpec:
    # lenet._core.LayerSpec records (csrc/net/layer.h), each after the layers it reads;
    # the last one is the model's output.
    layers: list
    input_shape: tuple  # Keras' per-sample input shape, e.g. (28, 28, 1), (784,), (1, 28, 28)
    # Pixel scale the model was trained with (x * input_scale), from the file's
    # ``lenet_input_scale`` attribute; None when the file does not say.
    input_scale: Optional[float] = None
    name: str = ""  # the Keras model name
    source: str = ""  # the file it came from, for messages
    keras_version: str = ""
    extra: dict = field(default_factory=dict)


# A layer record pickles as its fields and weights (the field list is the record's own,
# LENET_LAYER_FIELDS: a new field needs nothing here), so a ModelSpec, a Model and an
# Engine can be sent to other processes.
def _layer_record(fields: dict, weights: dict) -> "_core.LayerSpec":
    record = _core.LayerSpec()
    for name, value in fields.items():
        setattr(record, name, value)
    for name, value in weights.items():
        record.set_weight(name, value)
    return record


def _reduce_layer_record(record: "_core.LayerSpec"):
    fields = {name: getattr(record, name) for name, _, _ in _core.LayerSpec.fields()}
    weights = {name: np.array(record.weight(name)) for name in record.weight_names()}
    return _layer_record, (fields, weights)


copyreg.pickle(_core.LayerSpec, _reduce_layer_record)
