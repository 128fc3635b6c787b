"""Keras layer configs -> the fields of the core's layer records.

One converter per Keras class (``CONVERTERS``): it reads the class's config keys,
as Keras 1, 2 (tf.keras, tf_keras) and 3 write them, and returns the record's
fields (``kind`` plus options: see csrc/net/layer.h), or ``IDENTITY`` for a
layer that does nothing at inference (Dropout, noise, augmentation). What a
layer computes and what shapes it gives is the core's business, not this
module's: it only translates names and checks that values are of the right type.

Keras version differences handled here (the writer's version decides: the model
was trained with its semantics):
* ``hard_sigmoid``: clip(x / 6 + 0.5, 0, 1) in Keras 3, clip(0.2 x + 0.5, 0, 1)
  in Keras 1 and 2.
* ``leaky_relu`` as an activation name: negative slope 0.2 (Keras 3; Keras 2
  has no such name). The LeakyReLU layer: ``alpha`` (Keras 1-2) or
  ``negative_slope`` (Keras 3), default 0.3.
* Keras 1 config keys (``nb_filter``, ``border_mode``, ``subsample``,
  ``dim_ordering``, ``output_dim``, ...): see ``keras1_config``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import ModelFileError, UnsupportedModelError
from .values import axes, data_format, flag, integer, number, padding, pair, scalar, side_pair, sides, single

IDENTITY = "identity"

# Layers that compute nothing at inference: noise, dropout, augmentation, regularization.
IDENTITIES = (
    "Dropout",
    "SpatialDropout1D",
    "SpatialDropout2D",
    "SpatialDropout3D",
    "GaussianNoise",
    "GaussianDropout",
    "AlphaDropout",
    "ActivityRegularization",
    "Identity",
    "RandomFlip",
    "RandomRotation",
    "RandomZoom",
    "RandomTranslation",
    "RandomContrast",
    "RandomBrightness",
    "RandomGrayscale",
    "RandomHue",
    "RandomSaturation",
    "RandomSharpness",
    "RandomShear",
    "RandomPosterization",
    "RandomInvert",
    "RandomColorJitter",
    "RandomColorDegeneration",
    "RandomErasing",
    "RandomGaussianBlur",
    "RandomPerspective",
    "RandomElasticTransform",
    "Solarization",
    "Equalization",
    "AugMix",
    "RandAugment",
    "MixUp",
    "CutMix",
)
# Other names Keras has written for the same classes.
ALIASES = {
    "MaxPool2D": "MaxPooling2D",
    "AvgPool2D": "AveragePooling2D",
    "Convolution2D": "Conv2D",
    "GlobalAvgPool2D": "GlobalAveragePooling2D",
    "GlobalMaxPool2D": "GlobalMaxPooling2D",
    "SeparableConvolution2D": "SeparableConv2D",
    "AtrousConvolution2D": "Conv2D",
    "AtrousConv2D": "Conv2D",
    "Convolution1D": "Conv1D",
    "MaxPool1D": "MaxPooling1D",
    "AvgPool1D": "AveragePooling1D",
    "GlobalAvgPool1D": "GlobalAveragePooling1D",
    "GlobalMaxPool1D": "GlobalMaxPooling1D",
}
# Never run: they hold Python code (Lambda) or need machinery the engine does not have.
CODE_LAYERS = ("Lambda", "TFOpLambda", "SlicingOpLambda", "TorchModuleWrapper", "JaxLayer", "FlaxLayer", "TFSMLayer")


@dataclass(frozen=True)
class Writer:
    """What wrote the model: Keras' major version (1, 2 or 3)."""

    major: int = 3


# ---------------------------------------------------------------- activations

# Keras activation names -> (core activation, its parameters).
_ACTIVATIONS: dict[str, tuple[str, dict]] = {
    "linear": ("linear", {}),
    "relu": ("relu", {}),
    "relu6": ("relu", {"max_value": 6.0}),
    "elu": ("elu", {"alpha": 1.0}),
    "selu": ("selu", {}),
    "gelu": ("gelu", {}),
    "tanh": ("tanh", {}),
    "sigmoid": ("sigmoid", {}),
    "swish": ("swish", {}),
    "silu": ("swish", {}),
    "softplus": ("softplus", {}),
    "softsign": ("softsign", {}),
    "exponential": ("exponential", {}),
    "mish": ("mish", {}),
    "softmax": ("softmax", {}),
    "log_softmax": ("log_softmax", {}),
    "leaky_relu": ("relu", {"alpha": 0.2}),
}


