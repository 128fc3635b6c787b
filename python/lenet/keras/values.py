"""Reading values out of Keras layer configs: each checked for its type and range and
named in the error when it is wrong (the layer converters' building blocks)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelFileError, UnsupportedModelError


def integer(v: Any, what: str, where: str) -> int:
    """An integer that a C++ int holds; the core checks the real range."""
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or (isinstance(v, float) and not (math.isfinite(v) and v.is_integer()))
    ):
        raise ModelFileError(f"{where}: {what} must be an integer, found {v!r}")
    v = int(v)
    if not -(1 << 31) < v < (1 << 31):
        raise ModelFileError(f"{where}: {what} = {v} is out of range")
    return v


def pair(v: Any, what: str, where: str) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ModelFileError(f"{where}: {what} {v!r} must have 2 values (height, width)")
        return integer(v[0], what, where), integer(v[1], what, where)
    n = integer(v, what, where)
    return n, n


def number(v: Any, what: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ModelFileError(f"{where}: {what} must be a number, found {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise ModelFileError(f"{where}: {what} {x} is not finite")
    return x


def flag(v: Any, what: str, where: str) -> bool:
    if not isinstance(v, bool):
        raise ModelFileError(f"{where}: {what} must be true or false, found {v!r}")
    return v


def scalar(v: Any, what: str, where: str) -> float:
    """A number, or a (nested) list of equal numbers."""
    if isinstance(v, (list, tuple)):
        flat = np.asarray(v, dtype=object).reshape(-1).tolist() if v else []
        if not flat or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in flat):
            raise UnsupportedModelError(f"{where}: {what} {v!r} is not supported (a number is)")
        if any(x != flat[0] for x in flat):
            raise UnsupportedModelError(f"{where}: a per-channel {what} {v!r} is not supported")
        v = flat[0]
    return number(v, what, where)


def axes(v: Any, what: str, where: str) -> list[int]:
    """A Keras axis or list of axes (None: none)."""
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return [integer(a, what, where) for a in v]
    return [integer(v, what, where)]


def padding(cfg: dict, where: str) -> bool:
    """padding 'same' (True) or 'valid' (False)."""
    p = cfg.get("padding", "valid")
    if not isinstance(p, str):
        raise ModelFileError(f"{where}: padding must be a string, found {p!r}")
    if p.lower() not in ("valid", "same"):
        raise UnsupportedModelError(f"{where}: padding {p!r} is not supported (only 'valid' and 'same')")
    return p.lower() == "same"


def data_format(cfg: dict, where: str) -> str:
    df = cfg.get("data_format")
    if df is None:
        return ""
    if df not in ("channels_last", "channels_first"):
        raise ModelFileError(f"{where}: unknown data_format {df!r}")
    return df


def sides(v: Any, what: str, where: str) -> tuple[int, int, int, int]:
    """ZeroPadding2D / Cropping2D amounts: n, (h, w) or ((top, bottom), (left, right))."""
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(q, (list, tuple)) for q in v):
        (t, b), (le, r) = pair(v[0], what, where), pair(v[1], what, where)
        return t, b, le, r
    h, w = pair(v, what, where)
    return h, h, w, w


def single(v: Any, what: str, where: str) -> int:
    """An int, or a list of one (Keras writes 1-D sizes as [k])."""
    if isinstance(v, (list, tuple)):
        if len(v) != 1:
            raise ModelFileError(f"{where}: {what} {v!r} must have 1 value")
        v = v[0]
    return integer(v, what, where)


def side_pair(v: Any, what: str, where: str) -> tuple[int, int]:
    """ZeroPadding1D / Cropping1D amounts: n or (left, right)."""
    if isinstance(v, (list, tuple)):
        return pair(v, what, where)
    n = integer(v, what, where)
    return n, n
