"""Keras model files -> a ``ModelSpec``: the core's layer records with their
weights, and the model's input shape.

One module per format, chosen by the file's contents, never its extension
(KERAS-H5.md section 0): ``legacy_h5`` (model.save .h5 of Keras 1-3, Keras 1-2
save_weights), ``keras3_h5`` (Keras 3 .weights.h5), ``keras_zip`` (.keras);
``config`` turns an architecture JSON into records, ``layers`` each Keras layer;
``hdf5`` and ``h5_guard`` read HDF5 safely.

``arch`` is a Keras model JSON (``model.to_json()`` of any Keras version) given
as a path, a JSON string or an already parsed dict; the path may also name a
full-model .h5 or .keras file, whose architecture is used; or the name of a
shipped model (``SHIPPED_MODELS``). When a file carries its own architecture
and ``arch`` is given too, ``arch`` wins.

Raises ``ModelFileError`` for a missing, unreadable, corrupt or inconsistent
file and ``UnsupportedModelError`` for a well-formed model that uses something
the engine does not run, each naming the file (and the layer); nothing else.
"""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import h5py
import numpy as np

from .._native import _core
from ..errors import Error, ModelFileError, ModelFileNotFoundError, UnsupportedModelError
from ..shipped import SHIPPED_MODELS, shipped_weights  # noqa: F401 (lenet.keras's names too)
from ..spec import ModelSpec
from . import config, h5_guard, hdf5, keras3_h5, keras_zip, legacy_h5

PathLike = Union[str, "os.PathLike[str]"]


def read_model(path: PathLike, arch: Any = None) -> ModelSpec:
    """Reads the Keras model file ``path`` (and ``arch``, see the module) into a ModelSpec."""
    src = _check_file(path)
    where = str(src)
    try:
        if _sniff(src) == "zip":
            cfg, version, weights = keras_zip.read(src, where)
            a = _resolve_arch_for(arch, where) if arch is not None else _Arch(cfg, where, version, "")
            inner = f"{where}: model.weights.h5"
            with hdf5.open_file(weights, inner) as f:
                if not keras3_h5.is_keras3(f, inner):
                    raise ModelFileError(f"{inner}: no 'layers' group")
                return _build(
                    a,
                    lambda ar, wanted: keras3_h5.read_weights(f, ar, wanted, inner),
                    where,
                    "keras-zip",
                    version,
                    "",
                    hdf5.input_scale(f, inner),
                )
        with hdf5.open_file(src, where) as f:
            return _read_h5(f, where, arch)
    except Error:
        raise
    except Exception as e:  # h5py, numpy, json, zipfile: wrapped, never leaked raw
        raise ModelFileError(f"{where}: cannot read the model file ({type(e).__name__}: {e})") from e


# ----------------------------------------------------------------------------- files


