"""Streaming classification: any number of inputs, in bounded memory, results in input order.

The calling thread pulls inputs from the iterable a chunk at a time and hands each chunk to
a reader thread, which reads, decodes and prepares it (``images.prepare``: OpenCV
releases the GIL while it decodes); the calling thread runs the engine on each prepared
chunk in input order, while the readers work on the chunks after it. At most ``readahead``
chunks are in flight, so what is alive at any time is bounded by

    readers x (the largest decoded image) + readahead x chunk x (one input image's row)

however many inputs there are. Chunks start small (the first results come early) and are
then sized from the measured time per input, to about 50 ms of reading each (up to
``batch_size`` inputs): many small files share a batch, a 12-megapixel photo is a chunk
of its own.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from itertools import islice
from typing import Any, Iterator, Optional, Union

import numpy as np

from . import _pools, images, paths
from .errors import InputError

DEFAULT_BATCH_SIZE = 1024  # 256 streamed 28x28 PNGs ~15% slower (PERFORMANCE.md)
FIRST_CHUNK = 4  # inputs in the first chunk, before anything was measured
CHUNK_SECONDS = 0.05  # reading time aimed at per chunk
ERRORS = ("yield", "raise")


def one_input(inputs: Any) -> bool:
    """Whether ``inputs`` is one input (a path, bytes, a Pillow image), not an iterable of them."""
    return isinstance(inputs, (str, os.PathLike, bytes, bytearray, memoryview)) or images.is_pil_image(inputs)


def items_of(inputs: Any) -> tuple[Iterator[Any], bool]:
    """The inputs as an iterator of items, and whether the input was one image. One path,
    bytes or one image array is one item; a directory or a glob gives the files it names
    (``paths.expand``: as lenet-cli reads them), in an iterable too; a batch array gives
    its images; any other iterable (a list, a generator, a map over a file's lines) gives
    its elements."""
    if one_input(inputs):
        if isinstance(inputs, (str, os.PathLike)) and paths.names_many(inputs):
            return paths.expand(inputs), False  # a directory, a glob: walked as lenet-cli walks them
        return iter([inputs]), True
    if not isinstance(inputs, (np.ndarray, list, tuple)) and hasattr(inputs, "__array__"):
        inputs = images.as_array(inputs, "<array>")  # a torch tensor, a JAX array: one array, not an iterable
    if isinstance(inputs, np.ndarray):
        if inputs.ndim not in (3, 4) or images.is_one_image(inputs):
            return iter([inputs]), True  # one image (or an array prepare refuses with its reason)
        return iter(inputs), False
    try:
        return _expanded(iter(inputs)), False
    except TypeError:
        raise InputError(
            f"cannot classify a {type(inputs).__name__} (give a path, bytes of an encoded image, "
            "a NumPy array, or an iterable of these)"
        ) from None


def _expanded(items: Iterator[Any]) -> Iterator[Any]:
    """The items, each path that names a directory or a glob replaced by the files it names."""
    for item in items:
        if isinstance(item, (str, os.PathLike)) and paths.names_many(item):
            yield from paths.expand(item)
        else:
            yield item


def batches(
    engine,
    inputs: Any,
    *,
    batch_size: Optional[int] = None,
    mode: str = "auto",
    errors: str = "yield",
    readahead: Optional[int] = None,
    channel_order: str = "rgb",
) -> Iterator[list]:
    """Yields, chunk by chunk in input order, lists of ``Result`` (one per image of an input)
    and ``InputError`` (one per input that failed: read, decode, no digit found), each in the
    place of its input. ``errors="raise"`` raises the first failure instead, in its place.
    See ``Engine.infer_iter``."""
    if mode not in images.MODES:
        raise InputError(f"unknown mode {mode!r} (expected 'auto', 'mnist' or 'photo')")
    if errors not in ERRORS:
        raise InputError(f"errors must be 'yield' or 'raise', got {errors!r}")
    images.check_batch_size(batch_size)
    images.check_channel_order(channel_order)
    hwc = engine.image_shape
    readers = max(1, engine.threads)
    readahead = readahead or 2 * readers + 1
    limit = batch_size or DEFAULT_BATCH_SIZE
    items, single = items_of(inputs)
    labelled = ((i, item) for i, item in enumerate(items))
    if isinstance(inputs, (list, tuple, range, np.ndarray)) or single:
        take = _Taker(labelled)  # in memory: whole chunks at once
    else:  # a generator, a pipe: take what has come
        take = _Feeder(labelled, (readahead + 1) * limit)
    return _batches(engine, take, single, hwc, (mode, channel_order), errors, limit, readers, readahead)


class _Taker:
    """Chunks of an iterator whose items are all there (a list)."""

    def __init__(self, it: Iterator):
        self.it = it

    def __call__(self, n: int) -> list:
        return list(islice(self.it, n))

    def close(self) -> None:
        pass


class _Feeder:
    """Pulls an iterator (a generator, the lines of a pipe) on a thread of its own into a
    bounded buffer. A chunk is what has come, up to its size, after waiting at most
    PATIENCE for the rest: a fast source fills whole chunks, a slow source's inputs are
    classified as they arrive. The source's own exception is raised in its place, after
    the inputs before it."""

    PATIENCE = 0.02  # seconds a chunk waits for more inputs once it has one

    def __init__(self, it: Iterator, high_water: int):
        self.it, self.high_water = it, high_water
        self.buffer: deque = deque()
        self.cond = threading.Condition()
        self.done = self.stopped = False
        self.wanted = 0  # the buffer length the consumer waits for (0: not waiting)
        self.error: Optional[BaseException] = None
        threading.Thread(target=self._run, daemon=True, name="lenet-feeder").start()

    def _run(self) -> None:
        try:
            for item in self.it:
                with self.cond:
                    while len(self.buffer) >= self.high_water and not self.stopped:
                        self.cond.wait()
                    if self.stopped:
                        return
                    self.buffer.append(item)
                    if self.wanted and len(self.buffer) >= self.wanted:
                        self.cond.notify_all()
        except BaseException as e:  # the source's own error, raised in the stream in its place
            self.error = e
        finally:
            with self.cond:
                self.done = True
                self.cond.notify_all()

    def __call__(self, n: int) -> list:
        """Up to n items: waits for the first, then at most PATIENCE for the rest; [] at the end."""
        with self.cond:
            deadline = None
            while len(self.buffer) < n and not self.done:
                if not self.buffer:
                    self.wanted = 1
                    self.cond.wait()
                    continue
                now = time.monotonic()
                deadline = deadline or now + self.PATIENCE
                if now >= deadline:
                    break
                self.wanted = n
                self.cond.wait(deadline - now)
            self.wanted = 0
            out = [self.buffer.popleft() for _ in range(min(n, len(self.buffer)))]
            self.cond.notify_all()  # a feeder waiting below its high water
        if not out and self.error is not None:
            error, self.error = self.error, None
            raise error
        return out

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify_all()


def _batches(
    engine, take, single: bool, hwc, mode: tuple, errors: str, limit: int, readers: int, readahead: int
) -> Iterator[list]:
    pool = _pools.pool(readers)
    cancelled = threading.Event()
    pending: deque = deque()
    chunk = min(FIRST_CHUNK, limit)
    exhausted = measured = False
    try:
        while True:
            # One chunk in flight until one was measured: a generator of big arrays does not
            # pile `readahead` chunks of them up before their size is known.
            while not exhausted and len(pending) < (readahead if measured else 1):
                part = take(chunk)
                if not part:
                    exhausted = True
                    break
                if single:  # one image: its own label ("<bytes>", "<array>"), raised as it is
                    part = [(None, part[0][1])]
                pending.append((part, pool.submit(_prepare_part, part, hwc, mode, cancelled)))
            if not pending:
                return
            part, future = pending.popleft()
            got, seconds = future.result()
            # The next chunks: about CHUNK_SECONDS of reading each, at most `limit` inputs.
            per_input = seconds / len(part)
            measured = True
            chunk = max(1, min(limit, int(CHUNK_SECONDS / per_input) if per_input > 0 else limit))
            out = engine.answer(got, len(part))
            if errors == "raise":
                for k, r in enumerate(out):
                    if isinstance(r, InputError):
                        yield out[:k]
                        raise r
            yield out
    finally:
        cancelled.set()
        take.close()
        for _, future in pending:
            future.cancel()


def _prepare_part(part: list, hwc, mode: tuple, cancelled: threading.Event):
    """On a reader thread: a chunk of (index, item) prepared with (mode, channel_order): (Prepared, seconds)."""
    if cancelled.is_set():
        return None, 0.0
    started = time.perf_counter()
    got = images.prepare(
        [item for _, item in part], [images.label_of(item, i) for i, item in part], hwc, mode[0], channel_order=mode[1]
    )
    return got, time.perf_counter() - started


def iterate(engine, inputs: Any, **options) -> Iterator[Union[Any, InputError]]:
    """``batches`` flattened: one Result or InputError at a time (the options are checked
    now, the inputs read as the results are asked for)."""
    parts = batches(engine, inputs, **options)
    return (r for part in parts for r in part)


__all__ = ["DEFAULT_BATCH_SIZE", "batches", "iterate", "items_of", "one_input"]
