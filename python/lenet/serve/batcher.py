"""Dynamic batching: the requests that arrive while the engine is busy are classified in one
engine call.

One thread owns the engine calls. It waits for the first request, takes every request
already queued (up to ``max_batch`` images), waits at most ``max_delay`` more for others
when the batch is not full, runs the engine once, and hands each request its own rows.
While it runs, new requests queue: under load the batches grow by themselves, and a lone
request waits at most ``max_delay`` (0 by default: it runs at once).

A request of at most ``inline_images`` images that finds the batcher idle (nothing
queued, no engine call running) and no ``max_delay`` to wait is run at once on the
caller's thread, the event loop: for a small model the engine takes microseconds, less
than handing the request to the batcher's thread and back (PERFORMANCE.md, session 9).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from dataclasses import dataclass, field

import numpy as np


class Overloaded(Exception):
    """The queue holds ``max_queue`` images already: the caller should answer 503."""


@dataclass
class _Request:
    x: np.ndarray  # prepared rows (n, h, w, c), pixels 0..255 (Engine.row_probabilities)
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    queued: float = field(default_factory=time.perf_counter)


@dataclass
class Stats:
    """What the batcher did, for /metrics (read without a lock: counters only grow)."""

    requests: int = 0
    images: int = 0
    batches: int = 0
    rejected: int = 0
    batch_sizes: collections.Counter = field(default_factory=collections.Counter)  # images per engine call
    queue_seconds: float = 0.0  # summed over requests
    engine_seconds: float = 0.0  # summed over engine calls


class Batcher:
    def __init__(
        self, run, max_batch: int = 256, max_delay: float = 0.0, max_queue: int = 4096, inline_images: int = 0
    ):
        """``run``: the engine call, rows -> probabilities (thread-safe, releases the GIL)."""
        if max_batch < 1 or max_queue < 1 or max_delay < 0 or inline_images < 0:
            raise ValueError("max_batch and max_queue must be positive, max_delay and inline_images not negative")
        self.run, self.max_batch, self.max_delay, self.max_queue = run, max_batch, max_delay, max_queue
        self.inline_images = inline_images if max_delay == 0 else 0
        self.stats = Stats()
        self._queue: collections.deque = collections.deque()
        self._queued_images = 0
        self._running = 0  # engine calls under way (the batcher's, and inline ones)
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="lenet-batcher", daemon=True)
        self._thread.start()

    def submit(self, x: np.ndarray) -> asyncio.Future:
        """A future of the probabilities for x's rows, computed in a batch with whatever
        else is queued; or computed at once, here, when that is cheaper (``inline_images``),
        and the future returned done: awaiting it then costs no turn of the event loop."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._cond:
            if self._stopping:
                raise Overloaded("the server is shutting down")
            inline = len(x) <= self.inline_images and not self._queue and not self._running
            if inline:
                self._running += 1
            else:
                if self._queued_images + len(x) > self.max_queue and self._queue:
                    self.stats.rejected += 1
                    raise Overloaded(f"{self._queued_images} images are queued (the limit is {self.max_queue})")
                self._queue.append(_Request(x, loop, future))
                self._queued_images += len(x)
                self._cond.notify()
        if inline:
            self._run_inline(x, future)
        return future

    def _run_inline(self, x: np.ndarray, future: asyncio.Future) -> None:
        started = time.perf_counter()
        try:
            future.set_result(self.run(x))
        except Exception as e:  # the caller's, as from the thread
            future.set_exception(e)
        finally:
            done = time.perf_counter()
            # No notify: a request queued meanwhile woke the thread itself, which does not
            # wait for inline calls to end. Waking it here for nothing cost a GIL handover.
            with self._cond:
                self._running -= 1
                self._count(1, len(x), 0.0, done - started)

    def _count(self, requests: int, images: int, queued: float, engine: float) -> None:
        """Stats of one engine call (under the lock: the loop and the thread both count).
        ``queued``: seconds its requests waited, summed; ``engine``: seconds it took."""
        s = self.stats
        s.batches += 1
        s.requests += requests
        s.images += images
        s.batch_sizes[images] += 1
        s.engine_seconds += engine
        s.queue_seconds += queued

    def close(self, timeout: float = 10.0) -> None:
        """Finishes what is queued, then stops the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout)

    def _take(self) -> list:
        """The next batch of requests (at least one), or [] when stopping with nothing queued."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if not self._queue:
                return []
            taken, images = [], 0
            deadline = time.perf_counter() + self.max_delay
            while True:
                while self._queue and (not taken or images + len(self._queue[0].x) <= self.max_batch):
                    r = self._queue.popleft()
                    taken.append(r)
                    images += len(r.x)
                    self._queued_images -= len(r.x)
                left = deadline - time.perf_counter()
                if images >= self.max_batch or left <= 0 or self._queue or self._stopping:
                    self._running += 1
                    return taken
                self._cond.wait(left)

    def _loop(self) -> None:
        while True:
            taken = self._take()
            if not taken:
                return
            started = time.perf_counter()
            try:
                x = taken[0].x if len(taken) == 1 else np.concatenate([r.x for r in taken])
                probs = self.run(x)
                error = None
            except BaseException as e:  # every request of the batch gets the error, the thread lives on
                probs, error = None, e
            done = time.perf_counter()
            with self._cond:
                self._running -= 1
                self._count(
                    len(taken), sum(len(r.x) for r in taken), sum(started - r.queued for r in taken), done - started
                )
            # One wake-up of each event loop per batch, not one per request.
            answers: dict = {}
            row = 0
            for r in taken:
                value = None if error is not None else probs[row : row + len(r.x)]
                answers.setdefault(r.loop, []).append((r.future, value, error))
                row += len(r.x)
            for loop, settled in answers.items():
                loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list) -> None:
    for future, value, error in settled:
        if future.done():  # the request was cancelled (its client went away, or timed out)
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
