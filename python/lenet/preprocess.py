"""Images in, a ready float32 batch out: decoding, then one of two preprocessing paths.

Accepted inputs (each may also be given as a list mixing them):
- a path (``str`` or ``os.PathLike``) of an image file; ``bytes`` of an encoded image
  (PNG, JPEG, BMP, TIFF, WebP, … whatever OpenCV decodes), turned upright by its EXIF
  orientation;
- a NumPy array: ``(H, W)`` grayscale; ``(H, W, C)`` with C = 1, 3 (RGB) or 4 (RGBA);
  ``(N, H, W)`` a batch of grayscale images; ``(N, H, W, C)`` a batch.
  A 3-D array whose last axis is 1, 3 or 4 is one image with channels; any other
  3-D array is a batch of grayscale images.

Pixel values: unsigned integers are raw pixels (uint8 0..255; uint16 0..65535 is
scaled to 0..255). Floating-point arrays are read as intensities in [0, 1], or as
0..255 when their maximum exceeds 1. NaN, infinities and negative values are
refused. Alpha is composited onto white.

Each image then takes one of two paths (``mode``):
- ``"mnist"``: the image already looks like MNIST (a light digit on a dark
  background, filling the frame). It is converted to grayscale for single-channel
  models and resized to the model's input size (area interpolation when shrinking).
- ``"photo"``: a photo, scan or drawing of a digit anywhere in the image, dark on light
  or light on dark (``lenet.photo``): found, cropped, scaled into 20×20 and centred
  by centre of mass in 28×28 as MNIST was made, then brought to the model's input
  size like the mnist path. An image with no ink at all raises InputError ("no digit
  found").
- ``"auto"`` (the default) picks per image: "mnist" when the image has the model's
  input size (28×28 for the shipped models) and a dark background (the median of its
  outermost pixels, gray, is below 128), "photo" otherwise — whatever the image came
  from: a file, bytes or an array.

Finally pixels (0..255) are multiplied by the model's input scale (1/255 for the
shipped models).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .errors import InputError

try:
    import cv2

    from . import photo
except ImportError as _e:  # pragma: no cover - opencv-python-headless is a dependency
    cv2 = photo = None
    _cv2_error = _e

MODES = ("auto", "mnist", "photo")


@dataclass
class Batch:
    x: np.ndarray          # float32 (N, H, W, C) or (N, C, H, W), scaled for the model
    sources: list[str]     # one label per image: the path, "<bytes>", "<array>[i]"
    single: bool           # the input was one image (not a batch or a list)
    modes: list[str]       # the path each image took: "mnist" or "photo"
    hwc: np.ndarray        # x as (N, H, W, C) (x itself for a channels_last model)


def _need_cv2():
    if cv2 is None:
        raise InputError(f"decoding images needs OpenCV (pip install opencv-python-headless): {_cv2_error}")


def decode(data: bytes, source: str, reduce: bool = False) -> np.ndarray:
    """Decodes an encoded image to uint8 (H, W) or (H, W, 3|4) in RGB(A) order.
    ``reduce``: a big JPEG may come out 2, 4 or 8 times smaller (``photo.jpeg_reduction``)."""
    _need_cv2()
    if len(data) == 0:
        raise InputError(f"{source}: empty file")
    img = _imdecode_upright(np.frombuffer(data, dtype=np.uint8), reduce)
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


def _imdecode_upright(buf: np.ndarray, reduce: bool = False) -> Optional[np.ndarray]:
    """cv2.imdecode keeping alpha and 16 bits (IMREAD_UNCHANGED), turned upright by the
    EXIF orientation, which IMREAD_UNCHANGED alone ignores. With ``reduce``, a JPEG
    (8-bit, no alpha) that every path would shrink anyway is decoded smaller by
    libjpeg, upright (about half the time for 12 MP)."""
    k = photo.jpeg_reduction(buf) if reduce else 1
    if k > 1:
        return cv2.imdecode(buf, {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                                  8: cv2.IMREAD_REDUCED_COLOR_8}[k])
    if hasattr(cv2, "imdecodeWithMetadata"):  # recent OpenCV: one decode
        img, kinds, blocks = cv2.imdecodeWithMetadata(buf, flags=cv2.IMREAD_UNCHANGED)
        exif = [bytes(b) for k, b in zip(kinds, blocks) if k == cv2.IMAGE_METADATA_EXIF]
        return _ORIENT[_exif_orientation(exif[0]) if exif else 1](img) if img is not None else None
    img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if img is not None and (img.ndim == 2 or img.shape[2] == 3):  # no alpha to lose: decode again, oriented
        img = cv2.imdecode(buf, cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH)
    return img


def _exif_orientation(tiff: bytes) -> int:
    """The orientation tag (1..8) of an EXIF block (a TIFF header and its first
    directory); 1 when absent or unreadable."""
    order = {b"II": "<", b"MM": ">"}.get(tiff[:2])
    try:
        (ifd,) = struct.unpack_from(order + "I", tiff, 4)
        (n,) = struct.unpack_from(order + "H", tiff, ifd)
        for i in range(n):
            tag, kind, _, value = struct.unpack_from(order + "HHIH", tiff, ifd + 2 + 12 * i)
            if tag == 0x0112 and kind == 3 and 1 <= value <= 8:  # SHORT
                return value
    except (TypeError, struct.error):  # not TIFF (order None), or truncated
        pass
    return 1


# EXIF orientation -> the transform that makes the stored pixels upright.
_ORIENT = {1: lambda a: a,
           2: lambda a: np.ascontiguousarray(a[:, ::-1]),
           3: lambda a: np.ascontiguousarray(a[::-1, ::-1]),
           4: lambda a: np.ascontiguousarray(a[::-1]),
           5: lambda a: np.ascontiguousarray(a.swapaxes(0, 1)),
           6: lambda a: np.ascontiguousarray(np.rot90(a, -1)),
           7: lambda a: np.ascontiguousarray(np.rot90(a, 2).swapaxes(0, 1)),
           8: lambda a: np.ascontiguousarray(np.rot90(a, 1))}


def read_file(path: str | os.PathLike, reduce: bool = False) -> np.ndarray:
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
    return decode(data, source, reduce)


def _to_pixels(a: np.ndarray, source: str) -> np.ndarray:
    """Any numeric array to pixel values in 0..255: uint8 as it is (read only, never
    written), anything else as float32."""
    if a.dtype == np.uint8:
        return a
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
    """One image (H, W[, C]) of pixels 0..255 to float32 (h, w, c)."""
    _need_cv2()
    img = np.asarray(img, dtype=np.float32)
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


def _images(item: Any, label: str, reduce: bool = False) -> tuple[list[np.ndarray], list[str], bool]:
    """Splits one input into images. Returns (images, sources, was_single)."""
    if isinstance(item, (str, os.PathLike)):
        return [read_file(item, reduce)], [os.fspath(item)], True  # uint8: the photo path is faster on it
    if isinstance(item, (bytes, bytearray, memoryview)):
        return [decode(bytes(item), label, reduce)], [label], True
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


def _dark_ground(stack: np.ndarray) -> np.ndarray:
    """Per image of a stack (N, H, W[, C]) of pixels 0..255: whether the median of its
    outermost pixels (gray, alpha composited on white) is below mid-gray."""
    ring = np.concatenate([stack[:, 0], stack[:, -1], stack[:, 1:-1, 0], stack[:, 1:-1, -1]], axis=1)
    ring = ring.astype(np.float32)
    if ring.ndim == 3:
        if ring.shape[2] == 4:
            alpha = ring[:, :, 3:] / 255
            ring = ring[:, :, :3] * alpha + 255 * (1 - alpha)
        ring = ring.mean(axis=2)
    return np.median(ring, axis=1) < 128


def _prepare(img: np.ndarray, h: int, w: int, c: int, mode: str, source: str) -> tuple[np.ndarray, str]:
    """One image to float32 (h, w, c) pixels 0..255, and the path it took."""
    _need_cv2()
    if mode == "auto":
        mode = "mnist" if img.shape[:2] == (h, w) and _dark_ground(img[None])[0] else "photo"
    if mode == "photo":
        img = photo.to_mnist(img, source)
    return _fit(img, h, w, c, source), mode


def _assemble(blocks: list, sources: list[str], modes: list[str], single: bool, hwc: Sequence[int],
              scale: float, channels_first: bool) -> Batch:
    """The batch from blocks of rows, each float32 (n, h, w, c) pixels 0..255 of our own."""
    x = blocks[0] if len(blocks) == 1 else np.concatenate(blocks) if blocks else np.zeros((0, *hwc), np.float32)
    x *= np.float32(scale)
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if channels_first else x
    return Batch(nchw, sources, single, modes, x)


def to_batch(images: Any, input_hwc: Sequence[int], scale: float, channels_first: bool = False,
             mode: str = "auto", on_error: Optional[Callable[[InputError], Any]] = None) -> Batch:
    """Turns any accepted input into the model's float32 input batch.

    ``mode``: "auto", "mnist" or "photo" (see the module docstring). ``on_error``: for
    a list, a callable given the InputError of each item that cannot be read or
    prepared (a blank page in photo mode included); that item is left out. By default,
    and for an input that is not a list, the error is raised."""
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r} (expected 'auto', 'mnist' or 'photo')")
    h, w, c = input_hwc
    listed = isinstance(images, (list, tuple))
    blocks, sources, modes, single = [], [], [], False

    def failed(e: InputError):
        if on_error is None or not listed:
            raise e
        on_error(e)

    for i, item in enumerate(images if listed else [images]):
        if listed:
            label = os.fspath(item) if isinstance(item, (str, os.PathLike)) else f"<input {i}>"
        else:
            label = "<bytes>" if isinstance(item, (bytes, bytearray, memoryview)) else "<array>"
        try:
            parts, srcs, single = _images(item, label, reduce=True)  # big JPEGs decoded smaller
        except InputError as e:
            failed(e)
            continue
        if parts and all(p.shape[:2] == (h, w) and (p.shape[2:] == (c,) or p.ndim == 2 and c == 1) for p in parts):
            # Already the model's size: one vectorized check, no per-image work for MNIST-like batches.
            stack = np.asarray(parts, dtype=np.float32).reshape(len(parts), h, w, c)
            if mode == "mnist" or (mode == "auto" and _dark_ground(stack).all()):
                blocks.append(stack)
                sources += srcs
                modes += ["mnist"] * len(parts)
                continue
        for img, src in zip(parts, srcs):
            try:
                row, m = _prepare(img, h, w, c, mode, src)
            except InputError as e:
                failed(e)
                continue
            blocks.append(row[None])
            sources.append(src)
            modes.append(m)
    return _assemble(blocks, sources, modes, single and not listed, input_hwc, scale, channels_first)


def number_batch(image: Any, input_hwc: Sequence[int], scale: float, channels_first: bool,
                 run: Callable[[np.ndarray], np.ndarray]) -> tuple[Batch, list[tuple[int, int, int, int]], str]:
    """The digits of a number written left to right in one image (a path, bytes or
    an array) as the model's batch, each digit's box (x, y, w, h) in the image, and
    the image's label. ``run`` (the model: a batch's x -> probabilities) chooses
    between reading a wide blob as one digit or as several touching ones."""
    _need_cv2()
    label = "<bytes>" if isinstance(image, (bytes, bytearray, memoryview)) else "<array>"
    parts, sources, single = _images(image, label)  # full size: the boxes are in its own pixels
    if not single:
        raise InputError(f"{label}: read_number takes one image, not a batch of {len(parts)}")

    def batch(frames) -> Batch:
        h, w, c = input_hwc
        rows = [_fit(f, h, w, c, sources[0])[None] for f in frames]
        return _assemble(rows, [f"{sources[0]}[{k}]" for k in range(len(rows))], ["photo"] * len(rows), False,
                         input_hwc, scale, channels_first)

    frames, boxes = photo.find_number(parts[0], lambda frames: run(batch(frames).x), sources[0])
    return batch(frames), boxes, sources[0]
