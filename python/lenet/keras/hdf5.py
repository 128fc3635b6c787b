"""Reading the HDF5 files Keras writes, safely: every file is checked by
``h5_guard`` before libhdf5 opens it; attributes are read only when their HDF5
type is one Keras writes and their size is bounded; external links and external
storage are refused (the loader reads the model file and nothing else); every
string from the file is checked before it goes anywhere. Each failure is a
``ModelFileError`` naming the file and the object."""

from __future__ import annotations

import io
import json
import math
import mmap
import os
from typing import Any, Optional

import h5py
import numpy as np

from .._native import _core
from ..errors import Error, ModelFileError
from . import h5_guard

LIMITS = _core.limits()
# Bounds of the file format itself (the model's bounds are the core's LIMITS).
MAX_ATTR_ELEMENTS = 2 * LIMITS["layers"] + 16  # an attribute's values (a list of layer or weight names)
MAX_JSON_BYTES = 8 << 20  # an architecture JSON (file, attribute or zip member): a 1000-layer
# Keras 3 config is ~1.5 MB; parsing 8 MB costs at most ~200 MB
MAX_NAME = 1024  # characters of a layer or weight name

# HDF5 datatypes whose attribute values the loader reads (strings; numbers, and
# Keras' empty float64 array for an empty list).
_ATTR_TYPES = (h5py.h5t.TypeStringID, h5py.h5t.TypeIntegerID, h5py.h5t.TypeFloatID)


