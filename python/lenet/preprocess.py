"""How an image's pixels are prepared for a model, as its author prepared them in
training: 0..255 pixels times ``scale``, then ``(x - mean) / std`` per channel, in
float32 and in that order, as torchvision's ``ToTensor`` + ``Normalize`` and Keras'
``Rescaling`` + ``Normalization`` compute them.

A PyTorch MNIST model trained on ``Normalize((0.1307,), (0.3081,))``: ``scale=1/255``
(the default), ``mean=0.1307``, ``std=0.3081``; on ``Normalize((0.5,), (0.5,))``:
``mean=0.5, std=0.5``. Where the model file records it (an ONNX file's metadata
``lenet_input_scale``, ``lenet_mean``, ``lenet_std``; a Keras file's
``lenet_input_scale``, or Rescaling / Normalization layers in the model), the file's
values are the defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from ._native import _core
from .errors import InputError

Numbers = Union[float, Sequence[float], None]


@dataclass(frozen=True)
class Preprocessing:
    """``x * scale``, then ``(x - mean[c]) / std[c]`` for channel c (one value: every channel)."""

    scale: float
    mean: tuple = (0.0,)
    std: tuple = (1.0,)

    @property
    def plain(self) -> bool:
        """Only the scale (the core scales uint8 pixels itself on this path)."""
        return all(m == 0.0 for m in self.mean) and all(s == 1.0 for s in self.std)

    def table(self, channels: int) -> np.ndarray:
        """(256, channels) float32: each pixel value's result, computed as ``apply`` computes it."""
        p = np.arange(256, dtype=np.float32)[:, None] * np.float32(self.scale)
        p = np.broadcast_to(p, (256, channels))
        return ((p - np.asarray(self.mean, np.float32)) / np.asarray(self.std, np.float32)).astype(np.float32)

    def apply(self, rows: np.ndarray) -> np.ndarray:
        """Rows (n, h, w, c) of pixels 0..255 (uint8 or float32) -> float32, a new C-contiguous array."""
        if rows.dtype == np.uint8 and not self.plain:
            c = rows.shape[-1]
            t = self.table(c)
            return np.ascontiguousarray(t[rows, np.arange(c)] if c > 1 else t[rows[..., 0], 0][..., None])
        x = np.array(rows, dtype=np.float32, order="C")
        x *= np.float32(self.scale)
        if not self.plain:
            x -= np.asarray(self.mean, np.float32)
            x /= np.asarray(self.std, np.float32)
        return x

    def __str__(self) -> str:
        if self.plain:
            return f"x * {self.scale:g}"
        return f"(x * {self.scale:g} - {_show(self.mean)}) / {_show(self.std)}"


def _show(v: tuple) -> str:
    return f"{v[0]:g}" if len(v) == 1 else "(" + ", ".join(f"{x:g}" for x in v) + ")"


def _numbers(v: Any, what: str, positive: bool = False) -> tuple:
    """A number or a sequence of them (one per channel) -> a tuple of floats, checked."""
    values = [v] if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else v
    try:
        out = tuple(float(x) for x in values if not isinstance(x, bool) and _is_number(x))
        ok = len(out) == len(values) and len(out) > 0
    except TypeError:
        ok = False
    if not ok or not all(math.isfinite(x) for x in out) or (positive and min(out) <= 0):
        raise InputError(
            f"{what} must be a finite number{' above 0' if positive else ''} or a sequence of them "
            f"(one per channel), got {v!r}"
        )
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float, np.number))


def resolve(
    scale: Optional[float],
    mean: Numbers,
    std: Numbers,
    defaults: "Preprocessing",
    channels: Optional[int],
) -> Preprocessing:
    """The preprocessing asked (None: the file's, ``defaults``), checked against the
    model's image channels."""
    if scale is not None:
        scale = _numbers(scale, "input_scale")
        if len(scale) != 1:
            raise InputError(f"input_scale must be one number, got {scale!r}")
        scale = scale[0]
    out = Preprocessing(
        defaults.scale if scale is None else scale,
        defaults.mean if mean is None else _numbers(mean, "mean"),
        defaults.std if std is None else _numbers(std, "std", positive=True),
    )
    for name, v in (("mean", out.mean), ("std", out.std)):
        if len(v) != 1 and len(v) != channels:
            raise InputError(
                f"{name} has {len(v)} values; the model takes "
                f"{'images of ' + str(channels) + ' channel(s)' if channels else 'no images'}: give one value, "
                f"or one per channel"
            )
    # As the float32s the core prepares pixels with (the .lenet reader's check): a std that
    # is 0 as a float32, or a scale that overflows a pixel, would fail every call instead.
    n = max(len(out.mean), len(out.std))
    means, stds = ([v[0]] * n if len(v) == 1 else list(v) for v in (out.mean, out.std))
    problem = _core.preparation_problem(out.scale, means, stds)
    if problem:
        raise InputError(f"input_scale, mean and std: {problem}")
    # One without the other (issue 76): std used to default to 1 silently, a normalization
    # half applied. A Normalize transform always has both.
    if (mean is None) != (std is None):
        given, missing = ("mean", "std") if std is None else ("std", "mean")
        raise InputError(
            f"{given}=... given without {missing}=...: give both, as a Normalize transform has them (PyTorch's MNIST "
            f"examples: mean=0.1307, std=0.3081); {'std=1' if missing == 'std' else 'mean=0'} applies none"
        )
    return out


def add_arguments(parser: Any) -> None:
    """--input-scale, --mean and --std, as lenet-cli and lenet-serve take them."""
    parser.add_argument(
        "--input-scale",
        type=float,
        default=None,
        metavar="S",
        help="pixels 0..255 are multiplied by S first (default: what the file records, else 1/255)",
    )
    parser.add_argument(
        "--mean",
        type=_argument,
        default=None,
        metavar="M",
        help="then (x - M) / STD, as torchvision's Normalize: one number or one per channel, "
        "separated by commas (a PyTorch MNIST model: --mean 0.1307 --std 0.3081; default: the file's, else 0)",
    )
    parser.add_argument(
        "--std", type=_argument, default=None, metavar="STD", help="see --mean (default: the file's, else 1)"
    )


def options(args: Any) -> dict:
    """The Engine keywords of add_arguments' options."""
    return {"input_scale": args.input_scale, "mean": args.mean, "std": args.std}


def _argument(text: str) -> tuple:
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) for v in values):
        import argparse

        raise argparse.ArgumentTypeError(f"not a number or numbers separated by commas: {text!r}")
    return values
