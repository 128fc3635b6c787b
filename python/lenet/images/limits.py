"""How big an image lenet decodes or accepts (SECURITY.md): at most
``max_image_pixels()`` pixels per image (default 100 million: 300 MB as RGB), set by
``set_max_image_pixels`` or ``LENET_MAX_IMAGE_PIXELS``; files of at most
``MAX_FILE_BYTES`` are read whole."""

from __future__ import annotations

import os
from typing import Optional

from ..errors import ImageTooLargeError, InputError

DEFAULT_MAX_IMAGE_PIXELS = 100_000_000


def _env_max_pixels() -> int:
    value = os.environ.get("LENET_MAX_IMAGE_PIXELS", "").strip()
    if not value:
        return DEFAULT_MAX_IMAGE_PIXELS
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"LENET_MAX_IMAGE_PIXELS={value!r}: expected a positive integer (pixels per image)")
    return n


_max_pixels: Optional[int] = None
_env_pixels: Optional[int] = None


def max_image_pixels() -> int:
    """The largest image, in pixels (width x height), that lenet decodes or accepts
    in an array: ``set_max_image_pixels``, else ``LENET_MAX_IMAGE_PIXELS`` (read
    once, when first needed: a lookup in os.environ costs more than checking a small
    image), else 100 million."""
    global _env_pixels
    if _max_pixels is not None:
        return _max_pixels
    if _env_pixels is None:
        _env_pixels = _env_max_pixels()
    return _env_pixels


def set_max_image_pixels(n: Optional[int]) -> None:
    """Sets the pixel limit per image for this process (None: back to the default
    or ``LENET_MAX_IMAGE_PIXELS``)."""
    global _max_pixels
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise InputError(f"the pixel limit must be a positive integer, got {n!r}")
    _max_pixels = n


def check_pixels(h: int, w: int, source: str, what: str = "image") -> None:
    limit = max_image_pixels()
    if h * w > limit:
        raise ImageTooLargeError(
            f"{source}: {what} of {w}x{h} = {h * w:,} pixels exceeds the limit of {limit:,} "
            "pixels (lenet.set_max_image_pixels or LENET_MAX_IMAGE_PIXELS raise it)"
        )


MAX_FILE_BYTES = (1 << 31) - 1  # the largest file read whole (its pixels are limited apart)
