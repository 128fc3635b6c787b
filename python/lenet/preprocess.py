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
  or light on dark (``lenet.images``: ``page``, ``digit``, ``number``): found, cropped, scaled into 20×20 and centred
  by centre of mass in 28×28 as MNIST was made, then brought to the model's input
  size like the mnist path. An image with no digit (blank paper, specks, only the
  edge of a desk or a shadow) raises InputError ("no digit found").
- ``"auto"`` (the default) picks per image: "mnist" when the image has the model's
  input size (28×28 for the shipped models) and a dark background (the median of its
  outermost pixels, gray, is below 128), "photo" otherwise — whatever the image came
  from: a file, bytes or an array.

Finally pixels (0..255) are multiplied by the model's input scale (1/255 for the
shipped models).

Limits (SECURITY.md): an encoded image is decoded only when its format is one whose
size can be read from its header before decoding (PNG, JPEG, BMP, GIF, WebP, TIFF,
PNM/PAM) and that size is at most ``max_image_pixels()`` pixels (default 100
million: 300 MB as RGB; set ``LENET_MAX_IMAGE_PIXELS`` in the environment or call
``set_max_image_pixels``). The same limit applies to each image of an array. A
declared size above it (a "decompression bomb") is refused with InputError before
any pixel is allocated.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from ._native import _core
from .errors import ImageTooLargeError, InputError, InputFileNotFoundError

try:
    import cv2

    from .images import digit, number, page
except ImportError as _e:  # pragma: no cover - opencv-python-headless is a dependency
    cv2 = digit = number = page = None
    _cv2_error = _e

MODES = ("auto", "mnist", "photo")

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


def _check_pixels(h: int, w: int, source: str, what: str = "image") -> None:
    limit = max_image_pixels()
    if h * w > limit:
        raise ImageTooLargeError(f"{source}: {what} of {w}x{h} = {h * w:,} pixels exceeds the limit of {limit:,} "
                                 "pixels (lenet.set_max_image_pixels or LENET_MAX_IMAGE_PIXELS raise it)")


@dataclass
class Batch:
    x: np.ndarray          # float32 (N, H, W, C) or (N, C, H, W), scaled for the model
    sources: list[str]     # one label per image: the path, "<bytes>", "<array>[i]"
    single: bool           # the input was one image (not a batch or a list)
    modes: list[str]       # the path each image took: "mnist" or "photo"
    hwc: np.ndarray        # x as (N, H, W, C) (x itself for a channels_last model)
    # Seconds spent by to_batch in each stage: "decode" (reading and decoding files and
    # bytes, checking arrays), "prepare" (resizing, the photo path, assembling the batch).
    timings: dict = field(default_factory=dict)


def _need_cv2():
    if cv2 is None:
        raise InputError(f"decoding images needs OpenCV (pip install opencv-python-headless): {_cv2_error}")


def decode(data: bytes, source: str, reduce: bool = False) -> np.ndarray:
    """Decodes an encoded image to uint8 (H, W) or (H, W, 3|4) in RGB(A) order.
    ``reduce``: a big JPEG may come out 2, 4 or 8 times smaller (``images.page.jpeg_reduction``)."""
    _need_cv2()
    if len(data) == 0:
        raise InputError(f"{source}: empty file")
    fmt, w, h = image_size(data, source)
    if w < 1 or h < 1:
        raise InputError(f"{source}: a {fmt} image of {w}x{h} pixels (corrupt header)")
    _check_pixels(h, w, source, f"a {fmt} image")
    oriented = True   # whether the format may carry an EXIF orientation
    if fmt == "PNG":
        oriented = _check_png_chunks(data, source)
    try:
        img = _imdecode_upright(np.frombuffer(data, dtype=np.uint8),
                                page.jpeg_reduction(max(w, h)) if reduce and fmt == "JPEG" else 1, oriented)
    except cv2.error as e:
        raise InputError(f"{source}: OpenCV cannot decode this {fmt} image ({_cv2_message(e)})") from None
    if img is None or img.size == 0:
        raise InputError(f"{source}: not a {fmt} image OpenCV can decode (corrupt or truncated?)")
    _check_pixels(img.shape[0], img.shape[1], source, f"a decoded {fmt} image")
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


