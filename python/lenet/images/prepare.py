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
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np

from .._native import _core
from ..errors import InputError
from . import digit, number
from .decode import MAX_FILE_BYTES, cv2_message, decode, read_bytes, read_error, read_file
from .limits import check_pixels, max_image_pixels
from .pixels import (as_array, bgr_to_rgb, check_channel_order, cv2, dark_ground, fit, is_one_image, is_pil_image,
                     need_cv2, to_pixels)
from .sniff import image_size

MODES = ("auto", "mnist", "photo")


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


def images_of(item: Any, label: str, reduce: bool = False,
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
        item = bgr_to_rgb(item, is_one_image(item))
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
        check_pixels(h, w, label, f"an array of shape {item.shape}: an image")
        if item.dtype == np.bool_ or item.dtype.kind not in "uif":
            raise InputError(f"{label}: unsupported dtype {item.dtype} (expected uint8, uint16 or float)")
        # One range decision for the whole array (see the module docstring).
        a = to_pixels(item, label) if item.size else item.astype(np.float32)
        if single:
            return [a], [label], True
        return list(a), [f"{label}[{i}]" for i in range(a.shape[0])], False
    raise InputError(f"{label}: cannot classify a {type(item).__name__} "
                     "(give a path, bytes of an encoded image, a NumPy array, a Pillow image or a list of these)")


def _prepare(img: np.ndarray, h: int, w: int, c: int, mode: str, source: str) -> tuple[np.ndarray, str]:
    """One image to float32 (h, w, c) pixels 0..255, and the path it took."""
    need_cv2()
    if mode == "auto":
        mode = "mnist" if img.shape[:2] == (h, w) and dark_ground(img[None])[0] else "photo"
    with _opencv_errors(source, img, mode):
        if mode == "photo":
            img = digit.to_mnist(img, source)
        return fit(img, h, w, c, source), mode


@contextlib.contextmanager
def _opencv_errors(source: str, img: np.ndarray, what: str):
    """An OpenCV failure while preparing an image becomes an InputError naming it: a
    defect of the preparation on an unusual image (report it), never a crash of the
    caller. Found by tests/fuzz_targets.py: the photo path on a 32x65320 image."""
    try:
        yield
    except cv2.error as e:
        raise InputError(f"{source}: the {what} preparation failed on this {img.shape[1]}x{img.shape[0]} image "
                         f"(OpenCV: {cv2_message(e)})") from None


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
            return images_of(items[i], labels[i], True, channel_order)  # big JPEGs decoded smaller
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
            and (mode == "mnist" or dark_ground(native).all())):
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
                  if mode == "photo" else dark_ground(native))
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
        direct = np.ones(len(sized), bool) if mode == "mnist" else dark_ground(stack)
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
            items[i] = (_DECODED if data is None else read_error(labels[i], data) if isinstance(data, int)
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


def check_batch_size(batch_size: Optional[int]) -> None:
    if batch_size is not None and (not isinstance(batch_size, int) or isinstance(batch_size, bool)
                                   or batch_size < 1):
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")


def number_batch(image: Any, input_hwc: Sequence[int], scale: float, channels_first: bool,
                 run: Callable[[np.ndarray], np.ndarray],
                 channel_order: str = "rgb") -> tuple[Batch, list[tuple[int, int, int, int]], str]:
    """The digits of a number written left to right in one image (a path, bytes or
    an array) as the model's batch, each digit's box (x, y, w, h) in the image, and
    the image's label. ``run`` (the model: a batch's x -> probabilities) chooses
    between reading a wide blob as one digit or as several touching ones."""
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

    def batch(frames) -> Batch:
        h, w, c = input_hwc
        rows = [fit(f, h, w, c, sources[0])[None] for f in frames]
        return _assemble(rows, [f"{sources[0]}[{k}]" for k in range(len(rows))], ["photo"] * len(rows), False,
                         input_hwc, scale, channels_first)

    with _opencv_errors(sources[0], parts[0], "number"):
        frames, boxes = number.find_number(parts[0], lambda frames: run(batch(frames).x), sources[0])
    if reduced != 1:
        boxes = [tuple(round(v * reduced) for v in box) for box in boxes]
    return batch(frames), boxes, sources[0]
