"""Images in, the model's rows out: decoding, then one of two preprocessing paths.

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
  outermost pixels, gray, is below 128), or is a clean drawing of that size dark on white
  paper for a one-channel model (``pixels.clean_drawing``), read as its negative; "photo"
  otherwise — whatever the image came from: a file, bytes or an array.

The rows keep pixels 0..255: uint8 where every image is as it was given (a uint8
array, a decoded 8-bit file, nothing resized), float32 otherwise; the engine multiplies
them by the model's input scale (1/255 for the shipped models), in the core for uint8
rows (``Engine.row_probabilities``).

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
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from .. import _pools
from .._native import _core
from ..errors import InputError
from ..results import Skipped
from .decode import MAX_FILE_BYTES, cv2_message, decode, read_bytes, read_error, read_file
from .limits import check_pixels, max_image_pixels
from .pixels import (
    as_array,
    bgr_to_rgb,
    check_channel_order,
    clean_drawing,
    cv2,
    dark_ground,
    fit,
    is_one_image,
    is_pil_image,
    need_cv2,
    to_pixels,
)
from .sniff import image_size

if TYPE_CHECKING:
    from .number import FoundNumber

MODES = ("auto", "mnist", "photo")


class Named(NamedTuple):
    """An input with the name it goes by in results and errors (the CLI's "<stdin>")."""

    data: Any
    label: str


def label_of(item: Any, index: Optional[int]) -> str:
    """An input's name in results and errors: its path, else "<input i>" in a sequence, else
    "<bytes>" or "<array>"."""
    if isinstance(item, Named):
        return item.label
    if isinstance(item, InputError) and item.source:  # an input that failed before it got here
        return item.source
    if isinstance(item, (str, os.PathLike)):
        return os.fspath(item)
    if index is not None:
        return f"<input {index}>"
    return "<bytes>" if isinstance(item, (bytes, bytearray, memoryview)) else "<array>"


_ZERO = np.zeros(1, np.intp)
_ZERO.flags.writeable = False


class Rows:
    """Prepared images and where each came from, as columns that stay aligned: every
    operation (take, concat, ordering) applies to all of them at once, so a row can
    never be paired with another row's label.

    ``x``: (n, h, w, c) pixels 0..255, uint8 when every row is an image as it was given,
    else float32; ``item``: the index of the input each row came from; ``sub``: its
    place among that input's images (a batch array gives several); ``source``: its
    label ("path", "<array>[3]"); ``mode``: the path it took, "mnist" or "photo";
    ``several``: bool per row, whether the photo path saw several digits where it framed
    one (``digit.to_mnist``), or None where no row did."""

    __slots__ = ("x", "item", "sub", "source", "mode", "several")

    def __init__(self, x: np.ndarray, item, sub, source: list, mode: list, several=None):
        self.x, self.source, self.mode = x, source, mode
        self.item = np.asarray(item, np.intp)
        self.sub = np.asarray(sub, np.intp)
        self.several = None if several is None or not np.any(several) else np.asarray(several, bool)
        assert len(self.x) == len(self.item) == len(self.sub) == len(source) == len(mode)
        assert self.several is None or len(self.several) == len(self.item)

    @staticmethod
    def one(x: np.ndarray, source: str, mode: str) -> "Rows":
        """One row (x: (1, h, w, c)) of input 0."""
        rows = Rows.__new__(Rows)
        rows.x, rows.item, rows.sub, rows.source, rows.mode, rows.several = x, _ZERO, _ZERO, [source], [mode], None
        return rows

    @staticmethod
    def empty(hwc: Sequence[int]) -> "Rows":
        return Rows(np.zeros((0, *hwc), np.uint8), [], [], [], [])

    def __len__(self) -> int:
        return len(self.item)

    def take(self, index) -> "Rows":
        index = np.asarray(index, np.intp)
        picks = index.tolist()
        return Rows(
            self.x[index],
            self.item[index],
            self.sub[index],
            [self.source[i] for i in picks],
            [self.mode[i] for i in picks],
            None if self.several is None else self.several[index],
        )

    @staticmethod
    def concat(parts: list, hwc: Sequence[int]) -> "Rows":
        parts = [p for p in parts if len(p)]
        if not parts:
            return Rows.empty(hwc)
        if len(parts) == 1:
            return parts[0]
        dtype = np.uint8 if all(p.x.dtype == np.uint8 for p in parts) else np.float32
        return Rows(
            np.concatenate([p.x.astype(dtype, copy=False) for p in parts]),
            np.concatenate([p.item for p in parts]),
            np.concatenate([p.sub for p in parts]),
            [s for p in parts for s in p.source],
            [m for p in parts for m in p.mode],
            None
            if all(p.several is None for p in parts)
            else np.concatenate([np.zeros(len(p), bool) if p.several is None else p.several for p in parts]),
        )

    def in_item_order(self) -> "Rows":
        """Ordered by input, then by place within the input."""
        if len(self.item) < 2:
            return self
        order = np.lexsort((self.sub, self.item))
        if (order == np.arange(len(order))).all():
            return self
        return self.take(order)


@dataclass
class Prepared:
    """Inputs turned into the model's rows (``rows``, in input order), the inputs that
    failed (``errors``: (input index, InputError), in input order), whether the input was
    one image (``single``: a path, bytes or one image array, not a batch), and the
    seconds spent decoding and preparing (``timings``)."""

    rows: Rows
    errors: list
    single: bool
    timings: dict = field(default_factory=dict)

    # The columns, as the tests and the server read them.
    @property
    def x(self) -> np.ndarray:
        return self.rows.x

    @property
    def sources(self) -> list:
        return self.rows.source

    @property
    def modes(self) -> list:
        return self.rows.mode

    @property
    def owner(self) -> list:
        return self.rows.item.tolist()


def images_of(
    item: Any, label: str, reduce: bool = False, channel_order: str = "rgb"
) -> tuple[list[np.ndarray], list[str], bool]:
    """Splits one input into images. Returns (images, sources, was_single)."""
    if isinstance(item, Named):
        item = item.data
    if isinstance(item, (str, os.PathLike)):
        return [read_file(item, reduce)], [os.fspath(item)], True  # uint8: the photo path is faster on it
    if isinstance(item, (bytes, bytearray, memoryview)):
        return [decode(bytes(item), label, reduce)], [label], True
    pil = is_pil_image(item)  # RGB by definition: channel_order is about arrays
    if not isinstance(item, np.ndarray):
        converted = as_array(item, label)
        item = item if converted is None else converted
    if isinstance(item, np.ndarray) and channel_order == "bgr" and not pil:
        item = bgr_to_rgb(item, is_one_image(item))
    if isinstance(item, np.ndarray):
        if item.dtype == object:
            raise InputError(f"{label}: object arrays are not images")
        if item.ndim not in (2, 3, 4):
            raise InputError(f"{label}: array of shape {item.shape} is not an image or a batch of images")
        single = is_one_image(item)
        if item.ndim == 4 and item.shape[3] not in (1, 3, 4):
            raise InputError(
                f"{label}: array of shape {item.shape} is not an image or a batch of images "
                "((H, W), (H, W, C), (N, H, W) or (N, H, W, C) with C in 1, 3, 4)"
            )
        h, w = item.shape[:2] if single else item.shape[1:3]
        if (single or item.shape[0]) and (h < 1 or w < 1):
            raise InputError(f"{label}: array of shape {item.shape} holds images of {w}x{h} pixels (empty)")
        check_pixels(h, w, label, f"an array of shape {item.shape}: an image")
        if item.dtype == np.bool_ or item.dtype.kind not in "uif":
            raise InputError(f"{label}: unsupported dtype {item.dtype} (expected uint8, uint16 or float)")
        # One range decision for the whole array (see the module docstring).
        a = to_pixels(item, label) if item.size else item.astype(np.float32)
        if single:
            return [a], [label], True
        return list(a), [f"{label}[{i}]" for i in range(a.shape[0])], False
    raise InputError(
        f"{label}: cannot classify a {type(item).__name__} "
        "(give a path, bytes of an encoded image, a NumPy array, a Pillow image or a list of these)"
    )


def _prepare_one(img: np.ndarray, h: int, w: int, c: int, mode: str, source: str) -> tuple[np.ndarray, str, bool]:
    """One image to float32 (h, w, c) pixels 0..255, the path it took, and whether the
    photo path saw several digits in it."""
    need_cv2()
    if mode == "auto":
        sized = img.shape[:2] == (h, w)
        if sized and c == 1 and clean_drawing(img):  # dark on white paper: its negative is MNIST-like
            img, mode = 255 - img, "mnist"
        else:
            mode = "mnist" if sized and dark_ground(img[None])[0] else "photo"
    several = False
    with _opencv_errors(source, img, mode):
        if mode == "photo":
            from . import digit  # the photo path, and OpenCV, on its first photo

            img, several = digit.to_mnist(img, source)
        return fit(img, h, w, c, source), mode, several


@contextlib.contextmanager
def _opencv_errors(source: str, img: np.ndarray, what: str):
    """An OpenCV failure while preparing an image becomes an InputError naming it: a
    defect of the preparation on an unusual image (report it), never a crash of the
    caller. Found by tests/fuzz_targets.py: the photo path on a 32x65320 image."""
    try:
        yield
    except cv2.error as e:
        raise InputError(
            f"{source}: the {what} preparation failed on this {img.shape[1]}x{img.shape[0]} image "
            f"(OpenCV: {cv2_message(e)})"
        ) from None


def _pixel_stack(items: list, labels: Sequence[str], h: int, w: int, c: int, mode: str) -> Optional[Prepared]:
    """The fast lane: inputs that are uint8 arrays of the model's size (one image, a batch
    of them, or a list of images) for a one-channel model, all with MNIST's dark ground
    (or mode "mnist"), are the rows as they are: no per-image work. None when the inputs
    are anything else; the general path then handles them."""
    if c != 1 or mode == "photo" or h < 2 or w < 2 or not items:
        return None
    one = len(items) == 1
    if one:  # the most common call of all, infer(one array), in as few steps as can be
        a = items[0]
        if type(a) is np.ndarray and a.dtype == np.uint8 and (a.shape == (h, w) or a.shape == (h, w, 1)):
            if h * w > max_image_pixels():
                check_pixels(h, w, labels[0], f"an array of shape {a.shape}: an image")
            x = a.reshape(1, h, w, 1)
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            if mode == "mnist" or _core.dark_ground(x)[0]:
                return Prepared(Rows.one(x, labels[0], "mnist"), [], True)
            return None
    arrays = []
    for item in items:
        if type(item) is not np.ndarray or item.dtype != np.uint8:
            return None
        if item.shape in ((h, w), (h, w, 1)):
            arrays.append(item.reshape(1, h, w, 1))
        elif (
            one
            and item.ndim in (3, 4)
            and not is_one_image(item)
            and item.shape[1:3] == (h, w)
            and item.shape[3:] in ((), (1,))
            and len(item)
        ):
            arrays.append(item.reshape(len(item), h, w, 1))
        else:
            return None
    check_pixels(h, w, labels[0], f"an array of shape {items[0].shape}: an image")
    x = np.ascontiguousarray(arrays[0] if one else np.concatenate(arrays))
    if mode == "auto" and not _core.dark_ground(x).all():
        return None
    n = len(x)
    if one and n == 1 and is_one_image(items[0]):
        return Prepared(Rows(x, [0], [0], [labels[0]], ["mnist"]), [], True)
    if one:
        return Prepared(Rows(x, [0] * n, range(n), [f"{labels[0]}[{i}]" for i in range(n)], ["mnist"] * n), [], False)
    return Prepared(Rows(x, range(n), [0] * n, list(labels), ["mnist"] * n), [], True)


def prepare(
    items: Sequence,
    labels: Sequence[str],
    input_hwc: Sequence[int],
    mode: str = "auto",
    threads: int = 1,
    channel_order: str = "rgb",
) -> Prepared:
    """Reads, decodes and prepares each item (a path, bytes, or an array of one image or a
    batch) into the model's rows. An item that cannot be read or prepared (a blank page in
    photo mode included) is left out, its InputError (with ``source`` set to its label) in
    ``errors``: the caller decides what a failure means. ``threads``: the items are decoded,
    and images that need more than a resize are prepared, on this many threads (OpenCV runs
    without the GIL). ``channel_order``: "bgr" when colour arrays hold OpenCV's order."""
    if mode not in MODES:
        raise InputError(f"unknown mode {mode!r} (expected 'auto', 'mnist' or 'photo')")
    check_channel_order(channel_order)
    h, w, c = input_hwc
    started = time.perf_counter()
    items = list(items)
    fast = _pixel_stack(items, labels, h, w, c, mode)
    if fast is not None:
        fast.timings = {"decode": 0.0, "prepare": time.perf_counter() - started}
        return fast

    # 1. Decode. The files are read first, all in one call of the core, and the core
    # decodes the files and bytes that are plain 8-bit grayscale PNGs of the model's size
    # (the common case: a folder of scans, a server's request bodies), with no Python per
    # image: those are `native`, a uint8 stack. Every other item becomes its images here.
    # Threads only for large encoded images: decoding a small PNG (~15 µs) is as much
    # Python as OpenCV, and two threads contending for the GIL were slower than one.
    native = _read_native(items, labels, h, w, c)
    errors: list = []  # (item index, InputError), sorted into item order at the end
    if len(native) == len(items) and mode != "photo" and (mode == "mnist" or dark_ground(native.x).all()):
        # Every item decoded by the core, all MNIST-like: the core's stack is the batch.
        native.mode = ["mnist"] * len(native)
        decoded = time.perf_counter()
        return Prepared(native, errors, True, {"decode": decoded - started, "prepare": time.perf_counter() - decoded})

    def read(i: int):
        if isinstance(items[i], InputError):  # a file that could not be read, or failed before
            items[i].source = items[i].source or labels[i]
            return items[i]
        try:
            return images_of(items[i], labels[i], True, channel_order)  # big JPEGs decoded smaller
        except InputError as e:
            e.source = labels[i]
            return e

    todo = [i for i, item in enumerate(items) if item is not _DECODED]
    decoders = threads if threads > 1 and _large_files([items[i] for i in todo]) else 1
    # The decoded images not yet rows: parallel lists are confined to this function.
    images, where, sources = [], [], []  # pixels, (item, sub), label
    single = False
    for i, got in zip(todo, _pools.map_chunks(read, todo, decoders)):
        if isinstance(got, InputError):
            errors.append((i, got))
            continue
        imgs, srcs, single = got
        images += imgs
        where += [(i, k) for k in range(len(imgs))]
        sources += srcs
    if len(native) and (not where or native.item[-1] > where[-1][0]):
        single = True  # the last item that gave images was a file
    decoded = time.perf_counter()

    # 2. Images already of the model's size with a dark background (MNIST-like) need no
    # more than their rows: one vectorized check, and one array, for all of them. The
    # core's decoded files are such a stack already; those that are not MNIST-like join
    # the other images.
    parts: list = []
    if len(native):
        direct = (
            np.ones(len(native), bool)
            if mode == "mnist"
            else np.zeros(len(native), bool)
            if mode == "photo"
            else dark_ground(native.x)
        )
        kept = native.take(np.flatnonzero(direct))
        kept.mode = ["mnist"] * len(kept)
        parts.append(kept)
        for k in np.flatnonzero(~direct).tolist():
            images.append(native.x[k, :, :, 0])
            where.append((int(native.item[k]), 0))
            sources.append(native.source[k])
    is_direct = np.zeros(len(images), bool)
    sized = [
        i for i, p in enumerate(images) if p.shape[:2] == (h, w) and (p.shape[2:] == (c,) or p.ndim == 2 and c == 1)
    ]
    if sized and mode != "photo":
        same = [images[i] for i in sized]
        if any(q.ndim != same[0].ndim or q.dtype != same[0].dtype for q in same):
            same = [np.asarray(q, np.float32).reshape(h, w, c) for q in same]
        stack = np.stack(same).reshape(len(sized), h, w, c)
        direct = np.ones(len(sized), bool) if mode == "mnist" else dark_ground(stack)
        picked = np.asarray(sized, np.intp)[direct]
        is_direct[picked] = True
        if stack.dtype != np.uint8:
            stack = stack.astype(np.float32)
        picks = picked.tolist()
        parts.append(
            Rows(
                stack[direct],
                [where[i][0] for i in picks],
                [where[i][1] for i in picks],
                [sources[i] for i in picks],
                ["mnist"] * len(picks),
            )
        )

    # 3. The rest, one image at a time: resized, or found and normalized as a photo.
    def prepare_one(i: int):
        try:
            return _prepare_one(images[i], h, w, c, mode, sources[i])
        except InputError as e:
            e.source = labels[where[i][0]]
            return e

    rest = np.flatnonzero(~is_direct).tolist()
    done_x, done = [], []
    for i, got in zip(rest, _pools.map_chunks(prepare_one, rest, threads)):
        images[i] = None  # the decoded image is no longer needed
        if isinstance(got, InputError):
            errors.append((where[i][0], got))
            continue
        done_x.append(got[0])
        done.append((i, *got[1:]))
    if done:
        parts.append(
            Rows(
                np.stack(done_x),
                [where[i][0] for i, _, _ in done],
                [where[i][1] for i, _, _ in done],
                [sources[i] for i, _, _ in done],
                [m for _, m, _ in done],
                [several for _, _, several in done],
            )
        )

    # 4. The rows in input order, those of an input that failed left out.
    rows = Rows.concat(parts, (h, w, c)).in_item_order()
    if errors:
        failed = np.asarray(sorted({i for i, _ in errors}), np.intp)
        rows = rows.take(np.flatnonzero(~np.isin(rows.item, failed)))
    return Prepared(
        rows,
        sorted(errors, key=lambda pair: pair[0]),
        single,
        {"decode": decoded - started, "prepare": time.perf_counter() - decoded},
    )


_DECODED = object()  # in prepare's items: a file or bytes the core has decoded


def _read_native(items: list, labels: Sequence[str], h: int, w: int, c: int) -> Rows:
    """The core's lane, in place in items. The files among them (paths) are read in one call
    of the core: each becomes Named(its bytes) or its InputError. For a one-channel model,
    each file or bytes that is a plain 8-bit grayscale PNG of h x w is decoded by the core and
    becomes _DECODED. Returns their rows, uint8 (k, h, w, 1), in item order (their mode not
    yet decided: None)."""
    gray = c == 1 and bool(_core.png_decoder) and h * w <= max_image_pixels()
    owner: list = []
    pixels = np.zeros((0, h, w), np.uint8)
    files = [i for i, item in enumerate(items) if isinstance(item, (str, os.PathLike))]
    if files:
        paths = [os.fsencode(items[i]) for i in files]
        if gray:
            got, pixels, rows = _core.read_gray_images(paths, MAX_FILE_BYTES, h, w)
            owner = np.asarray(files, np.intp)[rows >= 0].tolist()
        else:
            got = _core.read_files(paths, MAX_FILE_BYTES)
        for i, data in zip(files, got):
            items[i] = (
                _DECODED
                if data is None
                else read_error(labels[i], data)
                if isinstance(data, int)
                else Named(data, labels[i])
            )
    if gray:
        # Bytes (a server's request bodies, infer(png_bytes)); the files just read were offered already.
        read = set(files)
        blobs = [
            i
            for i, item in enumerate(items)
            if i not in read and type(item.data if type(item) is Named else item) is bytes
        ]
        if blobs:
            more, rows = _core.decode_gray_pngs(
                [items[i].data if type(items[i]) is Named else items[i] for i in blobs], h, w
            )
            if len(more):
                decoded = [i for i, row in zip(blobs, rows.tolist()) if row >= 0]
                for i in decoded:
                    items[i] = _DECODED
                owner, pixels = owner + decoded, np.concatenate([pixels, more])
    n = len(owner)
    return Rows(pixels.reshape(n, h, w, 1), owner, [0] * n, [labels[i] for i in owner], [None] * n).in_item_order()


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


def check_batch_size(batch_size: Optional[int]) -> None:
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1):
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")