def open_file(source: Any, name: Any) -> h5py.File:
    """Opens for reading after h5_guard's checks; ``source`` is a path or a BytesIO."""
    try:
        if isinstance(source, io.BytesIO):
            h5_guard.check(source.getvalue(), name, MAX_ATTR_ELEMENTS)
        else:
            with open(source, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size:
                    with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                        h5_guard.check(mm, name, MAX_ATTR_ELEMENTS)
        return h5py.File(source, "r", locking=False)
    except Error:
        raise
    except Exception as e:
        raise ModelFileError(f"{name}: not a readable HDF5 file (truncated or corrupt?): {e}") from e


def text(item: Any, where: str) -> str:
    """A string from the file (bytes, or str as h5py and json give it), checked: valid
    UTF-8 (h5py turns invalid bytes into lone surrogates; so may a JSON escape), no NUL
    inside, at most MAX_NAME characters unless it is JSON. Trailing NULs (fixed-length
    HDF5 strings) are dropped."""
    if isinstance(item, (bytes, np.bytes_)):
        try:
            item = bytes(item).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelFileError(f"{where}: a string that is not UTF-8 ({bytes(item)[:80]!r}: {e})") from e
    if not isinstance(item, str):
        raise ModelFileError(f"{where}: expected a string, found {type(item).__name__}")
    item = item.rstrip("\0")
    try:
        item.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ModelFileError(f"{where}: a string that is not valid UTF-8 ({item[:80]!r})") from e
    if "\0" in item:
        raise ModelFileError(f"{where}: a string with a NUL character inside ({item[:80]!r})")
    return item


def name(item: Any, where: str) -> str:
    """A layer or weight name: ``text`` of at most MAX_NAME characters."""
    s = text(item, where)
    if len(s) > MAX_NAME:
        raise ModelFileError(f"{where}: a name of {len(s):,} characters (at most {MAX_NAME}): {s[:40]!r}...")
    return s


def attr(obj: Any, key: str, where: str) -> Any:
    """The value of attribute ``key``, read only when its HDF5 datatype is a string
    or a number. libhdf5 1.14.6 crashes (SIGSEGV) reading a variable-length
    attribute whose type field is corrupt (neither string nor sequence: one flipped
    bit, found by tests/fuzz_targets.py); h5py shows that type as a VLEN sequence, a
    type Keras never writes, so it is refused before any read."""
    try:
        aid = h5py.h5a.open(obj.id, key.encode("utf-8"))
        tid, points = aid.get_type(), aid.get_space().get_simple_extent_npoints()
    except Exception as e:
        raise ModelFileError(f"{where}: cannot open attribute {key!r} ({type(e).__name__}: {e})") from e
    if not isinstance(tid, _ATTR_TYPES):
        raise ModelFileError(
            f"{where}: attribute {key!r} has an HDF5 datatype lenet does not read "
            f"({type(tid).__name__.replace('Type', '').replace('ID', '')}); "
            "a Keras file has strings and numbers there"
        )
    # A corrupt dataspace can claim billions of elements: libhdf5 allocates them all
    # (4 GB from one changed integer, found by tests/fuzz_targets.py) before it
    # notices the data is not there. Keras' attributes hold at most a layer list.
    if points > MAX_ATTR_ELEMENTS or points * tid.get_size() > MAX_JSON_BYTES:
        raise ModelFileError(
            f"{where}: attribute {key!r} claims {points:,} elements of {tid.get_size()} bytes "
            f"(limits: {MAX_ATTR_ELEMENTS:,} elements, {MAX_JSON_BYTES:,} bytes): corrupt file?"
        )
    try:
        return obj.attrs[key]
    except Exception as e:
        raise ModelFileError(f"{where}: cannot read attribute {key!r} ({type(e).__name__}: {e})") from e


def has_attr(obj: Any, key: str, where: str) -> bool:
    try:
        return key in obj.attrs
    except Exception as e:
        raise ModelFileError(f"{where}: cannot list the attributes ({type(e).__name__}: {e})") from e


def str_attr(obj: Any, key: str, where: str) -> Optional[str]:
    if not has_attr(obj, key, where):
        return None
    value = attr(obj, key, where)
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ModelFileError(f"{where}: attribute {key!r} is not a single string")
        value = value.reshape(-1)[0]
    return text(value, f"{where}: attribute {key!r}")


def str_list_attr(obj: Any, key: str, where: str) -> Optional[list[str]]:
    """A list-of-names attribute, or None when absent. Handles variable- and
    fixed-length (NULLPAD) strings and Keras' chunked ``key0, key1, ...``."""
    if has_attr(obj, key, where):
        chunks = [attr(obj, key, where)]
    else:
        chunks = []
        while has_attr(obj, f"{key}{len(chunks)}", where):
            chunks.append(attr(obj, f"{key}{len(chunks)}", where))
            if len(chunks) > MAX_ATTR_ELEMENTS:
                raise ModelFileError(f"{where}: attribute {key!r} in more than {MAX_ATTR_ELEMENTS} chunks")
        if not chunks:
            return None
    out: list[str] = []
    for chunk in chunks:
        arr = np.asarray(chunk)
        if arr.size == 0:  # Keras writes [] as an empty float64 array
            continue
        if arr.dtype.kind not in "SUO":
            raise ModelFileError(f"{where}: attribute {key!r} is not a list of strings ({arr.dtype})")
        out.extend(name(x, f"{where}: attribute {key!r}") for x in arr.reshape(-1))
    if len(out) > MAX_ATTR_ELEMENTS:
        raise ModelFileError(f"{where}: attribute {key!r} lists {len(out):,} names (at most {MAX_ATTR_ELEMENTS})")
    return out


def get(group: h5py.Group, key: str, where: str) -> Any:
    """group.get(key), with HDF5's own failures (a soft link that loops, a corrupt
    object header) named as the object's. External links are refused: the loader
    reads the model file and nothing else (a link to a FIFO or a device would hang or
    read what it should not)."""
    try:
        parts = [p for p in key.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if isinstance(group.get(sub, getlink=True), h5py.ExternalLink):
                raise ModelFileError(
                    f"{where}: '{sub}' is an external link to another file; lenet reads only the model file itself"
                )
        return group.get(key)
    except Error:
        raise
    except Exception as e:
        raise ModelFileError(f"{where}: cannot open '{key}' ({type(e).__name__}: {e})") from e


def keys(group: h5py.Group, where: str) -> list[str]:
    """The names of a group's members, checked as names."""
    try:
        members = list(group.keys())
    except Exception as e:
        raise ModelFileError(f"{where}: cannot list the group ({type(e).__name__}: {e})") from e
    if len(members) > MAX_ATTR_ELEMENTS:
        raise ModelFileError(f"{where}: a group with {len(members):,} members (at most {MAX_ATTR_ELEMENTS})")
    return [name(m, where) for m in members]


def read_json(value: Any, where: str) -> Any:
    if isinstance(value, (bytes, bytearray, np.bytes_)):
        value = bytes(value)
        if len(value) > MAX_JSON_BYTES:
            raise ModelFileError(f"{where}: the JSON is larger than {MAX_JSON_BYTES} bytes")
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelFileError(f"{where}: the JSON is not UTF-8 ({e})") from e
    if not isinstance(value, str):
        raise ModelFileError(f"{where}: expected a JSON string, found {type(value).__name__}")
    if len(value) > MAX_JSON_BYTES:
        raise ModelFileError(f"{where}: the JSON is larger than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(value.rstrip("\0"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise ModelFileError(f"{where}: bad JSON ({e})") from e


def keras_version(f: h5py.File, where: str) -> tuple[str, str]:
    """(keras_version, backend) from the root or model_weights attributes."""
    version = str_attr(f, "keras_version", where)
    backend = str_attr(f, "backend", where)
    mw = get(f, "model_weights", where)
    if isinstance(mw, h5py.Group):
        version = version or str_attr(mw, "keras_version", where)
        backend = backend or str_attr(mw, "backend", where)
    return version or "", backend or ""


def input_scale(f: h5py.File, where: str) -> Optional[float]:
    """The ``lenet_input_scale`` attribute lenet's own files carry, or None."""
    if not has_attr(f, "lenet_input_scale", where):
        return None
    value = np.asarray(attr(f, "lenet_input_scale", where))
    if value.size != 1 or value.dtype.kind not in "fiu":
        raise ModelFileError(f"{where}: attribute 'lenet_input_scale' is not a number ({value!r})")
    scale = float(value.reshape(-1)[0])
    if not math.isfinite(scale) or scale <= 0:
        raise ModelFileError(f"{where}: attribute 'lenet_input_scale' must be a positive number, found {scale}")
    return scale


def read_weight(ds: Any, where: str, expected: tuple, ignored: bool) -> np.ndarray:
    """The values of a weight dataset that should have the shape ``expected`` (the
    core checks the exact shape; here its size, before anything is read: a dataset's
    declared size is only a claim), as float32."""
    if not isinstance(ds, h5py.Dataset):
        raise ModelFileError(f"{where}: not a dataset")
    try:
        shape, dtype = tuple(ds.shape), ds.dtype
        outside = ds.external or ds.is_virtual
    except Exception as e:
        raise ModelFileError(f"{where}: cannot read the dataset's header ({type(e).__name__}: {e})") from e
    size, count = math.prod(shape), math.prod(expected)
    if size != count and not (size == 1 and len(expected) <= 1):
        raise ModelFileError(f"{where}: has shape {shape} ({size:,} values), expected {tuple(expected)}")
    if outside:
        raise ModelFileError(
            f"{where}: keeps its values in other files "
            f"({'external storage' if ds.external else 'a virtual dataset'}); lenet reads "
            "only the model file itself"
        )
    if dtype.kind not in ("fiu" if ignored else "f") or dtype.itemsize not in (1, 2, 4, 8):
        raise ModelFileError(f"{where}: dtype {dtype}; float16/32/64 expected")
    try:
        return np.ascontiguousarray(ds[()], dtype=np.float32).reshape(shape)
    except Exception as e:
        raise ModelFileError(f"{where}: cannot read the values ({type(e).__name__}: {e})") from e