def _cv2_message(e: Exception) -> str:
    """The last line of an OpenCV error, without its source file and line."""
    text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    return text.split(" error: ", 1)[-1]


def image_size(data: bytes, source: str = "<bytes>") -> tuple[str, int, int]:
    """(format, width, height) read from the header of an encoded image, without
    decoding it. Raises InputError for a format lenet does not decode (see the module
    docstring) or a header too short or malformed to give a size."""
    try:
        found = _header_size(data)
    except (struct.error, IndexError, ValueError, OverflowError):   # offsets past the end, bad numbers
        found = None
    if found is None:
        fmt = _format_of(data)
        if fmt is None:
            raise InputError(f"{source}: not an image lenet decodes (PNG, JPEG, BMP, GIF, WebP, TIFF, PNM)")
        raise InputError(f"{source}: a {fmt} file whose header gives no image size (truncated or corrupt)")
    return found


def _check_png_chunks(d: bytes, source: str) -> bool:
    """Refuses a PNG with a chunk longer than the data left: OpenCV 5.0 allocates (and
    zero-fills) the declared length first, so 4 bytes of 0xff cost 4 GB and seconds
    (found by tests/fuzz_targets.py image-bytes). Returns whether the PNG has an eXIf
    chunk (an EXIF orientation to apply)."""
    pos, exif = 8, False
    while pos + 8 <= len(d):
        (length,) = struct.unpack_from(">I", d, pos)
        kind = d[pos + 4:pos + 8]
        if length > len(d) - pos - 12:
            raise InputError(f"{source}: a corrupt or truncated PNG: chunk {kind!r} at byte {pos} declares "
                             f"{length:,} bytes, {max(0, len(d) - pos - 12):,} remain")
        exif = exif or kind == b"eXIf"
        pos += 12 + length
        if kind == b"IEND":
            break
    return exif