def prepare_number(
    image: Any, input_hwc: Sequence[int], probabilities: Callable[[np.ndarray], np.ndarray], channel_order: str = "rgb"
) -> tuple[Rows, FoundNumber, str]:
    """The digits of a number written left to right in one image (a path, bytes or an
    array) as the model's rows, what ``number.find_number`` found (its boxes in the
    image's pixels, its skipped marks as ``Skipped``), and the image's label.
    ``probabilities`` (the engine: rows -> probabilities) chooses between reading a wide
    blob as one digit or as several touching ones."""
    need_cv2()
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
        parts, sources, single = images_of(image, label, False, channel_order)
    if not single:
        raise InputError(f"{label}: read_number takes one image, not a batch of {len(parts)}")
    h, w, c = input_hwc

    def rows(frames) -> Rows:
        n = len(frames)
        x = np.stack([fit(f, h, w, c, sources[0]) for f in frames]) if n else np.zeros((0, h, w, c), np.float32)
        return Rows(x, [0] * n, range(n), [f"{sources[0]}[{k}]" for k in range(n)], ["photo"] * n)

    from . import number

    with _opencv_errors(sources[0], parts[0], "number"):
        found = number.find_number(parts[0], lambda frames: probabilities(rows(frames).x), sources[0])
    scaled = lambda box: tuple(round(v * reduced) for v in box)  # noqa: E731
    found = found._replace(
        boxes=[scaled(box) for box in found.boxes], skipped=tuple(Skipped(scaled(b), why) for b, why in found.skipped)
    )
    return rows(found.frames), found, sources[0]
