"""Images in, a ready float32 batch out: decoding and resizing with OpenCV.

Accepted inputs (each may also be given as a list mixing them):
- a path (``str`` or ``os.PathLike``) of an image file; ``bytes`` of an encoded image
  (PNG, JPEG, BMP, TIFF, WebP, … whatever OpenCV decodes);
- a NumPy array: ``(H, W)`` grayscale; ``(H, W, C)`` with C = 1, 3 (RGB) or 4 (RGBA);
  ``(N, H, W)`` a batch of grayscale images; ``(N, H, W, C)`` a batch.
  A 3-D array whose last axis is 1, 3 or 4 is one image with channels; any other
  3-D array is a batch of grayscale images.

Pixel values: unsigned integers are raw pixels (uint8 0..255; uint16 0..65535 is
scaled to 0..255). Floating-point arrays are read as intensities in [0, 1], or as
0..255 when their maximum exceeds 1. NaN, infinities and negative values are
refused. Colour is converted to grayscale for single-channel models, alpha is
composited onto white, and images are resized to the model's input size
(area interpolation when shrinking). Finally pixels (0..255) are multiplied by
the model's input scale (1/255 for the shipped models).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .errors import InputError

try:
    import cv2
except ImportError as _e:  # pragma: no cover - opencv-python-headless is a dependency
    cv2 = None
    _cv2_error = _e


@dataclass
class Batch:
    x: np.ndarray          # float32 (N, H, W, C) or (N, C, H, W), scaled for the model
    sources: list[str]     # one label per image: the path, "<bytes>", "<array>[i]"
    single: bool           # the input was one image (not a batch or a list)


def _need_cv2():
    if cv2 is None:
        raise InputError(f"decoding images needs OpenCV (pip install opencv-python-headless): {_cv2_error}")


def decode(data: bytes, source: str) -> np.ndarray:
    """Decodes an encoded image to uint8 (H, W) or (H, W, 3|4) in RGB(A) order."""
    _need_cv2()
    if len(data) == 0:
        raise InputError(f"{source}: empty file")
    buf = np.frombuffer(data, dtype=np.uint8)
    img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if img is None or img.size == 0:
        raise InputError(f"{source}: not an image OpenCV can decode")
    if img.dtype == np.uint16:
        img = (img.astype(np.float32) / 257.0).round().astype(np.uint8)
    elif img.dtype != np.uint8:
        img = _to_pixels(img, source)
    if img.ndim == 3:
        if img.shape[2] == 3:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        elif img.shape[2] == 4:
            img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGBA)
    return img


def read_file(path: str | os.PathLike) -> np.ndarray:
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise InputError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{source}: is a directory, not an image") from None
    except OSError as e:
        raise InputError(f"{source}: cannot read: {e.strerror or e}") from None
    return decode(data, source)


def _to_pixels(a: np.ndarray, source: str) -> np.ndarray:
    """Any numeric array to float32 pixel values in 0..255."""
    if a.dtype == np.uint8:
        return a.astype(np.float32)
    if a.dtype == np.bool_ or a.dtype.kind not in "uif":
        raise InputError(f"{source}: unsupported dtype {a.dtype} (expected uint8, uint16 or float)")
    if a.size == 0:
        raise InputError(f"{source}: empty array {a.shape}")
    if a.dtype.kind == "f":
        f = a.astype(np.float32)
        if not np.isfinite(f).all():
            raise InputError(f"{source}: contains NaN or infinite values")
        lo, hi = float(f.min()), float(f.max())
        if lo < 0:
            raise InputError(f"{source}: negative pixel values (min {lo:g}); expected [0, 1] or [0, 255]")
        if hi > 255:
            raise InputError(f"{source}: pixel values up to {hi:g}; expected [0, 1] or [0, 255]")
        return f if hi > 1.0 else f * 255.0
    lo, hi = int(a.min()), int(a.max())
    if a.dtype == np.uint16 or hi > 255:
        if lo < 0 or hi > 65535:
            raise InputError(f"{source}: integer pixel values out of range [{lo}, {hi}]")
        return a.astype(np.float32) / 257.0
    if lo < 0:
        raise InputError(f"{source}: negative pixel values (min {lo})")
    return a.astype(np.float32)


def _fit(img: np.ndarray, h: int, w: int, c: int, source: str) -> np.ndarray:
    """One float32 image (H, W[, C]) of pixels 0..255 to (h, w, c)."""
    _need_cv2()
    if img.ndim == 3 and img.shape[2] == 4:  # composite on white
        alpha = img[:, :, 3:4] / 255.0
        img = img[:, :, :3] * alpha + 255.0 * (1.0 - alpha)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if c == 1 and img.ndim == 3:
        img = cv2.cvtColor(np.ascontiguousarray(img, dtype=np.float32), cv2.COLOR_RGB2GRAY)
    elif c == 3 and img.ndim == 2:
        img = np.repeat(img[:, :, None], 3, axis=2)
    elif c not in (1, 3):
        raise InputError(f"{source}: the model takes {c}-channel images; only 1 and 3 are supported")
    if img.shape[0] != h or img.shape[1] != w:
        shrink = img.shape[0] > h or img.shape[1] > w
        img = cv2.resize(np.ascontiguousarray(img, dtype=np.float32), (w, h),
                         interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
    return np.asarray(img, dtype=np.float32).reshape(h, w, c)


def _images(item: Any, label: str) -> tuple[list[np.ndarray], list[str], bool]:
    """Splits one input into images. Returns (images, sources, was_single)."""
    if isinstance(item, (str, os.PathLike)):
        return [_to_pixels(read_file(item), os.fspath(item))], [os.fspath(item)], True
    if isinstance(item, (bytes, bytearray, memoryview)):
        return [_to_pixels(decode(bytes(item), label), label)], [label], True
    if isinstance(item, np.ndarray):
        if item.dtype == object:
            raise InputError(f"{label}: object arrays are not images")
        if item.ndim not in (2, 3, 4):
            raise InputError(f"{label}: array of shape {item.shape} is not an image or a batch of images")
        # One range decision for the whole array (see the module docstring).
        a = _to_pixels(item, label) if item.size else item.astype(np.float32)
        if a.ndim == 2:
            return [a], [label], True
        if a.ndim == 3 and a.shape[2] in (1, 3, 4):
            return [a], [label], True
        if a.ndim == 3:
            return list(a), [f"{label}[{i}]" for i in range(a.shape[0])], False
        if a.ndim == 4 and a.shape[3] in (1, 3, 4):
            return list(a), [f"{label}[{i}]" for i in range(a.shape[0])], False
        raise InputError(f"{label}: array of shape {a.shape} is not an image or a batch of images "
                         "((H, W), (H, W, C), (N, H, W) or (N, H, W, C) with C in 1, 3, 4)")
    raise InputError(f"{label}: cannot classify a {type(item).__name__} "
                     "(give a path, bytes of an encoded image, a NumPy array or a list of these)")


def to_batch(images: Any, input_hwc: Sequence[int], scale: float, channels_first: bool = False) -> Batch:
    """Turns any accepted input into the model's float32 input batch."""
    h, w, c = input_hwc
    if isinstance(images, (list, tuple)):
        if len(images) == 0:
            return Batch(np.zeros((0, c, h, w) if channels_first else (0, h, w, c), np.float32), [], False)
        parts, sources = [], []
        for i, item in enumerate(images):
            label = os.fspath(item) if isinstance(item, (str, os.PathLike)) else f"<input {i}>"
            imgs, srcs, _ = _images(item, label)
            parts += imgs
            sources += srcs
        single = False
    else:
        label = "<bytes>" if isinstance(images, (bytes, bytearray, memoryview)) else "<array>"
        parts, sources, single = _images(images, label)
    if isinstance(images, np.ndarray) and images.ndim >= 3 and not single and \
            all(p.shape[:2] == (h, w) and (p.ndim == 2 or p.shape[2] == c) for p in parts[:1]):
        # A ready batch of the model's size: no per-image work.
        x = np.asarray(parts, dtype=np.float32).reshape(len(parts), h, w, c)
    else:
        x = np.empty((len(parts), h, w, c), np.float32)
        for i, (img, src) in enumerate(zip(parts, sources)):
            x[i] = _fit(img, h, w, c, src)
    x *= np.float32(scale)
    if channels_first:
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return Batch(x, sources, single)
