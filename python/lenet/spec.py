"""The normalized model description handed from the file loader to the C++ core.

The loader (``model_file.py``) turns any supported Keras file into a ``ModelSpec``:
a single chain of ``LayerSpec`` in execution order, with Keras-layout weights.
Layers that do nothing at inference (InputLayer, Dropout) are already dropped.
The core (``_core.Network``) checks shapes and converts weight layouts; nothing
here does numerics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import numpy as np

LayerKind = Literal[
    "conv2d",      # kernel, strides, padding, filters, activation, weights
    "max_pool2d",  # kernel (pool_size), strides, padding
    "avg_pool2d",  # kernel (pool_size), strides, padding ('same' averages real pixels only)
    "zero_pad2d",  # pad = (top, bottom, left, right)
    "flatten",     # flatten_order
    "dense",       # units, activation, weights
    "activation",  # activation
    "rescaling",   # scale, offset: y = x * scale + offset
]

Activation = Literal["linear", "relu", "tanh", "sigmoid", "softmax"]


@dataclass
class LayerSpec:
    kind: LayerKind
    name: str                                  # the Keras layer name, for messages
    keras_class: str = ""                      # the Keras class name, for messages
    kernel: tuple[int, int] = (1, 1)           # conv kernel_size or pool_size (h, w)
    strides: tuple[int, int] = (1, 1)
    padding: Literal["valid", "same"] = "valid"
    filters: int = 0                           # conv2d: output channels
    units: int = 0                             # dense: outputs
    activation: Activation = "linear"
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)   # zero_pad2d: top, bottom, left, right
    scale: float = 1.0                         # rescaling
    offset: float = 0.0
    # flatten: the order in which the file stores the next Dense layer's input rows.
    # "hwc" (Keras channels_last, or channels_first with Flatten(data_format=channels_first))
    # or "chw" (channels_first convs flattened as NCHW). KERAS-H5.md section 6.
    flatten_order: Literal["hwc", "chw"] = "hwc"
    # Keras layouts, float32, C-contiguous: conv2d kernel (kh, kw, in, out); dense kernel (in, out);
    # bias (out,). bias is None when use_bias is false.
    weights: Optional[np.ndarray] = None
    bias: Optional[np.ndarray] = None


@dataclass
class ModelSpec:
    layers: list[LayerSpec]
    input_shape: tuple[int, int, int]          # (H, W, C) per image, whatever the data format
    data_format: Literal["channels_last", "channels_first"] = "channels_last"
    # Pixel scale the model was trained with (x * input_scale), from the file's
    # ``lenet_input_scale`` attribute; None when the file does not say.
    input_scale: Optional[float] = None
    name: str = ""                             # the Keras model name
    source: str = ""                           # the file it came from, for messages
    keras_version: str = ""
    extra: dict = field(default_factory=dict)