def _format_of(d: bytes) -> Optional[str]:
    if d[:8] == b"\x89PNG\r\n\x1a\n":
        return "PNG"
    if d[:2] == b"\xff\xd8":
        return "JPEG"
    if d[:2] == b"BM":
        return "BMP"
    if d[:6] in (b"GIF87a", b"GIF89a"):
        return "GIF"
    if d[:4] == b"RIFF" and d[8:12] == b"WEBP":
        return "WebP"
    if d[:4] in (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+"):
        return "TIFF"
    if len(d) >= 2 and d[:1] == b"P" and d[1:2] in b"1234567":
        return "PNM"
    return None


def _header_size(d: bytes) -> Optional[tuple[str, int, int]]:
    fmt = _format_of(d)
    if fmt == "PNG":      # IHDR first: width, height (big-endian u32)
        if d[12:16] != b"IHDR":
            return None
        w, h = struct.unpack_from(">II", d, 16)
        return fmt, w, h
    if fmt == "JPEG":     # the first start-of-frame segment: height, width (big-endian u16)
        i = 2
        while i + 4 <= len(d):
            if d[i] != 0xFF:
                return None
            marker = d[i + 1]
            if marker == 0xFF:                     # fill byte
                i += 1
                continue
            if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:   # no length
                i += 2
                continue
            if marker in (0xD9, 0xDA):            # end of image, start of scan before any frame
                return None
            (length,) = struct.unpack_from(">H", d, i + 2)
            if length < 2:
                return None
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                h, w = struct.unpack_from(">HH", d, i + 5)
                return fmt, w, h
            i += 2 + length
        return None
    if fmt == "BMP":
        (header,) = struct.unpack_from("<I", d, 14)
        if header == 12:                           # OS/2 BITMAPCOREHEADER
            w, h = struct.unpack_from("<HH", d, 18)
        else:
            w, h = struct.unpack_from("<ii", d, 18)
        return fmt, w, abs(h)
    if fmt == "GIF":      # logical screen
        w, h = struct.unpack_from("<HH", d, 6)
        return fmt, w, h
    if fmt == "WebP":
        chunk = d[12:16]
        if chunk == b"VP8X":                       # canvas size - 1, 24-bit little-endian
            return fmt, 1 + int.from_bytes(d[24:27], "little"), 1 + int.from_bytes(d[27:30], "little")
        if chunk == b"VP8L" and d[20] == 0x2F:     # 14-bit width - 1, 14-bit height - 1
            (bits,) = struct.unpack_from("<I", d, 21)
            return fmt, 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
        if chunk == b"VP8 " and d[23:26] == b"\x9d\x01\x2a":
            w, h = struct.unpack_from("<HH", d, 26)
            return fmt, w & 0x3FFF, h & 0x3FFF
        return None
    if fmt == "TIFF":     # the first directory's ImageWidth (256) and ImageLength (257)
        order = "<" if d[:2] == b"II" else ">"
        big = d[2:4] in (b"+\0", b"\0+")
        if big:
            (ifd,) = struct.unpack_from(order + "Q", d, 8)
            (n,) = struct.unpack_from(order + "Q", d, ifd)
            first, size, entry = ifd + 8, 20, order + "HHQ"
        else:
            (ifd,) = struct.unpack_from(order + "I", d, 4)
            (n,) = struct.unpack_from(order + "H", d, ifd)
            first, size, entry = ifd + 2, 12, order + "HHI"
        dims = {}
        for k in range(min(n, 4096)):
            at = first + k * size
            tag, kind, _ = struct.unpack_from(entry, d, at)
            value_at = at + (12 if big else 8)
            if tag in (256, 257):
                if kind == 3:
                    (dims[tag],) = struct.unpack_from(order + "H", d, value_at)
                elif kind == 4:
                    (dims[tag],) = struct.unpack_from(order + "I", d, value_at)
                elif kind == 16 and big:
                    (dims[tag],) = struct.unpack_from(order + "Q", d, value_at)
                else:
                    return None
        if 256 in dims and 257 in dims:
            return fmt, dims[256], dims[257]
        return None
    if fmt == "PNM":      # P1-P6: width and height after the magic; P7 (PAM): WIDTH / HEIGHT lines
        head = d[:4096].split(b"\n")
        if d[1:2] == b"7":
            fields = {}
            for line in head[1:]:
                parts = line.split()
                if parts and parts[0] in (b"WIDTH", b"HEIGHT") and len(parts) > 1:
                    fields[parts[0]] = int(parts[1])
                if parts[:1] == [b"ENDHDR"]:
                    break
            if b"WIDTH" in fields and b"HEIGHT" in fields:
                return fmt, fields[b"WIDTH"], fields[b"HEIGHT"]
            return None
        tokens = []
        for line in head:
            tokens += line.split(b"#", 1)[0].split()
            if len(tokens) >= 3:
                return fmt, int(tokens[1]), int(tokens[2])
        return None
    return None


def _imdecode_upright(buf: np.ndarray, reduction: int = 1, oriented: bool = True) -> Optional[np.ndarray]:
    """cv2.imdecode keeping alpha and 16 bits (IMREAD_UNCHANGED), turned upright by the
    EXIF orientation, which IMREAD_UNCHANGED alone ignores (``oriented`` False: the
    image has none, a PNG without eXIf; one plain decode). A ``reduction`` of 2, 4 or
    8 (JPEG only: 8-bit, no alpha) has libjpeg decode that many times smaller, upright,
    in about half the time for 12 MP; where libjpeg cannot scale (lossless JPEG) the
    image is decoded whole."""
    if not oriented:
        return cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    if reduction > 1:
        img = cv2.imdecode(buf, {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                                 8: cv2.IMREAD_REDUCED_COLOR_8}[reduction])
        if img is not None and img.size:
            return img
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


MAX_FILE_BYTES = (1 << 31) - 1   # the largest file read whole (its pixels are limited apart)


def _read_error(source: str, err: int) -> InputError:
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
    return [_read_error(label, data) if isinstance(data, int) else data for data, label in zip(got, labels)]


def read_bytes(path: str | os.PathLike) -> bytes:
    """One file's bytes (``read_paths`` of one), or its InputError raised."""
    (data,) = read_paths([path], [os.fspath(path)])
    if isinstance(data, InputError):
        raise data
    return data


def read_file(path: str | os.PathLike, reduce: bool = False) -> np.ndarray:
    return decode(read_bytes(path), os.fspath(path), reduce)


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


def is_one_image(a: np.ndarray) -> bool:
    """Whether an array is one image ((H, W) or (H, W, C) with C in 1, 3, 4), not a batch."""
    return a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (1, 3, 4))


