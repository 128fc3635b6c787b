"""Arrays as images: pixel values to 0..255 (one range decision per array), Pillow
images and array-likes to arrays, colour order, alpha, size and channels fitted to the
model's input, and whether an image has MNIST's dark ground."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .._native import _core
from ..errors import InputError


def need_cv2():
    """OpenCV, imported now if it was not yet; an InputError saying how to install it if it cannot be."""
    try:
        import cv2 as module
    except ImportError as e:  # pragma: no cover - opencv-python-headless is a dependency
        raise InputError(f"decoding images needs OpenCV (pip install opencv-python-headless): {e}") from None
    return module


class _OpenCV:
    """The cv2 module, imported on its first use: a call that decodes and resizes nothing (a
    uint8 digit of the model's size, a PNG the core decodes) needs none, and importing it is
    a tenth of lenet-cli's start. The modules of the photo path import cv2 themselves."""

    def __getattr__(self, name: str):
        return getattr(need_cv2(), name)


cv2 = _OpenCV()


def to_pixels(a: np.ndarray, source: str) -> np.ndarray:
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


def fit(img: np.ndarray, h: int, w: int, c: int, source: str) -> np.ndarray:
    """One image (H, W[, C]) of pixels 0..255 to float32 (h, w, c)."""
    need_cv2()
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
        img = cv2.resize(
            np.ascontiguousarray(img, dtype=np.float32),
            (w, h),
            interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR,
        )
    return np.asarray(img, dtype=np.float32).reshape(h, w, c)


def is_one_image(a: np.ndarray) -> bool:
    """Whether an array is one image ((H, W) or (H, W, C) with C in 1, 3, 4), not a batch."""
    return a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (1, 3, 4))


CHANNEL_ORDERS = ("rgb", "bgr")


def check_channel_order(channel_order: str) -> None:
    if channel_order not in CHANNEL_ORDERS:
        raise InputError(f"channel_order must be 'rgb' or 'bgr', got {channel_order!r}")


def is_pil_image(item: Any) -> bool:
    """A Pillow Image, recognized without importing Pillow (lenet does not depend on it)."""
    return type(item).__module__.startswith("PIL.") and hasattr(item, "mode") and hasattr(item, "convert")


# Pillow modes NumPy takes as they are; every other mode is converted first.
_PIL_DIRECT = {"L", "RGB", "RGBA", "I;16", "I;16B", "I;16L", "I", "F"}


def from_pil(img: Any, label: str) -> np.ndarray:
    """A Pillow Image as lenet's pixels: L -> (H, W) uint8; RGB, RGBA as they are; 1 (bilevel)
    -> L; P, PA, LA (palette and gray with alpha: transparency kept) -> RGBA; I;16 -> uint16
    (scaled to 0..255 as a 16-bit PNG is); I (int32) and F (float) by the array rules (an I
    image up to 255 is 8-bit, above it 16-bit); CMYK, YCbCr, LAB, HSV -> RGB. An EXIF
    orientation is applied, as for a file."""
    try:
        orientation = img.getexif().get(0x0112, 1) if hasattr(img, "getexif") else 1
        if orientation not in (1, None):
            from PIL import ImageOps

            img = ImageOps.exif_transpose(img)
        mode = img.mode
        if mode not in _PIL_DIRECT:
            img = img.convert("L" if mode == "1" else "RGBA" if mode in ("P", "PA", "LA", "La", "RGBa") else "RGB")
        a = np.asarray(img)
    except Exception as e:  # Pillow's own errors (a truncated lazy image, a mode it cannot convert)
        raise InputError(
            f"{label}: cannot read this Pillow image (mode {getattr(img, 'mode', '?')}): {type(e).__name__}: {e}"
        ) from None
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def as_array(item: Any, label: str) -> Optional[np.ndarray]:
    """An array-like input as an ndarray: a Pillow Image, or any object with ``__array__``
    (a CPU torch tensor, a JAX array, ...). None when the item is neither."""
    if isinstance(item, np.ndarray):
        return item
    if is_pil_image(item):
        return from_pil(item, label)
    if hasattr(item, "__array__") and not isinstance(item, (str, bytes, bytearray, memoryview)):
        try:
            return np.asarray(item)
        except Exception as e:  # a GPU tensor (torch, CuPy) refuses an implicit copy to the host
            # torch also refuses a tensor that requires grad: the fix there is detach(), not cpu()
            fix = (
                "detach it from autograd first (tensor.detach(), or infer under torch.no_grad())"
                if "requires grad" in str(e)
                else "copy it to the host first (e.g. tensor.cpu(), cupy.asnumpy)"
            )
            raise InputError(
                f"{label}: cannot read a {type(item).__name__} as a NumPy array ({type(e).__name__}: {e}); {fix}"
            ) from None
    return None


def bgr_to_rgb(a: np.ndarray, single: bool) -> np.ndarray:
    """An array of colour images given as OpenCV holds them (BGR, BGRA) in RGB(A) order."""
    channels = a.shape[-1] if a.ndim == (3 if single else 4) else 0
    if channels == 3:
        return a[..., ::-1]
    if channels == 4:
        return a[..., [2, 1, 0, 3]]
    return a


def dark_ground(stack: np.ndarray) -> np.ndarray:
    """Per image of a stack (N, H, W[, C]) of pixels 0..255: whether the median of its
    outermost pixels (gray, alpha composited on white) is below mid-gray."""
    if (
        stack.dtype == np.uint8
        and stack.ndim in (3, 4)
        and stack.shape[3:] in ((), (1,))
        and stack.shape[1] >= 2
        and stack.shape[2] >= 2
    ):  # 8-bit gray: the core's exact counting sort
        return _core.dark_ground(np.ascontiguousarray(stack))
    ring = np.concatenate([stack[:, 0], stack[:, -1], stack[:, 1:-1, 0], stack[:, 1:-1, -1]], axis=1)
    if ring.ndim == 3 and ring.shape[2] == 1:
        ring = ring[:, :, 0]
    ring = ring.astype(np.float32)
    if ring.ndim == 3:
        if ring.shape[2] == 4:
            alpha = ring[:, :, 3:] / 255
            ring = ring[:, :, :3] * alpha + 255 * (1 - alpha)
        ring = ring.mean(axis=2)
    # The median from a sort: np.median costs ~16 µs a call in overhead, 5x this.
    n = ring.shape[1]
    ring = np.sort(ring, axis=1)
    return ring[:, (n - 1) // 2] + ring[:, n // 2] < 256


# A drawing's paper, for clean_drawing: its outermost pixels all at least this light.
CLEAN_PAPER = 240


def clean_drawing(img: np.ndarray) -> bool:
    """Whether a uint8 gray image (h, w[, 1]) is a clean drawing dark on light: every one of
    its outermost pixels at least CLEAN_PAPER (white paper, nothing at the edge: no shadow,
    no desk, no noise) and some ink (a pixel darker than mid-gray). Its negative is then an
    MNIST-like digit, which "auto" classifies as such instead of by the photo path."""
    if img.dtype != np.uint8 or img.ndim not in (2, 3) or img.shape[2:] not in ((), (1,)) or min(img.shape[:2]) < 2:
        return False
    return bool(min(img[0].min(), img[-1].min(), img[:, 0].min(), img[:, -1].min()) >= CLEAN_PAPER and img.min() < 128)