def activation(v: Any, where: str, writer: Writer) -> dict:
    """The record fields of a Keras activation: a name, or a Keras 3 serialized
    function or layer."""
    if v is None:
        return {"activation": "linear"}
    name = v
    if isinstance(v, dict):
        cls, cfg = v.get("class_name"), v.get("config")
        if cls in ("ReLU", "LeakyReLU", "ELU", "Softmax", "Activation") and isinstance(cfg, dict):
            fields = CONVERTERS[cls](cfg, where, writer)
            fields.pop("kind", None)
            fields.pop("axes", None)
            return fields
        if cls == "function" or str(v.get("module", "")).startswith("keras.activations"):
            name = cfg if isinstance(cfg, str) else v.get("registered_name")
        else:
            raise UnsupportedModelError(f"{where}: activation {cls!r} is not supported")
    if not isinstance(name, str):
        raise ModelFileError(f"{where}: malformed activation {v!r}")
    if name in ("hard_sigmoid", "hard_silu", "hard_swish"):
        slope = 1.0 / 6.0 if writer.major >= 3 else 0.2
        return {"activation": "hard_sigmoid" if name == "hard_sigmoid" else "hard_swish", "alpha": slope, "beta": 0.5}
    if name not in _ACTIVATIONS:
        raise UnsupportedModelError(
            f"{where}: activation {name!r} is not supported (supported: "
            f"{', '.join(sorted(list(_ACTIVATIONS) + ['hard_sigmoid', 'hard_silu']))})"
        )
    core, params = _ACTIVATIONS[name]
    return {"activation": core, **params}


# ----------------------------------------------------------------- converters


def _conv(c: dict, w: str, writer: Writer) -> dict:
    if c.get("lora_rank"):
        raise UnsupportedModelError(f"{w}: LoRA weights (lora_rank={c['lora_rank']}) are not supported")
    return {
        "kernel": pair(c.get("kernel_size"), "kernel_size", w),
        "strides": pair(c.get("strides", 1), "strides", w),
        "dilation": pair(c.get("dilation_rate", 1), "dilation_rate", w),
        "same_padding": padding(c, w),
        "use_bias": flag(c.get("use_bias", True), "use_bias", w),
        "data_format": data_format(c, w),
        **activation(c.get("activation"), w, writer),
    }


def conv2d(c: dict, w: str, writer: Writer) -> dict:
    return {
        "kind": "conv2d",
        "filters": integer(c.get("filters"), "filters", w),
        "groups": integer(c.get("groups", 1), "groups", w),
        **_conv(c, w, writer),
    }


def depthwise_conv2d(c: dict, w: str, writer: Writer) -> dict:
    return {
        "kind": "depthwise_conv2d",
        "depth_multiplier": integer(c.get("depth_multiplier", 1), "depth_multiplier", w),
        **_conv(c, w, writer),
    }


def separable_conv2d(c: dict, w: str, writer: Writer) -> dict:
    return {
        "kind": "separable_conv2d",
        "filters": integer(c.get("filters"), "filters", w),
        "depth_multiplier": integer(c.get("depth_multiplier", 1), "depth_multiplier", w),
        **_conv(c, w, writer),
    }


def dense(c: dict, w: str, writer: Writer) -> dict:
    if c.get("lora_rank"):
        raise UnsupportedModelError(f"{w}: LoRA weights (lora_rank={c['lora_rank']}) are not supported")
    if c.get("quantization_config"):
        raise UnsupportedModelError(f"{w}: quantized weights are not supported")
    return {
        "kind": "dense",
        "units": integer(c.get("units"), "units", w),
        "use_bias": flag(c.get("use_bias", True), "use_bias", w),
        **activation(c.get("activation"), w, writer),
    }


def pool(kind: str) -> Callable[[dict, str, Writer], dict]:
    def convert(c: dict, w: str, writer: Writer) -> dict:
        size = pair(c.get("pool_size", 2), "pool_size", w)
        strides = c.get("strides")
        return {
            "kind": kind,
            "kernel": size,
            "strides": size if strides is None else pair(strides, "strides", w),
            "same_padding": padding(c, w),
            "data_format": data_format(c, w),
        }

    return convert


def global_pool(kind: str) -> Callable[[dict, str, Writer], dict]:
    def convert(c: dict, w: str, writer: Writer) -> dict:
        return {
            "kind": kind,
            "keepdims": flag(c.get("keepdims", False), "keepdims", w),
            "data_format": data_format(c, w),
        }

    return convert