def check_batch_size(batch_size: Optional[int]) -> None:
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                   or batch_size < 1):
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")


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
    except Exception as e:   # Pillow's own errors (a truncated lazy image, a mode it cannot convert)
        raise InputError(f"{label}: cannot read this Pillow image (mode {getattr(img, 'mode', '?')}): "
                         f"{type(e).__name__}: {e}") from None
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
        except Exception as e:   # a GPU tensor (torch, CuPy) refuses an implicit copy to the host
            raise InputError(f"{label}: cannot read a {type(item).__name__} as a NumPy array ({type(e).__name__}: "
                             f"{e}); copy it to the host first (e.g. tensor.cpu(), cupy.asnumpy)") from None
    return None


def _bgr_to_rgb(a: np.ndarray, single: bool) -> np.ndarray:
    """An array of colour images given as OpenCV holds them (BGR, BGRA) in RGB(A) order."""
    channels = a.shape[-1] if a.ndim == (3 if single else 4) else 0
    if channels == 3:
        return a[..., ::-1]
    if channels == 4:
        return a[..., [2, 1, 0, 3]]
    return a


def _images(item: Any, label: str, reduce: bool = False,
            channel_order: str = "rgb") -> tuple[list[np.ndarray], list[str], bool]:
    """Splits one input into images. Returns (images, sources, was_single)."""
    if isinstance(item, Named):
        item = item.data
    if isinstance(item, (str, os.PathLike)):
        return [read_file(item, reduce)], [os.fspath(item)], True  # uint8: the photo path is faster on it
    if isinstance(item, (bytes, bytearray, memoryview)):
        return [decode(bytes(item), label, reduce)], [label], True
    pil = is_pil_image(item)   # RGB by definition: channel_order is about arrays
    if not isinstance(item, np.ndarray):
        converted = as_array(item, label)
        item = item if converted is None else converted
    if isinstance(item, np.ndarray) and channel_order == "bgr" and not pil:
        item = _bgr_to_rgb(item, is_one_image(item))
    if isinstance(item, np.ndarray):
        if item.dtype == object:
            raise InputError(f"{label}: object arrays are not images")
        if item.ndim not in (2, 3, 4):
            raise InputError(f"{label}: array of shape {item.shape} is not an image or a batch of images")
        single = is_one_image(item)
        if item.ndim == 4 and item.shape[3] not in (1, 3, 4):
            raise InputError(f"{label}: array of shape {item.shape} is not an image or a batch of images "
                             "((H, W), (H, W, C), (N, H, W) or (N, H, W, C) with C in 1, 3, 4)")
        h, w = item.shape[:2] if single else item.shape[1:3]
        if (single or item.shape[0]) and (h < 1 or w < 1):
            raise InputError(f"{label}: array of shape {item.shape} holds images of {w}x{h} pixels (empty)")
        _check_pixels(h, w, label, f"an array of shape {item.shape}: an image")
        if item.dtype == np.bool_ or item.dtype.kind not in "uif":
            raise InputError(f"{label}: unsupported dtype {item.dtype} (expected uint8, uint16 or float)")
        # One range decision for the whole array (see the module docstring).
        a = _to_pixels(item, label) if item.size else item.astype(np.float32)
        if single:
            return [a], [label], True
        return list(a), [f"{label}[{i}]" for i in range(a.shape[0])], False
    raise InputError(f"{label}: cannot classify a {type(item).__name__} "
                     "(give a path, bytes of an encoded image, a NumPy array, a Pillow image or a list of these)")


def _dark_ground(stack: np.ndarray) -> np.ndarray:
    """Per image of a stack (N, H, W[, C]) of pixels 0..255: whether the median of its
    outermost pixels (gray, alpha composited on white) is below mid-gray."""
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


