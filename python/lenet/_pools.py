"""The package's thread pools: one per size, made on first use and kept (starting
threads per call costs more than a small call), shared by every module that reads or
prepares images on several threads."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

_pools: dict = {}
_lock = threading.Lock()

# Below this many items, threads cost more than they save.
THREADED_ITEMS = 8


def pool(threads: int) -> "ThreadPoolExecutor":
    """The process-wide pool of ``threads`` threads."""
    from concurrent.futures import ThreadPoolExecutor  # imported with the first pool: 7 ms of logging

    with _lock:
        p = _pools.get(threads)
        if p is None:
            p = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="lenet")
        return p


def map_chunks(fn: Callable, indices, threads: int) -> list:
    """fn over indices, in order, split into ``threads`` contiguous chunks: the calling
    thread runs the first, pool threads the others."""
    indices = list(indices)
    if threads <= 1 or len(indices) < THREADED_ITEMS:
        return [fn(i) for i in indices]
    workers = pool(threads - 1)
    bounds = [len(indices) * k // threads for k in range(threads + 1)]
    chunks = [indices[bounds[k] : bounds[k + 1]] for k in range(threads)]
    others = [workers.submit(lambda part: [fn(i) for i in part], part) for part in chunks[1:]]
    out = [fn(i) for i in chunks[0]]
    for f in others:
        out += f.result()
    return out