def zero_pad2d(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "zero_pad2d", "pad": sides(c.get("padding", 1), "padding", w), "data_format": data_format(c, w)}


def crop2d(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "crop2d", "pad": sides(c.get("cropping", 0), "cropping", w), "data_format": data_format(c, w)}


def _interpolation(c: dict, w: str) -> str:
    i = c.get("interpolation", "bilinear")
    if not isinstance(i, str):
        raise ModelFileError(f"{w}: interpolation must be a string, found {i!r}")
    return i


def resizing(c: dict, w: str, writer: Writer) -> dict:
    if c.get("pad_to_aspect_ratio"):
        raise UnsupportedModelError(f"{w}: pad_to_aspect_ratio=True is not supported")
    return {
        "kind": "resizing",
        "size": (integer(c.get("height"), "height", w), integer(c.get("width"), "width", w)),
        "interpolation": _interpolation(c, w),
        "crop_to_aspect_ratio": flag(c.get("crop_to_aspect_ratio", False), "crop_to_aspect_ratio", w),
        "antialias": flag(c.get("antialias", False), "antialias", w),
        "data_format": data_format(c, w),
    }


def upsampling2d(c: dict, w: str, writer: Writer) -> dict:
    return {
        "kind": "upsampling2d",
        "size": pair(c.get("size", 2), "size", w),
        "interpolation": _interpolation({"interpolation": c.get("interpolation", "nearest")}, w),
        "data_format": data_format(c, w),
    }


def flatten(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "flatten", "data_format": data_format(c, w)}


def reshape(c: dict, w: str, writer: Writer) -> dict:
    t = c.get("target_shape")
    if not isinstance(t, (list, tuple)):
        raise ModelFileError(f"{w}: target_shape must be a list, found {t!r}")
    return {"kind": "reshape", "target_shape": [integer(v if v is not None else -1, "target_shape", w) for v in t]}


def permute(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "permute", "axes": axes(c.get("dims"), "dims", w)}


def activation_layer(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "activation", **activation(c.get("activation"), w, writer)}


def relu(c: dict, w: str, writer: Writer) -> dict:
    mv = c.get("max_value")
    return {
        "kind": "activation",
        "activation": "relu",
        "alpha": number(c.get("negative_slope") or 0.0, "negative_slope", w),
        "max_value": math.inf if mv is None else number(mv, "max_value", w),
        "threshold": number(c.get("threshold") or 0.0, "threshold", w),
    }


def leaky_relu(c: dict, w: str, writer: Writer) -> dict:
    slope = c.get("negative_slope", c.get("alpha", 0.3))
    return {"kind": "activation", "activation": "relu", "alpha": number(slope, "negative_slope", w)}


def elu(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "activation", "activation": "elu", "alpha": number(c.get("alpha", 1.0), "alpha", w)}


def thresholded_relu(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "activation", "activation": "relu", "threshold": number(c.get("theta", 1.0), "theta", w)}


def softmax(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "softmax", "activation": "softmax", "axes": axes(c.get("axis", -1), "axis", w)}


def prelu(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "prelu", "axes": axes(c.get("shared_axes"), "shared_axes", w)}


def batch_norm(c: dict, w: str, writer: Writer) -> dict:
    if c.get("renorm"):
        raise UnsupportedModelError(f"{w}: batch renormalization (renorm=True) is not supported")
    if c.get("mode", 0) != 0:
        raise UnsupportedModelError(
            f"{w}: BatchNormalization mode={c.get('mode')} (Keras 1) is not supported "
            "(only mode 0, which normalizes with the moving statistics at inference)"
        )
    return {
        "kind": "batch_norm",
        "axes": axes(c.get("axis", -1), "axis", w),
        "epsilon": number(c.get("epsilon", 1e-3), "epsilon", w),
        "bn_center": flag(c.get("center", True), "center", w),
        "bn_scale": flag(c.get("scale", True), "scale", w),
    }


def layer_norm(c: dict, w: str, writer: Writer) -> dict:
    if c.get("rms_scaling"):
        raise UnsupportedModelError(f"{w}: LayerNormalization(rms_scaling=True) is not supported")
    return {
        "kind": "layer_norm",
        "axes": axes(c.get("axis", -1), "axis", w),
        "epsilon": number(c.get("epsilon", 1e-3), "epsilon", w),
        "bn_center": flag(c.get("center", True), "center", w),
        "bn_scale": flag(c.get("scale", True), "scale", w),
    }