def _prepare(img: np.ndarray, h: int, w: int, c: int, mode: str, source: str) -> tuple[np.ndarray, str]:
    """One image to float32 (h, w, c) pixels 0..255, and the path it took."""
    _need_cv2()
    if mode == "auto":
        mode = "mnist" if img.shape[:2] == (h, w) and _dark_ground(img[None])[0] else "photo"
    with _opencv_errors(source, img, mode):
        if mode == "photo":
            img = digit.to_mnist(img, source)
        return _fit(img, h, w, c, source), mode


@contextlib.contextmanager
def _opencv_errors(source: str, img: np.ndarray, what: str):
    """An OpenCV failure while preparing an image becomes an InputError naming it: a
    defect of the preparation on an unusual image (report it), never a crash of the
    caller. Found by tests/fuzz_targets.py: the photo path on a 32x65320 image."""
    try:
        yield
    except cv2.error as e:
        raise InputError(f"{source}: the {what} preparation failed on this {img.shape[1]}x{img.shape[0]} image "
                         f"(OpenCV: {_cv2_message(e)})") from None


def _assemble(blocks: list, sources: list[str], modes: list[str], single: bool, hwc: Sequence[int],
              scale: float, channels_first: bool) -> Batch:
    """The batch from blocks of rows, each float32 (n, h, w, c) pixels 0..255 of our own."""
    x = blocks[0] if len(blocks) == 1 else np.concatenate(blocks) if blocks else np.zeros((0, *hwc), np.float32)
    x *= np.float32(scale)
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if channels_first else x
    return Batch(nchw, sources, single, modes, x)


@dataclass
class Prepared:
    """Items turned into the model's images (pixels 0..255, not yet scaled)."""
    x: np.ndarray          # float32 (N, h, w, c): one row per image of the items that worked
    sources: list[str]     # per row: its label
    modes: list[str]       # per row: "mnist" or "photo"
    owner: list[int]       # per row: the index of the item it came from
    errors: list           # (item index, InputError) per item that failed, in item order
    single: bool           # the last item was one image (not a batch array)
    timings: dict = field(default_factory=dict)


class Named(NamedTuple):
    """An input with the name it goes by in results and errors (the CLI's "<stdin>")."""
    data: Any
    label: str


def label_of(item: Any, index: Optional[int]) -> str:
    """An input's name in results and errors: its path, else "<input i>" in a sequence, else
    "<bytes>" or "<array>"."""
    if isinstance(item, Named):
        return item.label
    if isinstance(item, InputError) and item.source:   # an input that failed before it got here
        return item.source
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    if index is not None:
        return f"<input {index}>"
    return "<bytes>" if isinstance(item, (bytes, bytearray, memoryview)) else "<array>"