def _check_file(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ModelFileError(f"a model file path must be a str or os.PathLike, not {type(path).__name__}")
    p = Path(path)
    try:
        if not p.exists():
            raise ModelFileNotFoundError(f"{p}: no such file", str(p))
        if p.is_dir():
            raise ModelFileError(f"{p}: is a directory, not a model file")
        if not p.is_file():
            raise ModelFileError(f"{p}: not a regular file")
    except ModelFileError:
        raise
    except OSError as e:
        raise ModelFileError(f"{p}: cannot access the file ({e})") from e
    return p


def _sniff(p: Path) -> str:
    """'hdf5' (a superblock where libhdf5 looks for one: h5_guard.superblock) or 'zip'."""
    try:
        with open(p, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if head[:4] == keras_zip.ZIP_MAGIC:
                return "zip"
            if size:
                with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as data:
                    if h5_guard.superblock(data) is not None:
                        return "hdf5"
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{p}: cannot read the file ({e})") from e
    if size == 0:
        raise ModelFileError(f"{p}: empty file (0 bytes), not a Keras model file")
    hint = ""
    if head.lstrip()[:1] in (b"{", b"["):
        hint = "; it looks like JSON: an architecture goes in arch=..., together with the HDF5 weights file"
    raise ModelFileError(f"{p}: not a Keras model file (neither HDF5 nor a .keras zip: wrong magic bytes){hint}")


# ----------------------------------------------------------------------------- loading


@dataclass
class _Arch:
    config: Any  # the parsed model JSON
    source: str  # for messages
    keras_version: str = ""
    backend: str = ""


def _read_h5(f: h5py.File, where: str, arch: Any) -> ModelSpec:
    legacy = legacy_h5.is_legacy(f, where)
    if not legacy and not keras3_h5.is_keras3(f, where):
        raise ModelFileError(
            f"{where}: an HDF5 file without Keras content (no 'model_weights' group, no 'layer_names' "
            "attribute, no 'layers' group)"
        )
    version, backend = hdf5.keras_version(f, where) if legacy else ("", "")
    if legacy and not backend:  # Keras 1 never recorded it: its weight names tell
        backend = legacy_h5.backend_from_names(legacy_h5.weights_group(f, where), where)
    if arch is not None:
        a = _resolve_arch_for(arch, where)
    elif legacy == "full":
        if not hdf5.has_attr(f, "model_config", where):
            raise ModelFileError(
                f"{where}: a full-model file without the 'model_config' attribute (no architecture); "
                "give the architecture with arch=..."
            )
        a = _Arch(
            hdf5.read_json(hdf5.str_attr(f, "model_config", where), f"{where}: attribute 'model_config'"),
            where,
            version,
            backend,
        )
    else:
        what = "Keras 1-2 save_weights" if legacy else "Keras 3 .weights.h5"
        raise ModelFileError(
            f"{where}: a weights-only file ({what}) has no architecture; give one with arch=: a "
            "model.to_json() file or string, a full-model .h5/.keras file, or a shipped model name "
            f"({', '.join(SHIPPED_MODELS)})"
        )
    scale = hdf5.input_scale(f, where)
    if legacy:
        group = legacy_h5.weights_group(f, where)
        # The weights file, not the architecture, says which layouts its arrays are in:
        # Keras 2 converts Keras 1 layouts when the file records no keras_version (its
        # original_keras_version '1'), whatever version wrote the architecture.
        keras1 = not version or version.startswith("1")
        return _build(
            a,
            lambda ar, wanted: legacy_h5.read_weights(group, ar, wanted, where, _keras1_layout(ar) if keras1 else None),
            where,
            "keras-h5-" + legacy,
            version,
            backend,
            scale,
            legacy=True,
        )
    return _build(
        a, lambda ar, wanted: keras3_h5.read_weights(f, ar, wanted, where), where, "keras3-weights-h5", "", "", scale
    )


def _build(
    a: _Arch,
    read_weights: Callable,
    where: str,
    kind: str,
    version: str,
    backend: str,
    input_scale: Optional[float],
    legacy: bool = False,
) -> ModelSpec:
    """Architecture a + weights from read_weights -> ModelSpec. ``where`` is the weights file."""
    ctx = where if a.source == where else f"{where} (architecture from {a.source})"
    backend = backend or a.backend
    # A legacy file without keras_version was written by Keras 1, as Keras reads it (the
    # architecture's own version, when it has one, says which 1.x).
    version = version or a.keras_version or ("1" if legacy else "")
    writer = config.writer_of(a.config, version)
    arch = config.parse(a.config, ctx, writer)
    arch.version, arch.backend = version, backend.lower()
    if arch.backend == "theano":
        _check_theano_padding(arch, ctx)
    slots = _core.expected_weights(arch.records, list(arch.input_shape), ctx)
    wanted = [
        (leaf, slots[leaf.record])
        for leaf in arch.leaves
        if slots[leaf.record] and not arch.records[leaf.record].weight_names()
    ]
    read_weights(arch, wanted)
    if backend.lower() == "theano":
        _unflip_theano_kernels(arch)
    return ModelSpec(
        layers=arch.records,
        input_shape=arch.input_shape,
        input_scale=input_scale,
        name=arch.name,
        source=where,
        keras_version=version or a.keras_version,
        extra={"format": kind, "architecture": a.source, "backend": backend, "keras_major": writer.major},
    )


_CONV_KERNELS = {
    "conv2d": ("kernel",),
    "depthwise_conv2d": ("depthwise_kernel",),
    "separable_conv2d": ("depthwise_kernel",),
}


def _unflip_theano_kernels(arch: config.Architecture) -> None:
    """Theano convolved (flipped its kernels): a kernel trained there is a
    TensorFlow kernel turned by 180 degrees, as Keras' own loader converted it
    (convert_kernel when the file's backend was theano)."""
    for rec in arch.records:
        for name in _CONV_KERNELS.get(rec.kind, ()):
            w = rec.weight(name)
            if w is not None:
                rec.set_weight(name, np.ascontiguousarray(w[::-1, ::-1]))


def _check_theano_padding(arch: config.Architecture, where: str) -> None:
    """Theano's border_mode='same' pads symmetrically (k // 2 for a convolution, k - 1
    for a pooling) and crops the end: TensorFlow's rule only for a convolution with an
    odd kernel and stride 1."""
    for rec in arch.records:
        if not rec.same_padding:
            continue
        conv = rec.kind in _CONV_KERNELS
        if conv and rec.kernel[0] % 2 and rec.kernel[1] % 2 and tuple(rec.strides) == (1, 1):
            continue
        raise UnsupportedModelError(
            f"{where}: layer '{rec.name}' ({rec.keras_class}): written with the Theano backend, whose "
            f"border_mode='same' pads differently from TensorFlow's for a "
            f"{'pooling' if not conv else 'strided or even'} window ({rec.kernel[0]}x{rec.kernel[1]}, "
            f"stride {rec.strides[0]}x{rec.strides[1]}); not supported"
        )


def _keras1_layout(arch: config.Architecture) -> Callable:
    """Keras 1 layouts in a weights file, converted as Keras 2 did on load: a
    channels_first ('th') convolution kernel was stored (filters, in, rows, cols),
    whichever Keras wrote the architecture; BatchNormalization's ``running_std`` of a
    Keras 1 model held a standard deviation up to Keras 1.0.5 (the variance since
    1.0.8; 1.0.6-1.0.7 depended on the backend), rewritten here as the variance that
    gives the same output in TensorFlow's formula (a Keras 2-3 architecture takes it
    as the variance, as Keras 2 does)."""

    def transform(leaf: config.KerasLayer, slot: str, array: np.ndarray) -> np.ndarray:
        rec = arch.records[leaf.record]
        if rec.kind in _CONV_KERNELS and slot in ("kernel", "depthwise_kernel") and array.ndim == 4:
            if rec.data_format == "channels_first":
                return array.transpose(2, 3, 1, 0)
            _check_not_th_kernel(arch, rec, array)
        if rec.kind == "batch_norm" and slot == "moving_variance" and arch.writer.major == 1:
            form = _keras1_bn_form(arch, rec)
            eps = np.float32(rec.epsilon)
            if form == "std":  # (x - m) / (std + eps)
                return (array + eps) ** 2 - eps
            if form == "sqrt_var":  # (x - m) / (sqrt(var) + eps)
                return (np.sqrt(array) + eps) ** 2 - eps
        return array

    return transform


def _check_not_th_kernel(arch: config.Architecture, rec: Any, array: np.ndarray) -> None:
    """A 'th' kernel (filters, channels, rows, cols) given to a channels_last layer:
    Keras 2 transposes Keras 1 kernels for channels_first layers only, and so fails
    here too; say why rather than report a bare shape mismatch."""
    kh, kw = rec.kernel
    if array.shape[0] == rec.filters and array.shape[2:] == (kh, kw) and array.shape[:2] != (kh, kw):
        raise ModelFileError(
            f"{arch.source}: layer '{rec.name}' ({rec.keras_class}): the Keras 1 weights file holds its kernel in "
            f"the 'th' layout {tuple(array.shape)} (filters, channels, rows, cols), but the layer is channels_last; "
            "Keras converts such kernels only for a layer with data_format='channels_first' (dim_ordering='th'), "
            "as the model that wrote them was"
        )


def _keras1_bn_form(arch: config.Architecture, rec: Any) -> str:
    """What Keras 1's BatchNormalization divided by (tests/models/keras1_files.py traces it
    through the backends of each release)."""
    parts = arch.version.split(".")
    try:
        minor, patch = int(parts[1]), int(parts[2]) if len(parts) > 2 else 0
    except (IndexError, ValueError):
        minor, patch = 0, 0  # no version: the JSON of Keras <= 1.0.3
    if (minor, patch) >= (0, 8):
        return "var"
    if (minor, patch) <= (0, 4):
        return "std"
    if (minor, patch) == (0, 7):
        return "sqrt_var" if arch.backend == "theano" else "var"
    if (minor, patch) == (0, 6):
        return "std" if arch.backend == "theano" else "var"
    raise UnsupportedModelError(
        f"{arch.source}: layer '{rec.name}' (BatchNormalization): written by Keras {arch.version}, whose running_std "
        "is not known to hold a variance or a standard deviation; not supported"
    )


def _resolve_arch_for(arch: Any, where: str) -> _Arch:
    """_resolve_arch, with the weights file named in its errors."""
    try:
        return _resolve_arch(arch)
    except Error as e:
        message = f"{where}: the architecture given by arch: {e}"
        if isinstance(e, FileNotFoundError):  # keeps being one, with its filename
            raise type(e)(message, e.filename) from e
        raise type(e)(message) from e


def _opt_str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _json_meta(cfg: Any) -> tuple[str, str]:
    if isinstance(cfg, dict):
        return _opt_str(cfg.get("keras_version")), _opt_str(cfg.get("backend"))
    return "", ""


def _resolve_arch(arch: Any) -> _Arch:
    if isinstance(arch, dict):
        return _Arch(arch, "<arch dict>", *_json_meta(arch))
    if isinstance(arch, str) and arch in SHIPPED_MODELS:
        return _arch_from_file(shipped_weights(arch))
    if isinstance(arch, str) and arch.lstrip()[:1] in ("{", "["):
        cfg = hdf5.read_json(arch, "<arch JSON string>")
        return _Arch(cfg, "<arch JSON string>", *_json_meta(cfg))
    if isinstance(arch, (str, os.PathLike)):
        return _arch_from_file(_check_file(arch))
    raise ModelFileError(
        f"arch must be a path, a JSON string, a dict or one of {', '.join(SHIPPED_MODELS)}; found {type(arch).__name__}"
    )


def _arch_from_file(p: Path) -> _Arch:
    where = str(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
        if head == h5_guard.HDF5_MAGIC:
            with hdf5.open_file(p, where) as f:
                if not hdf5.has_attr(f, "model_config", where):
                    raise ModelFileError(
                        f"{where}: given as arch, but this HDF5 file has no 'model_config' "
                        "attribute (not a full-model file)"
                    )
                version, backend = hdf5.keras_version(f, where)
                cfg = hdf5.read_json(hdf5.str_attr(f, "model_config", where), f"{where}: attribute 'model_config'")
                return _Arch(cfg, where, version, backend)
        if head[:4] == keras_zip.ZIP_MAGIC:
            cfg = keras_zip.read_config(p, where)
            return _Arch(cfg, where, *_json_meta(cfg))
        if p.stat().st_size > hdf5.MAX_JSON_BYTES:
            raise ModelFileError(f"{where}: the architecture JSON is larger than {hdf5.MAX_JSON_BYTES} bytes")
        cfg = hdf5.read_json(p.read_bytes(), where)
        return _Arch(cfg, where, *_json_meta(cfg))
    except Error:
        raise
    except Exception as e:
        raise ModelFileError(f"{where}: cannot read the architecture ({type(e).__name__}: {e})") from e


__all__ = ["SHIPPED_MODELS", "ModelSpec", "read_model", "shipped_weights"]