def rescaling(c: dict, w: str, writer: Writer) -> dict:
    return {
        "kind": "rescaling",
        "scale": scalar(c.get("scale", 1.0), "scale", w),
        "offset": scalar(c.get("offset", 0.0), "offset", w),
    }


def normalization(c: dict, w: str, writer: Writer) -> dict:
    if c.get("invert"):
        raise UnsupportedModelError(f"{w}: Normalization(invert=True) is not supported")
    out: dict = {"kind": "normalization", "axes": axes(c.get("axis", -1), "axis", w), "epsilon": 1e-7}
    mean, var = c.get("mean"), c.get("variance")
    if (mean is None) != (var is None):
        raise ModelFileError(f"{w}: mean and variance must be given together")
    if mean is not None:  # in the config, not the weights (Keras makes no variables for them)
        try:
            out["weights"] = {"mean": np.asarray(mean, dtype=np.float32), "variance": np.asarray(var, dtype=np.float32)}
        except (TypeError, ValueError) as e:
            raise ModelFileError(f"{w}: mean and variance must be numbers ({e})") from e
    return out


# 1-D layers on (steps, channels): records of height 1 (kernel (1, k), pad (0, 0, l, r)).


def _one_d(c: dict, w: str) -> None:
    if c.get("data_format") == "channels_first":
        raise UnsupportedModelError(f"{w}: a channels_first 1-D layer is not supported")
    if c.get("padding") == "causal":
        raise UnsupportedModelError(f"{w}: padding 'causal' is not supported (only 'valid' and 'same')")


def conv1d(c: dict, w: str, writer: Writer) -> dict:
    _one_d(c, w)
    if c.get("lora_rank"):
        raise UnsupportedModelError(f"{w}: LoRA weights (lora_rank={c['lora_rank']}) are not supported")
    return {
        "kind": "conv1d",
        "filters": integer(c.get("filters"), "filters", w),
        "groups": integer(c.get("groups", 1), "groups", w),
        "kernel": (1, single(c.get("kernel_size"), "kernel_size", w)),
        "strides": (1, single(c.get("strides", 1), "strides", w)),
        "dilation": (1, single(c.get("dilation_rate", 1), "dilation_rate", w)),
        "same_padding": padding(c, w),
        "use_bias": flag(c.get("use_bias", True), "use_bias", w),
        **activation(c.get("activation"), w, writer),
    }


def pool1d(kind: str) -> Callable[[dict, str, Writer], dict]:
    def convert(c: dict, w: str, writer: Writer) -> dict:
        _one_d(c, w)
        size = single(c.get("pool_size", 2), "pool_size", w)
        strides = c.get("strides")
        return {
            "kind": kind,
            "kernel": (1, size),
            "strides": (1, size if strides is None else single(strides, "strides", w)),
            "same_padding": padding(c, w),
        }

    return convert


def global_pool1d(kind: str) -> Callable[[dict, str, Writer], dict]:
    def convert(c: dict, w: str, writer: Writer) -> dict:
        _one_d(c, w)
        return {"kind": kind, "keepdims": flag(c.get("keepdims", False), "keepdims", w)}

    return convert


def zero_pad1d(c: dict, w: str, writer: Writer) -> dict:
    left, right = side_pair(c.get("padding", 1), "padding", w)
    return {"kind": "zero_pad1d", "pad": (0, 0, left, right)}


def crop1d(c: dict, w: str, writer: Writer) -> dict:
    left, right = side_pair(c.get("cropping", (1, 1)), "cropping", w)
    return {"kind": "crop1d", "pad": (0, 0, left, right)}


def upsampling1d(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "upsampling1d", "size": (1, single(c.get("size", 2), "size", w)), "interpolation": "nearest"}


def merge(kind: str) -> Callable[[dict, str, Writer], dict]:
    def convert(c: dict, w: str, writer: Writer) -> dict:
        return {"kind": kind}

    return convert


def concatenate(c: dict, w: str, writer: Writer) -> dict:
    return {"kind": "concatenate", "axes": axes(c.get("axis", -1), "axis", w)}