def prepare(items: Sequence, labels: Sequence[str], input_hwc: Sequence[int], mode: str = "auto",
            threads: int = 1, channel_order: str = "rgb") -> Prepared:
    """Reads, decodes and prepares each item (a path, bytes, or an array of one image or a
    batch) into the model's images. An item that cannot be read or prepared (a blank page in
    photo mode included) is left out, its InputError (with ``source`` set to its label) in
    ``errors``: the caller decides what a failure means. ``threads``: the items are decoded,
    and images that need more than a resize are prepared, on this many threads (OpenCV runs
    without the GIL). ``channel_order``: "bgr" when colour arrays hold OpenCV's order."""
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r} (expected 'auto', 'mnist' or 'photo')")
    check_channel_order(channel_order)
    h, w, c = input_hwc

    def read(i: int):
        if isinstance(items[i], InputError):   # a file that could not be read, or failed before
            items[i].source = items[i].source or labels[i]
            return items[i]
        try:
            return _images(items[i], labels[i], True, channel_order)  # big JPEGs decoded smaller
        except InputError as e:
            e.source = labels[i]
            return e

    # 1. Decode: every item to its images (a batch array gives several). The files are
    # read first, all in one call of the core, and the core decodes the files and bytes
    # that are plain 8-bit grayscale PNGs of the model's size (the common case: a folder
    # of scans, a server's request bodies), with no Python per image.
    # Threads only for large encoded images: decoding a small PNG (~15 µs) is as much
    # Python as OpenCV, and two threads contending for the GIL were slower than one.
    started = time.perf_counter()
    items = list(items)
    native_owner, native = _read_native(items, labels, h, w, c)
    if (native_owner and len(native_owner) == len(items) and mode != "photo"
            and (mode == "mnist" or _dark_ground(native).all())):
        # Every item decoded by the core, all MNIST-like: the core's stack is the batch.
        decoded = time.perf_counter()
        return Prepared(native.reshape(len(items), h, w, 1).astype(np.float32), list(labels),
                        ["mnist"] * len(items), native_owner, [], True,
                        {"decode": decoded - started, "prepare": time.perf_counter() - decoded})
    todo = [i for i, item in enumerate(items) if item is not _DECODED]
    parts, sources, owner, single = [], [], [], False
    errors = []  # (item index, InputError), sorted into item order at the end
    decoders = threads if threads > 1 and _large_files([items[i] for i in todo]) else 1
    for i, got in zip(todo, _map(read, todo, decoders)):
        if isinstance(got, InputError):
            errors.append((i, got))
            continue
        imgs, srcs, single = got
        parts += imgs
        sources += srcs
        owner += [i] * len(imgs)
    if native_owner and (not owner or native_owner[-1] > owner[-1]):
        single = True   # the last item that gave images was a file

    # 2. Images already of the model's size with a dark background (MNIST-like) need no
    # more than a conversion: one vectorized check, and one array, for all of them. The
    # core's decoded files are such a stack already; those that are not MNIST-like join
    # the other images.
    decoded = time.perf_counter()
    moved: list = []
    if len(native_owner):
        direct = (np.ones(len(native_owner), bool) if mode == "mnist" else np.zeros(len(native_owner), bool)
                  if mode == "photo" else _dark_ground(native))
        moved = np.flatnonzero(~direct).tolist()
        for k in moved:
            parts.append(native[k])
            sources.append(labels[native_owner[k]])
            owner.append(native_owner[k])
        native_owner = np.asarray(native_owner, np.intp)[direct].tolist()
        native = native[direct].reshape(len(native_owner), h, w, 1)
    modes: list = [None] * len(parts)
    sized = [i for i, p in enumerate(parts)
             if p.shape[:2] == (h, w) and (p.shape[2:] == (c,) or p.ndim == 2 and c == 1)]
    is_direct = np.zeros(len(parts), bool)
    stack = None
    if sized and mode != "photo":
        same = [parts[i] for i in sized]
        if any(q.ndim != same[0].ndim or q.dtype != same[0].dtype for q in same):
            same = [np.asarray(q, np.float32).reshape(h, w, c) for q in same]
        stack = np.stack(same).reshape(len(sized), h, w, c)
        direct = np.ones(len(sized), bool) if mode == "mnist" else _dark_ground(stack)
        stack = stack.astype(np.float32)
        is_direct[np.asarray(sized, np.intp)[direct]] = True
        for i in np.flatnonzero(is_direct).tolist():
            modes[i] = "mnist"

    # 3. The rest, one image at a time: resized, or found and normalized as a photo.
    def prepare_one(i: int):
        try:
            return _prepare(parts[i], h, w, c, mode, sources[i])
        except InputError as e:
            e.source = labels[owner[i]]
            return e

    rows: dict = {}
    rest = np.flatnonzero(~is_direct).tolist()
    for i, got in zip(rest, _map(prepare_one, rest, threads)):
        parts[i] = None  # the decoded image is no longer needed
        if isinstance(got, InputError):
            errors.append((owner[i], got))
            continue
        rows[i], modes[i] = got

    # 4. One float32 array of the kept images, in item order: the stack itself when every
    # image took the direct path (the common case: no copy).
    failed = {i for i, _ in errors}
    keep = [i for i in range(len(parts)) if (is_direct[i] or i in rows) and owner[i] not in failed]
    if stack is not None and len(keep) == len(sized) == len(parts) and not rows:
        x = stack
    else:
        x = np.empty((len(keep), h, w, c), np.float32)
        if stack is not None and len(keep):
            keep_arr = np.asarray(keep, np.intp)
            from_stack = is_direct[keep_arr]
            stack_row = np.full(len(parts), -1, np.intp)
            stack_row[np.asarray(sized, np.intp)] = np.arange(len(sized))
            x[from_stack] = stack[stack_row[keep_arr[from_stack]]]
        for pos, i in enumerate(keep):
            if i in rows:
                x[pos] = rows[i]
    sources = [sources[i] for i in keep]
    modes = [modes[i] for i in keep]
    owner = [owner[i] for i in keep]
    if native_owner:   # the core's decoded files, MNIST-like: a stack of their own
        x = np.concatenate([native.astype(np.float32), x]) if len(keep) else native.astype(np.float32)
        sources = [labels[i] for i in native_owner] + sources
        modes = ["mnist"] * len(native_owner) + modes
        owner = native_owner + owner
    if moved or native_owner and keep:   # into item order (an item's rows stay together, in order)
        order = np.argsort(np.asarray(owner, np.intp), kind="stable")
        x = x[order]
        order = order.tolist()
        sources, modes, owner = [sources[k] for k in order], [modes[k] for k in order], [owner[k] for k in order]
    return Prepared(x, sources, modes, owner, sorted(errors, key=lambda pair: pair[0]), single,
                    {"decode": decoded - started, "prepare": time.perf_counter() - decoded})


