"""Files and encoded bytes to pixels: read in one call of the core, sized from their
header and checked against the pixel limit before decoding, decoded by OpenCV upright
(EXIF orientation), big JPEGs decoded smaller where every path shrinks them anyway."""

from __future__ import annotations

import errno
import os
from typing import Optional, Sequence

import numpy as np

from .._native import _core
from ..errors import ImageTooLargeError, InputError, InputFileNotFoundError
from .limits import MAX_FILE_BYTES, check_pixels
from .pixels import cv2, need_cv2, to_pixels
from .sniff import check_png_chunks, exif_orientation, image_size


def decode(data: bytes, source: str, reduce: bool = False) -> np.ndarray:
    """Decodes an encoded image to uint8 (H, W) or (H, W, 3|4) in RGB(A) order.
    ``reduce``: a big JPEG may come out 2, 4 or 8 times smaller (``images.page.jpeg_reduction``)."""
    need_cv2()
    if len(data) == 0:
        raise InputError(f"{source}: empty file")
    fmt, w, h = image_size(data, source)
    if w < 1 or h < 1:
        raise InputError(f"{source}: a {fmt} image of {w}x{h} pixels (corrupt header)")
    check_pixels(h, w, source, f"a {fmt} image")
    oriented = True  # whether the format may carry an EXIF orientation
    if fmt == "PNG":
        oriented = check_png_chunks(data, source)
    try:
        img = imdecode_upright(
            np.frombuffer(data, dtype=np.uint8),
            _jpeg_reduction(max(w, h)) if reduce and fmt == "JPEG" else 1,
            oriented,
        )
    except cv2.error as e:
        raise InputError(f"{source}: OpenCV cannot decode this {fmt} image ({cv2_message(e)})") from None
    if img is None or img.size == 0:
        raise InputError(f"{source}: not a {fmt} image OpenCV can decode (corrupt or truncated?)")
    check_pixels(img.shape[0], img.shape[1], source, f"a decoded {fmt} image")
    if img.dtype == np.uint16:
        img = (img.astype(np.float32) / 257.0).round().astype(np.uint8)
    elif img.dtype != np.uint8:
        img = to_pixels(img, source)
    if img.ndim == 3:
        if img.shape[2] == 3:
            img = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        elif img.shape[2] == 4:
            img = cv2.cvtColor(img, cv2.COLOR_BGRA2RGBA)
    return img


def _jpeg_reduction(side: int) -> int:
    from .page import jpeg_reduction  # the photo path's module, imported with the first big JPEG

    return jpeg_reduction(side)


def cv2_message(e: Exception) -> str:
    """The last line of an OpenCV error, without its source file and line."""
    text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return text.split(" error: ", 1)[-1]


def imdecode_upright(buf: np.ndarray, reduction: int = 1, oriented: bool = True) -> Optional[np.ndarray]:
    """cv2.imdecode keeping alpha and 16 bits (IMREAD_UNCHANGED), turned upright by the
    EXIF orientation, which IMREAD_UNCHANGED alone ignores (``oriented`` False: the
    image has none, a PNG without eXIf; one plain decode). A ``reduction`` of 2, 4 or
    8 (JPEG only: 8-bit, no alpha) has libjpeg decode that many times smaller, upright,
    in about half the time for 12 MP; where libjpeg cannot scale (lossless JPEG) the
    image is decoded whole."""
    if not oriented:
        return cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if reduction > 1:
        img = cv2.imdecode(
            buf,
            {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}[reduction],
        )
        if img is not None and img.size:
            return img
    if hasattr(cv2, "imdecodeWithMetadata"):  # recent OpenCV: one decode
        img, kinds, blocks = cv2.imdecodeWithMetadata(buf, flags=cv2.IMREAD_UNCHANGED)
        exif = [bytes(b) for k, b in zip(kinds, blocks) if k == cv2.IMAGE_METADATA_EXIF]
        return ORIENT[exif_orientation(exif[0]) if exif else 1](img) if img is not None else None
    img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if img is not None and (img.ndim == 2 or img.shape[2] == 3):  # no alpha to lose: decode again, oriented
        img = cv2.imdecode(buf, cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH)
    return img


# EXIF orientation -> the transform that makes the stored pixels upright.
ORIENT = {
    1: lambda a: a,
    2: lambda a: np.ascontiguousarray(a[:, ::-1]),
    3: lambda a: np.ascontiguousarray(a[::-1, ::-1]),
    4: lambda a: np.ascontiguousarray(a[::-1]),
    5: lambda a: np.ascontiguousarray(a.swapaxes(0, 1)),
    6: lambda a: np.ascontiguousarray(np.rot90(a, -1)),
    7: lambda a: np.ascontiguousarray(np.rot90(a, 2).swapaxes(0, 1)),
    8: lambda a: np.ascontiguousarray(np.rot90(a, 1)),
}


def read_error(source: str, err: int) -> InputError:
    if err == errno.ENOENT:
        return InputFileNotFoundError(f"{source}: no such file", source)
    if err == errno.EISDIR:
        return InputError(f"{source}: is a directory, not an image")
    if err == errno.EFBIG:
        return ImageTooLargeError(f"{source}: larger than {MAX_FILE_BYTES:,} bytes: not an image lenet reads")
    return InputError(f"{source}: cannot read: {os.strerror(err)}")


def read_paths(paths: Sequence, labels: Sequence[str]) -> list:
    """Each file's bytes, or its InputError, read in one call of the core with the GIL
    released (no Python per file: a reader thread does not contend for the GIL)."""
    got = _core.read_files([os.fsencode(p) for p in paths], MAX_FILE_BYTES)
    return [read_error(label, data) if isinstance(data, int) else data for data, label in zip(got, labels)]


def read_bytes(path: str | os.PathLike) -> bytes:
    """One file's bytes (``read_paths`` of one), or its InputError raised."""
    (data,) = read_paths([path], [os.fspath(path)])
    if isinstance(data, InputError):
        raise data
    return data


def read_file(path: str | os.PathLike, reduce: bool = False) -> np.ndarray:
    return decode(read_bytes(path), os.fspath(path), reduce)