CONVERTERS: dict[str, Callable[[dict, str, Writer], dict]] = {
    "Conv2D": conv2d,
    "DepthwiseConv2D": depthwise_conv2d,
    "SeparableConv2D": separable_conv2d,
    "Dense": dense,
    "MaxPooling2D": pool("max_pool2d"),
    "AveragePooling2D": pool("avg_pool2d"),
    "GlobalMaxPooling2D": global_pool("global_max_pool2d"),
    "GlobalAveragePooling2D": global_pool("global_avg_pool2d"),
    "ZeroPadding2D": zero_pad2d,
    "Cropping2D": crop2d,
    "Resizing": resizing,
    "UpSampling2D": upsampling2d,
    "Flatten": flatten,
    "Reshape": reshape,
    "Permute": permute,
    "Activation": activation_layer,
    "ReLU": relu,
    "LeakyReLU": leaky_relu,
    "ELU": elu,
    "ThresholdedReLU": thresholded_relu,
    "Softmax": softmax,
    "PReLU": prelu,
    "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
    "Rescaling": rescaling,
    "Normalization": normalization,
    "Add": merge("add"),
    "Subtract": merge("subtract"),
    "Multiply": merge("multiply"),
    "Average": merge("average"),
    "Maximum": merge("maximum"),
    "Minimum": merge("minimum"),
    "Concatenate": concatenate,
    "Conv1D": conv1d,
    "MaxPooling1D": pool1d("max_pool1d"),
    "AveragePooling1D": pool1d("avg_pool1d"),
    "GlobalMaxPooling1D": global_pool1d("global_max_pool1d"),
    "GlobalAveragePooling1D": global_pool1d("global_avg_pool1d"),
    "ZeroPadding1D": zero_pad1d,
    "Cropping1D": crop1d,
    "UpSampling1D": upsampling1d,
}


def convert(cls: str, config: dict, where: str, writer: Writer) -> Any:
    """The record fields of one Keras layer, or IDENTITY. Raises
    UnsupportedModelError for a class the engine does not run."""
    if cls in IDENTITIES:
        return IDENTITY
    if cls == "Merge":
        raise UnsupportedModelError(
            f"{where}: Keras 1's Merge layer joins several inputs (or models); only models with one input are supported"
        )
    if cls in CODE_LAYERS:
        raise UnsupportedModelError(
            f"{where}: a {cls} layer holds Python code (or a foreign model), which lenet "
            "never runs; rebuild the model from standard Keras layers"
        )
    converter = CONVERTERS.get(cls)
    if converter is None:
        raise UnsupportedModelError(
            f"{where}: layer class {cls!r} is not supported (the layers lenet runs: "
            "lenet.keras.layers.CONVERTERS and IDENTITIES, listed in docs/model-files.md)"
        )
    fields = converter(config, where, writer)
    if fields.get("kind") == "activation" and fields.get("activation") == "linear":
        return IDENTITY
    return fields


# ---------------------------------------------------------------- Keras 1


def keras1_config(cls: str, c: dict) -> tuple[str, dict]:
    """A Keras 1 layer config in Keras 2 terms (Keras 2's own legacy interfaces did
    the same renaming when they loaded Keras 1 models)."""
    c = dict(c)
    order = c.pop("dim_ordering", None)
    if order in ("th", "tf"):
        c["data_format"] = "channels_first" if order == "th" else "channels_last"
    if "border_mode" in c:
        c["padding"] = c.pop("border_mode")
    if "subsample" in c:
        c["strides"] = c.pop("subsample")
    if cls in ("Convolution2D", "AtrousConvolution2D", "SeparableConvolution2D", "Conv2D"):
        if "nb_filter" in c:
            c["filters"] = c.pop("nb_filter")
        if "nb_row" in c or "nb_col" in c:
            c["kernel_size"] = [c.pop("nb_row", None), c.pop("nb_col", None)]
        if "atrous_rate" in c:
            c["dilation_rate"] = c.pop("atrous_rate")
        if "bias" in c:
            c["use_bias"] = c.pop("bias")
    if cls == "Dense":
        if "output_dim" in c:
            c["units"] = c.pop("output_dim")
        if "bias" in c:
            c["use_bias"] = c.pop("bias")
    if cls == "Dropout" and "p" in c:
        c["rate"] = c.pop("p")
    if cls in ("ZeroPadding2D", "Cropping2D"):
        key = "padding" if cls == "ZeroPadding2D" else "cropping"
        v = c.get(key)
        if isinstance(v, dict):  # {"top_pad": 1, "bottom_pad": 1, "left_pad": 2, "right_pad": 2}
            c[key] = [[v.get("top_pad", 0), v.get("bottom_pad", 0)], [v.get("left_pad", 0), v.get("right_pad", 0)]]
        elif isinstance(v, (list, tuple)) and len(v) == 4:  # [top, bottom, left, right]
            c[key] = [[v[0], v[1]], [v[2], v[3]]]
    if cls == "LeakyReLU" and "alpha" in c:
        c["negative_slope"] = c.pop("alpha")
    return ALIASES.get(cls, cls), c
