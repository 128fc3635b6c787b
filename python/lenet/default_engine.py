"""The module-level functions (``lenet.infer``, ``infer_iter``, ``read_number``): each on an
Engine made on first use for its options (weights, device, threads, preprocessing) and kept."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Iterator, Optional, Sequence, Union, overload

import numpy as np

from .engine import Engine
from .errors import InputError
from .results import Number, Result

__all__ = ["infer", "infer_iter", "read_number"]

_default_engines: dict = {}


_default_lock = threading.Lock()


def _default_engine(
    weights: Union[str, os.PathLike, None], device: str, threads: Optional[int], **preprocessing: Any
) -> Engine:
    """The engine of the module-level functions for these options, made on first use.
    ``preprocessing``: input_scale, mean, std (None: the file's)."""
    asked = tuple((k, v if v is None or np.isscalar(v) else tuple(v)) for k, v in sorted(preprocessing.items()))
    key = (os.fspath(weights) if weights is not None else None, device, threads, asked)
    with _default_lock:
        engine = _default_engines.get(key)
        if engine is None:
            engine = _default_engines[key] = Engine(weights, device=device, threads=threads, **preprocessing)
    return engine


@overload
def infer(
    images: Union[str, os.PathLike, bytes, bytearray, memoryview],
    *,
    mode: str = ...,
    on_error: Optional[Callable[[InputError], Any]] = ...,
    weights: Union[str, os.PathLike, None] = ...,
    device: str = ...,
    threads: Optional[int] = ...,
    channel_order: str = ...,
    input_scale: Optional[float] = ...,
    mean: Union[float, Sequence[float], None] = ...,
    std: Union[float, Sequence[float], None] = ...,
) -> Result: ...


@overload
def infer(
    images: Union[Sequence[Any], Iterator[Any]],
    *,
    mode: str = ...,
    on_error: Optional[Callable[[InputError], Any]] = ...,
    weights: Union[str, os.PathLike, None] = ...,
    device: str = ...,
    threads: Optional[int] = ...,
    channel_order: str = ...,
    input_scale: Optional[float] = ...,
    mean: Union[float, Sequence[float], None] = ...,
    std: Union[float, Sequence[float], None] = ...,
) -> list[Result]: ...


@overload
def infer(
    images: Any,
    *,
    mode: str = ...,
    on_error: Optional[Callable[[InputError], Any]] = ...,
    weights: Union[str, os.PathLike, None] = ...,
    device: str = ...,
    threads: Optional[int] = ...,
    channel_order: str = ...,
    input_scale: Optional[float] = ...,
    mean: Union[float, Sequence[float], None] = ...,
    std: Union[float, Sequence[float], None] = ...,
) -> Union[Result, list[Result]]: ...


def infer(
    images: Any,
    *,
    mode: str = "auto",
    on_error: Optional[Callable[[InputError], Any]] = None,
    weights: Union[str, os.PathLike, None] = None,
    device: str = "auto",
    threads: Optional[int] = None,
    channel_order: str = "rgb",
    input_scale: Optional[float] = None,
    mean: Union[float, Sequence[float], None] = None,
    std: Union[float, Sequence[float], None] = None,
) -> Union[Result, list[Result]]:
    """Classifies images with the shipped default model (or ``weights``) on the best
    available device: what ``Engine.infer`` takes (paths, directories and globs as
    lenet-cli reads them, bytes, arrays, Pillow images, iterables of these), with its
    ``mode``, ``on_error`` and ``channel_order``; ``Engine`` for ``input_scale``, ``mean``
    and ``std`` (how the model's author prepared its pixels). The Engine is built on first
    use and reused."""
    prep = {"input_scale": input_scale, "mean": mean, "std": std}
    return _default_engine(weights, device, threads, **prep).infer(images, mode, on_error, channel_order=channel_order)


def infer_iter(
    inputs: Any,
    *,
    batch_size: Optional[int] = None,
    mode: str = "auto",
    errors: str = "yield",
    weights: Union[str, os.PathLike, None] = None,
    device: str = "auto",
    threads: Optional[int] = None,
    channel_order: str = "rgb",
    input_scale: Optional[float] = None,
    mean: Union[float, Sequence[float], None] = None,
    std: Union[float, Sequence[float], None] = None,
) -> Iterator[Union[Result, InputError]]:
    """``Engine.infer_iter`` on the engine ``infer`` uses (the shipped default model, or
    ``weights``, on the best available device): yields a Result (or an InputError in
    its place) per input, in input order, reading ahead in bounded memory. Directories
    and globs give the files they name, as for ``infer``."""
    prep = {"input_scale": input_scale, "mean": mean, "std": std}
    return _default_engine(weights, device, threads, **prep).infer_iter(
        inputs, batch_size=batch_size, mode=mode, errors=errors, channel_order=channel_order
    )


def read_number(
    image: Any,
    *,
    weights: Union[str, os.PathLike, None] = None,
    device: str = "auto",
    threads: Optional[int] = None,
    channel_order: str = "rgb",
) -> Number:
    """Reads a number written left to right in one image (see ``Engine.read_number``)
    with the shipped default model (or ``weights``), on the engine ``infer`` uses."""
    return _default_engine(weights, device, threads).read_number(image, channel_order=channel_order)