_DECODED = object()   # in prepare's items: a file or bytes the core has decoded


def _read_native(items: list, labels: Sequence[str], h: int, w: int, c: int) -> tuple[list, np.ndarray]:
    """The core's lane, in place in items. The files among them (paths), when there are
    several, are read in one call of the core: each becomes Named(its bytes) or its
    InputError. For a one-channel model, each file or bytes that is a plain 8-bit grayscale
    PNG of h x w is decoded by the core and becomes _DECODED. Returns the decoded items'
    indices, ascending, and their pixels, uint8 (k, h, w) in the same order."""
    gray = c == 1 and bool(_core.png_decoder) and h * w <= max_image_pixels()
    owner: list = []
    pixels = np.zeros((0, h, w), np.uint8)
    files = [i for i, item in enumerate(items) if isinstance(item, (str, os.PathLike))]
    if len(files) >= 2:   # one file is read by decode's own path
        paths = [os.fsencode(items[i]) for i in files]
        if gray:
            got, pixels, rows = _core.read_gray_images(paths, MAX_FILE_BYTES, h, w)
            owner = np.asarray(files, np.intp)[rows >= 0].tolist()
        else:
            got = _core.read_files(paths, MAX_FILE_BYTES)
        for i, data in zip(files, got):
            items[i] = (_DECODED if data is None else _read_error(labels[i], data) if isinstance(data, int)
                        else Named(data, labels[i]))
    if not gray:
        return owner, pixels
    # Bytes (a server's request bodies, infer(png_bytes)); the files just read were offered already.
    read = set(files) if len(files) >= 2 else ()
    blobs = [i for i, item in enumerate(items) if i not in read and
             type(item.data if type(item) is Named else item) is bytes]
    if not blobs:
        return owner, pixels
    more, rows = _core.decode_gray_pngs([items[i].data if type(items[i]) is Named else items[i] for i in blobs],
                                        h, w)
    if not len(more):
        return owner, pixels
    decoded = [i for i, row in zip(blobs, rows.tolist()) if row >= 0]
    for i in decoded:
        items[i] = _DECODED
    if not owner:
        return decoded, more
    order = np.argsort(owner + decoded, kind="stable")   # item order: files and bytes interleave
    return np.asarray(owner + decoded, np.intp)[order].tolist(), np.concatenate([pixels, more])[order]


def to_batch(images: Any, input_hwc: Sequence[int], scale: float, channels_first: bool = False,
             mode: str = "auto", on_error: Optional[Callable[[InputError], Any]] = None,
             threads: int = 1, channel_order: str = "rgb") -> Batch:
    """Turns any accepted input into the model's float32 input batch.

    ``mode``: "auto", "mnist" or "photo" (see the module docstring). ``on_error``: for
    a list, a callable given the InputError of each item that cannot be read or
    prepared (a blank page in photo mode included); that item is left out. By default,
    and for an input that is not a list, the error is raised (the first one in input
    order). ``threads``, ``channel_order``: see ``prepare``."""
    listed = isinstance(images, (list, tuple))
    items = list(images) if listed else [images]
    got = prepare(items, [label_of(item, i if listed else None) for i, item in enumerate(items)], input_hwc, mode,
                  threads, channel_order)
    for _, e in got.errors:
        if on_error is None or not listed:
            raise e
        on_error(e)
    batch = _assemble([got.x], got.sources, got.modes, got.single and not listed, input_hwc, scale, channels_first)
    batch.timings = got.timings
    return batch


def _large_files(items: list, average: int = 64 << 10) -> bool:
    """Whether the encoded images among items (paths, bytes) average `average` bytes
    or more: photos, worth decoding on several threads."""
    sizes = []
    for item in items:
        item = item.data if isinstance(item, Named) else item
        if isinstance(item, (bytes, bytearray, memoryview)):
            sizes.append(len(item))
        elif isinstance(item, (str, os.PathLike)):
            try:
                sizes.append(os.path.getsize(item))
            except OSError:
                pass
    return bool(sizes) and sum(sizes) >= average * len(sizes)


# Below this many items, threads cost more than they save.
_THREADED_ITEMS = 8
_pools: dict = {}


def _map(fn: Callable, indices, threads: int) -> list:
    """fn over indices, in order, split into ``threads`` contiguous chunks: the calling
    thread runs the first, pool threads (kept per count) the others."""
    indices = list(indices)
    if threads <= 1 or len(indices) < _THREADED_ITEMS:
        return [fn(i) for i in indices]
    pool = _pools.get(threads - 1)
    if pool is None:
        pool = _pools[threads - 1] = ThreadPoolExecutor(threads - 1, thread_name_prefix="lenet-preprocess")
    bounds = [len(indices) * k // threads for k in range(threads + 1)]
    chunks = [indices[bounds[k]:bounds[k + 1]] for k in range(threads)]
    others = [pool.submit(lambda part: [fn(i) for i in part], part) for part in chunks[1:]]
    out = [fn(i) for i in chunks[0]]
    for f in others:
        out += f.result()
    return out


def number_batch(image: Any, input_hwc: Sequence[int], scale: float, channels_first: bool,
                 run: Callable[[np.ndarray], np.ndarray],
                 channel_order: str = "rgb") -> tuple[Batch, list[tuple[int, int, int, int]], str]:
    """The digits of a number written left to right in one image (a path, bytes or
    an array) as the model's batch, each digit's box (x, y, w, h) in the image, and
    the image's label. ``run`` (the model: a batch's x -> probabilities) chooses
    between reading a wide blob as one digit or as several touching ones."""
    _need_cv2()
    label = "<bytes>" if isinstance(image, (bytes, bytearray, memoryview)) else "<array>"
    reduced = 1.0  # a big JPEG is decoded smaller, as for infer; the boxes are scaled back
    if isinstance(image, (str, os.PathLike, bytes, bytearray, memoryview)):
        data = read_bytes(image) if isinstance(image, (str, os.PathLike)) else bytes(image)
        source = os.fspath(image) if isinstance(image, (str, os.PathLike)) else label
        parts, sources, single = [decode(data, source, reduce=True)], [source], True
        _, w, h = image_size(data, source)
        reduced = max(w, h) / max(parts[0].shape[:2])
    else:
        check_channel_order(channel_order)
        parts, sources, single = _images(image, label, False, channel_order)
    if not single:
        raise InputError(f"{label}: read_number takes one image, not a batch of {len(parts)}")

    def batch(frames) -> Batch:
        h, w, c = input_hwc
        rows = [_fit(f, h, w, c, sources[0])[None] for f in frames]
        return _assemble(rows, [f"{sources[0]}[{k}]" for k in range(len(rows))], ["photo"] * len(rows), False,
                         input_hwc, scale, channels_first)

    with _opencv_errors(sources[0], parts[0], "number"):
        frames, boxes = number.find_number(parts[0], lambda frames: run(batch(frames).x), sources[0])
    if reduced != 1:
        boxes = [tuple(round(v * reduced) for v in box) for box in boxes]
    return batch(frames), boxes, sources[0]
