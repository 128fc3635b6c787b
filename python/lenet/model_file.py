"""Read Keras model files into a ``ModelSpec`` (see ``spec.py``).

Supported inputs, recognised by their contents, never by their extension
(KERAS-H5.md section 0, the team's notes on Keras files):

* Keras full-model HDF5 (``model.save("m.h5")``) from Keras 2 (tf.keras,
  tf_keras) and Keras 3: the architecture is the root attribute
  ``model_config`` (JSON), the weights live under ``model_weights/``.
* Legacy weights-only HDF5 (Keras 2 ``save_weights("w.h5")``): the
  ``model_weights/`` tree at the root. No architecture: give ``arch``.
* Keras 3 ``.weights.h5`` (``layers/<key>/vars/<i>``). No architecture: give
  ``arch``.
* Keras 3 ``.keras`` zip (``config.json`` + ``model.weights.h5``).

``arch`` is a Keras model JSON (``model.to_json()`` of Keras 2 or 3, old
list-style Sequential configs included) given as a path, a JSON string or an
already parsed dict; the path may also name a full-model HDF5 or ``.keras``
file, whose architecture is used. It may also be the name of a shipped model
(``SHIPPED_MODELS``). When a file carries its own architecture and ``arch`` is
given too, ``arch`` wins: its architecture is used with the file's weights.

Weights are matched to the architecture the way Keras does it:

* legacy HDF5 (full or weights-only): by order of the layers that have weights
  (``layer_names`` order, skipping layers whose ``weight_names`` is empty),
  each weight resolved through the layer group's ``weight_names`` (paths
  relative to the group). Groups are never iterated (HDF5 lists them
  alphabetically).
* Keras 3 weights (``.weights.h5``, ``.keras``): by the key
  ``snake_case(class)[_k]`` rebuilt from the architecture with a per-class
  counter in layer order (KERAS-H5.md section 4).

The model must be a single chain (Sequential, or a Functional model where each
layer has one input and one consumer) of the layers listed in ``_convert_layer``.
Anything else raises ``UnsupportedModelError`` naming the layer, its class and
the file. Every problem with the file itself raises ``ModelFileError`` naming
the file and what is wrong. No other exception leaves ``load_spec``.

The loader infers the tensor shape after every layer (Keras 'same'/'valid'
arithmetic, KERAS-H5.md section 8) so that every weight shape is checked here
against the architecture; the C++ core checks them again.
"""

from __future__ import annotations

import io
import json
import math
import mmap
import os
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union, cast

import h5py
import numpy as np

from . import h5_guard
from .errors import Error, ModelFileError, UnsupportedModelError
from .spec import Activation, LayerSpec, ModelSpec

SHIPPED_MODELS = ("lenet5", "lenet-keras", "lenet-tf")

# Limits against absurd or hostile configs. Exceeding one is a ModelFileError.
MAX_LAYERS = 1000                 # layers in the architecture
MAX_KERNEL = 256                  # conv kernel / pool window, per spatial dimension
MAX_STRIDE = 256                  # per spatial dimension
MAX_PAD = 1024                    # ZeroPadding2D, per side
MAX_INPUT_DIM = 8192              # input height / width
MAX_CHANNELS = 65536              # input channels and conv filters
MAX_UNITS = 1 << 20               # Dense units
MAX_PARAMS = 100_000_000          # weights in the whole model (400 MB of float32)
MAX_ACTIVATION = 1 << 27          # elements of one image's tensor after any layer
MAX_ATTR_ELEMENTS = 2 * MAX_LAYERS + 16  # an attribute's values (a list of layer or weight names)
MAX_JSON_BYTES = 8 << 20          # an architecture JSON (file, attribute or zip member): a 1000-layer
                                  # Keras 3 config is ~1.5 MB; parsing 8 MB costs at most ~200 MB
MAX_ZIP_WEIGHTS_BYTES = 1 << 30   # model.weights.h5 inside a .keras zip

_HDF5_MAGIC = h5_guard.HDF5_MAGIC
_ZIP_MAGIC = b"PK\x03\x04"
_ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax")
_SPATIAL = ("Conv2D", "MaxPooling2D", "AveragePooling2D", "ZeroPadding2D")
_WEIGHTED = ("Conv2D", "Dense")
_DROPPED = ("Dropout", "SpatialDropout2D")   # identity at inference
_ALIASES = {"MaxPool2D": "MaxPooling2D", "AvgPool2D": "AveragePooling2D"}
_MODEL_CLASSES = ("Sequential", "Functional", "Model")

PathLike = Union[str, "os.PathLike[str]"]


def shipped_weights(name: str) -> Path:
    """Path of the shipped full-model file of ``name`` (one of ``SHIPPED_MODELS``)."""
    if name not in SHIPPED_MODELS:
        raise ModelFileError(
            f"unknown shipped model {name!r}; the shipped models are {', '.join(SHIPPED_MODELS)}")
    path = Path(__file__).parent / "weights" / f"{name}.h5"
    if not path.is_file():
        raise ModelFileError(f"{path}: the shipped model file {name!r} is missing from the installation")
    return path


def load_spec(path: PathLike, arch: Any = None) -> ModelSpec:
    """Read the Keras model file ``path`` into a ``ModelSpec``.

    ``arch`` supplies the architecture for weights-only files (and overrides the
    one in a full-model file): a path to a Keras JSON, HDF5 or ``.keras`` file, a
    JSON string, a parsed dict, or a name in ``SHIPPED_MODELS``.

    Raises ``ModelFileError`` when a file is missing, unreadable, corrupt or
    inconsistent, ``UnsupportedModelError`` when a well-formed model uses
    something lenet does not implement.
    """
    src = _check_file(path)
    try:
        kind = _sniff(src)
        if kind == "zip":
            return _load_zip(src, arch)
        with _open_h5(src, src) as f:
            return _load_h5(f, src, arch)
    except Error:
        raise
    except Exception as e:  # h5py, numpy, json, zipfile: wrap, never leak raw errors
        raise ModelFileError(f"{src}: cannot read the model file ({type(e).__name__}: {e})") from e


# ----------------------------------------------------------------------------- files

def _check_file(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise ModelFileError(f"a model file path must be a str or os.PathLike, not {type(path).__name__}")
    p = Path(path)
    try:
        if not p.exists():
            raise ModelFileError(f"{p}: no such file")
        if p.is_dir():
            raise ModelFileError(f"{p}: is a directory, not a model file")
        if not p.is_file():
            raise ModelFileError(f"{p}: not a regular file")
    except OSError as e:
        raise ModelFileError(f"{p}: cannot access the file ({e})") from e
    return p


def _sniff(p: Path) -> str:
    """'hdf5' or 'zip', from the magic bytes (HDF5 may sit after a user block of 512·2^k bytes)."""
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(8)
            if head == _HDF5_MAGIC:
                return "hdf5"
            if head[:4] == _ZIP_MAGIC:
                return "zip"
            offset = 512
            while offset + 8 <= size and offset <= (1 << 24):
                fh.seek(offset)
                if fh.read(8) == _HDF5_MAGIC:
                    return "hdf5"
                offset *= 2
    except OSError as e:
        raise ModelFileError(f"{p}: cannot read the file ({e})") from e
    if size == 0:
        raise ModelFileError(f"{p}: empty file (0 bytes), not a Keras model file")
    hint = ""
    if head.lstrip()[:1] in (b"{", b"["):
        hint = ("; it looks like JSON: an architecture goes in arch=..., "
                "together with the HDF5 weights file")
    raise ModelFileError(
        f"{p}: not a Keras model file (neither HDF5 nor a .keras zip: wrong magic bytes){hint}")


def _open_h5(source: Any, name: Any) -> h5py.File:
    """Open for reading; ``source`` is a path or a BytesIO."""
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


def _read_json(text: Any, where: str) -> Any:
    if isinstance(text, (bytes, bytearray, np.bytes_)):
        text = bytes(text)
        if len(text) > MAX_JSON_BYTES:
            raise ModelFileError(f"{where}: the JSON is larger than {MAX_JSON_BYTES} bytes")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelFileError(f"{where}: the JSON is not UTF-8 ({e})") from e
    if not isinstance(text, str):
        raise ModelFileError(f"{where}: expected a JSON string, found {type(text).__name__}")
    if len(text) > MAX_JSON_BYTES:
        raise ModelFileError(f"{where}: the JSON is larger than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(text.rstrip("\0"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise ModelFileError(f"{where}: bad JSON ({e})") from e


# ------------------------------------------------------------------ HDF5 attributes

def _to_str(item: Any, where: str) -> str:
    if isinstance(item, (bytes, np.bytes_)):
        try:
            item = bytes(item).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ModelFileError(f"{where}: a string attribute is not UTF-8 ({e})") from e
    if not isinstance(item, str):
        raise ModelFileError(f"{where}: expected a string attribute, found {type(item).__name__}")
    return item.rstrip("\0")


# HDF5 datatypes whose attribute values the loader reads (strings; numbers, and
# Keras' empty float64 array for an empty list).
_ATTR_TYPES = (h5py.h5t.TypeStringID, h5py.h5t.TypeIntegerID, h5py.h5t.TypeFloatID)


def _attr(obj: Any, name: str, where: str) -> Any:
    """The value of attribute ``name``, read only when its HDF5 datatype is a string
    or a number. libhdf5 1.14.6 crashes (SIGSEGV) reading a variable-length
    attribute whose type field is corrupt (neither string nor sequence: one flipped
    bit, found by tests/fuzz_targets.py); h5py shows that type as a VLEN sequence, a
    type Keras never writes, so it is refused before any read."""
    try:
        aid = h5py.h5a.open(obj.id, name.encode("utf-8"))
        tid, points = aid.get_type(), aid.get_space().get_simple_extent_npoints()
    except Exception as e:
        raise ModelFileError(f"{where}: cannot open attribute {name!r} ({type(e).__name__}: {e})") from e
    if not isinstance(tid, _ATTR_TYPES):
        raise ModelFileError(f"{where}: attribute {name!r} has an HDF5 datatype lenet does not read "
                             f"({type(tid).__name__.replace('Type', '').replace('ID', '')}); "
                             "a Keras file has strings and numbers there")
    # A corrupt dataspace can claim billions of elements: libhdf5 allocates them all
    # (4 GB from one changed integer, found by tests/fuzz_targets.py) before it
    # notices the data is not there. Keras' attributes hold at most a layer list.
    if points > MAX_ATTR_ELEMENTS or points * tid.get_size() > MAX_JSON_BYTES:
        raise ModelFileError(f"{where}: attribute {name!r} claims {points:,} elements of {tid.get_size()} bytes "
                             f"(limits: {MAX_ATTR_ELEMENTS:,} elements, {MAX_JSON_BYTES:,} bytes): corrupt file?")
    return obj.attrs[name]


def _str_attr(obj: Any, name: str, where: str) -> Optional[str]:
    if name not in obj.attrs:
        return None
    value = _attr(obj, name, where)
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ModelFileError(f"{where}: attribute {name!r} is not a single string")
        value = value.reshape(-1)[0]
    return _to_str(value, f"{where}: attribute {name!r}")


def _str_list_attr(obj: Any, name: str, where: str) -> Optional[list[str]]:
    """A list-of-strings attribute, or None when absent. Handles variable- and
    fixed-length (NULLPAD) strings and Keras' chunked ``name0, name1, ...``."""
    if name in obj.attrs:
        chunks = [_attr(obj, name, where)]
    else:
        chunks = []
        while f"{name}{len(chunks)}" in obj.attrs:
            chunks.append(_attr(obj, f"{name}{len(chunks)}", where))
        if not chunks:
            return None
    out: list[str] = []
    for chunk in chunks:
        arr = np.asarray(chunk)
        if arr.size == 0:          # Keras writes [] as an empty float64 array
            continue
        if arr.dtype.kind not in "SUO":
            raise ModelFileError(f"{where}: attribute {name!r} is not a list of strings ({arr.dtype})")
        out.extend(_to_str(x, f"{where}: attribute {name!r}") for x in arr.reshape(-1))
    return out


def _keras_version(f: h5py.File, where: str) -> tuple[str, str]:
    """(keras_version, backend) from the root or model_weights attributes."""
    version = _str_attr(f, "keras_version", where)
    backend = _str_attr(f, "backend", where)
    mw = _get(f, "model_weights", where)
    if isinstance(mw, h5py.Group):
        version = version or _str_attr(mw, "keras_version", where)
        backend = backend or _str_attr(mw, "backend", where)
    return version or "", backend or ""


def _check_version(version: str, backend: str, where: str) -> None:
    if backend.lower() == "theano":
        raise UnsupportedModelError(
            f"{where}: written with the Theano backend; its kernels may be flipped and are not supported "
            "(re-save the model with the TensorFlow backend)")
    if version.startswith("1."):
        raise UnsupportedModelError(
            f"{where}: written by Keras {version} (Keras 1 stored kernels in other layouts); not supported")


def _input_scale(f: h5py.File, where: str) -> Optional[float]:
    if "lenet_input_scale" not in f.attrs:
        return None
    value = np.asarray(_attr(f, "lenet_input_scale", where))
    if value.size != 1 or value.dtype.kind not in "fiu":
        raise ModelFileError(f"{where}: attribute 'lenet_input_scale' is not a number ({value!r})")
    scale = float(value.reshape(-1)[0])
    if not math.isfinite(scale) or scale <= 0:
        raise ModelFileError(f"{where}: attribute 'lenet_input_scale' must be a positive number, found {scale}")
    return scale


# ----------------------------------------------------------------------------- loading

@dataclass
class _Arch:
    config: Any          # the parsed model JSON
    source: str          # for messages
    keras_version: str = ""
    backend: str = ""


def _load_h5(f: h5py.File, src: Path, arch: Any) -> ModelSpec:
    where = str(src)
    if isinstance(_get(f, "model_weights", where), h5py.Group):
        kind = "keras-h5-full"
    elif "layer_names" in f.attrs or "layer_names0" in f.attrs:
        kind = "keras-h5-weights"
    elif isinstance(_get(f, "layers", where), h5py.Group):
        kind = "keras3-weights-h5"
    else:
        raise ModelFileError(
            f"{where}: an HDF5 file without Keras content (no 'model_weights' group, no 'layer_names' "
            "attribute, no 'layers' group)")

    version, backend = "", ""
    if kind != "keras3-weights-h5":
        version, backend = _keras_version(f, where)
        _check_version(version, backend, where)
        if not version:
            raise UnsupportedModelError(
                f"{where}: no 'keras_version' attribute, so Keras reads it as a Keras 1 file "
                "(Keras 1 stored kernels in other layouts); not supported")

    if arch is not None:
        a = _resolve_arch_for(arch, where)
    elif kind == "keras-h5-full":
        if "model_config" not in f.attrs:
            raise ModelFileError(
                f"{where}: a full-model file without the 'model_config' attribute (no architecture); "
                "give the architecture with arch=...")
        a = _Arch(_read_json(_str_attr(f, "model_config", where), f"{where}: attribute 'model_config'"),
                  where, version, backend)
    else:
        what = "Keras 2 save_weights" if kind == "keras-h5-weights" else "Keras 3 .weights.h5"
        raise ModelFileError(
            f"{where}: a weights-only file ({what}) has no architecture; give one with arch=: a "
            "model.to_json() file or string, a full-model .h5/.keras file, or a shipped model name "
            f"({', '.join(SHIPPED_MODELS)})")

    if kind == "keras3-weights-h5":
        reader: _WeightReader = _Keras3Weights(f["layers"], where, "layers")
    else:
        reader = _LegacyWeights(f["model_weights"] if kind == "keras-h5-full" else f, where)
    return _build_spec(a, reader, where, kind, version, backend, _input_scale(f, where))


def _build_spec(a: _Arch, reader: "_WeightReader", where: str, kind: str, version: str, backend: str,
                input_scale: Optional[float]) -> ModelSpec:
    """Architecture a + weights from reader -> ModelSpec. ``where`` is the weights file."""
    ctx = where if a.source == where else f"{where} (architecture from {a.source})"
    _check_version(a.keras_version, a.backend, ctx)
    model = _parse_model(a.config, ctx)
    layers = _convert_model(model, ctx)
    _attach_weights(layers, model, reader, ctx)
    return ModelSpec(
        layers=[l.spec for l in layers if l.spec is not None],
        input_shape=model.input_shape,
        data_format=model.data_format,
        input_scale=input_scale,
        name=model.name,
        source=where,
        keras_version=version or a.keras_version,
        extra={"format": kind, "architecture": a.source, "backend": backend or a.backend},
    )


def _load_zip(src: Path, arch: Any) -> ModelSpec:
    where = str(src)
    try:
        z = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ModelFileError(f"{where}: a corrupt zip file ({e})") from e
    with z:
        names = set(z.namelist())
        if "config.json" not in names:
            raise ModelFileError(f"{where}: a zip file but not a Keras .keras file (no config.json)")
        if "model.weights.h5" not in names:
            extra = " (sharded weights are not supported)" if "model.weights.json" in names else ""
            raise ModelFileError(f"{where}: the .keras file has no model.weights.h5{extra}")
        for member, limit in (("config.json", MAX_JSON_BYTES), ("metadata.json", MAX_JSON_BYTES),
                              ("model.weights.h5", MAX_ZIP_WEIGHTS_BYTES)):
            if member in names and z.getinfo(member).file_size > limit:
                raise ModelFileError(f"{where}: {member} inside the .keras file is larger than {limit} bytes")
        config = _read_json(z.read("config.json"), f"{where}: config.json")
        version = ""
        if "metadata.json" in names:
            meta = _read_json(z.read("metadata.json"), f"{where}: metadata.json")
            if isinstance(meta, dict) and isinstance(meta.get("keras_version"), str):
                version = meta["keras_version"]
        data = z.read("model.weights.h5")
    a = _resolve_arch_for(arch, where) if arch is not None else _Arch(config, where, version, "")
    inner = f"{where}: model.weights.h5"
    with _open_h5(io.BytesIO(data), inner) as f:
        if not isinstance(_get(f, "layers", inner), h5py.Group):
            raise ModelFileError(f"{inner}: no 'layers' group")
        return _build_spec(a, _Keras3Weights(f["layers"], inner, "layers"), where, "keras-zip", version, "",
                           _input_scale(f, inner))


def _resolve_arch_for(arch: Any, where: str) -> _Arch:
    """_resolve_arch, with the weights file named in its errors."""
    try:
        return _resolve_arch(arch)
    except Error as e:
        raise type(e)(f"{where}: the architecture given by arch: {e}") from e


def _resolve_arch(arch: Any) -> _Arch:
    """The architecture named by ``arch`` (see ``load_spec``)."""
    if isinstance(arch, dict):
        return _Arch(arch, "<arch dict>", _opt_str(arch.get("keras_version")), _opt_str(arch.get("backend")))
    if isinstance(arch, str) and arch in SHIPPED_MODELS:
        return _arch_from_file(shipped_weights(arch))
    if isinstance(arch, str) and arch.lstrip()[:1] in ("{", "["):
        cfg = _read_json(arch, "<arch JSON string>")
        return _Arch(cfg, "<arch JSON string>", *_json_meta(cfg))
    if isinstance(arch, (str, os.PathLike)):
        return _arch_from_file(_check_file(arch))
    raise ModelFileError(
        f"arch must be a path, a JSON string, a dict or one of {', '.join(SHIPPED_MODELS)}; "
        f"found {type(arch).__name__}")


def _opt_str(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _json_meta(cfg: Any) -> tuple[str, str]:
    if isinstance(cfg, dict):
        return _opt_str(cfg.get("keras_version")), _opt_str(cfg.get("backend"))
    return "", ""


def _arch_from_file(p: Path) -> _Arch:
    where = str(p)
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
        if head == _HDF5_MAGIC:
            with _open_h5(p, p) as f:
                if "model_config" not in f.attrs:
                    raise ModelFileError(f"{where}: given as arch, but this HDF5 file has no 'model_config' "
                                         "attribute (not a full-model file)")
                version, backend = _keras_version(f, where)
                cfg = _read_json(_str_attr(f, "model_config", where), f"{where}: attribute 'model_config'")
                return _Arch(cfg, where, version, backend)
        if head[:4] == _ZIP_MAGIC:
            with zipfile.ZipFile(p) as z:
                if "config.json" not in z.namelist():
                    raise ModelFileError(f"{where}: given as arch, but this zip file has no config.json")
                if z.getinfo("config.json").file_size > MAX_JSON_BYTES:
                    raise ModelFileError(f"{where}: config.json is larger than {MAX_JSON_BYTES} bytes")
                cfg = _read_json(z.read("config.json"), f"{where}: config.json")
                return _Arch(cfg, where, *_json_meta(cfg))
        if p.stat().st_size > MAX_JSON_BYTES:
            raise ModelFileError(f"{where}: the architecture JSON is larger than {MAX_JSON_BYTES} bytes")
        cfg = _read_json(p.read_bytes(), where)
        return _Arch(cfg, where, *_json_meta(cfg))
    except Error:
        raise
    except Exception as e:
        raise ModelFileError(f"{where}: cannot read the architecture ({type(e).__name__}: {e})") from e


# -------------------------------------------------------------------- architecture

@dataclass
class _Layer:
    cls: str             # Keras class name (aliases resolved)
    name: str
    config: dict
    spec: Optional[LayerSpec] = None       # None: dropped (Dropout, Flatten of a flat tensor)
    kernel_shape: Optional[tuple] = None   # expected weight shapes (weighted layers)
    bias_shape: Optional[tuple] = None


@dataclass
class _Model:
    name: str
    chain: list[_Layer]          # execution order, InputLayer excluded
    config_order: list[_Layer]   # the architecture's layer order (how Keras matches weights)
    batch_shape: list
    input_name: str
    input_shape: tuple = (0, 0, 0)
    data_format: str = "channels_last"


def _layer_entry(entry: Any, index: int, ctx: str) -> _Layer:
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        raise ModelFileError(f"{ctx}: layer #{index} of the architecture is not a {{'class_name', 'config'}} object")
    cfg = entry.get("config")
    if cfg is None:
        cfg = {}
    cls = _ALIASES.get(entry["class_name"], entry["class_name"])
    if not isinstance(cfg, dict):
        if cls in _MODEL_CLASSES:
            raise UnsupportedModelError(f"{ctx}: layer #{index} ({cls}): nested models are not supported")
        raise ModelFileError(f"{ctx}: layer #{index} ({cls}): its config is not an object")
    name = cfg.get("name", entry.get("name"))
    if not isinstance(name, str) or not name:
        name = f"#{index}"
    if cls in _MODEL_CLASSES:
        raise UnsupportedModelError(f"{ctx}: layer '{name}' ({cls}): nested models are not supported")
    return _Layer(cls, name, cfg)


def _parse_model(cfg: Any, ctx: str) -> _Model:
    if not isinstance(cfg, dict) or not isinstance(cfg.get("class_name"), str):
        raise ModelFileError(f"{ctx}: the architecture is not a Keras model config (no 'class_name')")
    cls = cfg["class_name"]
    body = cfg.get("config")
    if cls == "Sequential":
        if isinstance(body, list):           # Keras <= 2.1: the config is the layer list
            entries, name, build_shape = body, "", None
        elif isinstance(body, dict) and isinstance(body.get("layers"), list):
            entries, name, build_shape = body["layers"], _opt_str(body.get("name")), body.get("build_input_shape")
        else:
            raise ModelFileError(f"{ctx}: a Sequential config without a list of layers")
        if len(entries) > MAX_LAYERS:
            raise ModelFileError(f"{ctx}: {len(entries)} layers (at most {MAX_LAYERS})")
        layers = [_layer_entry(e, i, ctx) for i, e in enumerate(entries)]
        if not layers:
            raise ModelFileError(f"{ctx}: the Sequential model has no layers")
        input_name = ""
        if layers[0].cls == "InputLayer":
            first = layers.pop(0)
            input_name = first.name
            batch_shape = first.config.get("batch_shape", first.config.get("batch_input_shape"))
        else:
            batch_shape = layers[0].config.get("batch_input_shape", layers[0].config.get("batch_shape"))
            if batch_shape is None and build_shape is not None:
                batch_shape = build_shape
            if batch_shape is None and layers and isinstance(entries[0].get("build_config"), dict):
                batch_shape = entries[0]["build_config"].get("input_shape")
        for l in layers:
            if l.cls == "InputLayer":
                raise ModelFileError(f"{ctx}: layer '{l.name}' (InputLayer) is not the first layer")
        if batch_shape is None:
            raise ModelFileError(
                f"{ctx}: the architecture does not give the input shape (no InputLayer, no batch_input_shape)")
        return _Model(name, layers, list(layers), batch_shape, input_name or (layers[0].name if layers else ""))
    if cls in ("Functional", "Model"):
        if not isinstance(body, dict) or not isinstance(body.get("layers"), list):
            raise ModelFileError(f"{ctx}: a {cls} config without a list of layers")
        return _parse_functional(body, ctx)
    raise UnsupportedModelError(
        f"{ctx}: model class {cls!r}: only Sequential and Functional models are supported "
        "(subclassed models have no architecture in the file)")


def _tensor_ref(ref: Any) -> Optional[str]:
    """The layer name of a [name, node_index, tensor_index(, kwargs)] reference."""
    if isinstance(ref, (list, tuple)) and len(ref) >= 3 and isinstance(ref[0], str):
        return ref[0]
    return None


def _refs(value: Any, ctx: str, what: str) -> list[str]:
    """input_layers / output_layers: one reference (Keras 3) or a list of them."""
    single = _tensor_ref(value)
    if single is not None:
        return [single]
    if isinstance(value, (list, tuple)):
        names = [_tensor_ref(v) for v in value]
        if all(n is not None for n in names):
            return names  # type: ignore[return-value]
    if isinstance(value, dict):
        raise UnsupportedModelError(f"{ctx}: a model with named (dict) {what} is not supported")
    raise ModelFileError(f"{ctx}: malformed '{what}' in the Functional config")


def _keras_tensors(value: Any, out: list[str], depth: int = 0) -> None:
    """Collect the layer names of the Keras 3 __keras_tensor__ objects in a node's args/kwargs."""
    if depth > 32:
        return
    if isinstance(value, dict):
        if value.get("class_name") == "__keras_tensor__":
            hist = value.get("config", {}).get("keras_history") if isinstance(value.get("config"), dict) else None
            name = _tensor_ref(hist)
            if name is None:
                raise ModelFileError("malformed keras_history in an inbound node")
            out.append(name)
            return
        for v in value.values():
            _keras_tensors(v, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _keras_tensors(v, out, depth + 1)


def _inbound(layer: _Layer, entry: dict, ctx: str) -> list[str]:
    nodes = entry.get("inbound_nodes", [])
    if not isinstance(nodes, list):
        raise ModelFileError(f"{ctx}: layer '{layer.name}' ({layer.cls}): malformed inbound_nodes")
    if not nodes:
        return []
    if len(nodes) > 1:
        raise UnsupportedModelError(
            f"{ctx}: layer '{layer.name}' ({layer.cls}) is called {len(nodes)} times (shared layer); "
            "only single-chain models are supported")
    node = nodes[0]
    names: list[str] = []
    if isinstance(node, dict):                       # Keras 3: {"args": [...], "kwargs": {...}}
        try:
            _keras_tensors(node.get("args", []), names)
            _keras_tensors(node.get("kwargs", {}), names)
        except ModelFileError as e:
            raise ModelFileError(f"{ctx}: layer '{layer.name}' ({layer.cls}): {e}") from None
    elif isinstance(node, list):                     # Keras 2: [[name, node, tensor, kwargs], ...]
        for ref in node:
            n = _tensor_ref(ref)
            if n is None:
                raise ModelFileError(f"{ctx}: layer '{layer.name}' ({layer.cls}): malformed inbound node")
            names.append(n)
    else:
        raise ModelFileError(f"{ctx}: layer '{layer.name}' ({layer.cls}): malformed inbound node")
    return names


def _parse_functional(body: dict, ctx: str) -> _Model:
    entries = body["layers"]
    if len(entries) > MAX_LAYERS:
        raise ModelFileError(f"{ctx}: {len(entries)} layers (at most {MAX_LAYERS})")
    layers = []
    by_name: dict[str, _Layer] = {}
    inbound: dict[str, list[str]] = {}
    for i, entry in enumerate(entries):
        l = _layer_entry(entry, i, ctx)
        if isinstance(entry.get("name"), str):
            l.name = entry["name"]
        if l.name in by_name:
            raise ModelFileError(f"{ctx}: two layers are named '{l.name}'")
        layers.append(l)
        by_name[l.name] = l
        inbound[l.name] = _inbound(l, entry, ctx)
    inputs = _refs(body.get("input_layers"), ctx, "input_layers")
    outputs = _refs(body.get("output_layers"), ctx, "output_layers")
    if len(inputs) != 1:
        raise UnsupportedModelError(f"{ctx}: a model with {len(inputs)} inputs; only one input is supported")
    if len(outputs) != 1:
        raise UnsupportedModelError(f"{ctx}: a model with {len(outputs)} outputs; only one output is supported")
    for n in inputs + outputs + [s for v in inbound.values() for s in v]:
        if n not in by_name:
            raise ModelFileError(f"{ctx}: the config refers to an unknown layer '{n}'")
    first = by_name[inputs[0]]
    if first.cls != "InputLayer" or inbound[first.name]:
        raise ModelFileError(f"{ctx}: the model input '{first.name}' ({first.cls}) is not an InputLayer")
    consumers: dict[str, list[str]] = {n: [] for n in by_name}
    for l in layers:
        srcs = inbound[l.name]
        if len(srcs) > 1:
            raise UnsupportedModelError(
                f"{ctx}: layer '{l.name}' ({l.cls}) has {len(srcs)} inputs (a merge); "
                "only single-chain models are supported")
        for s in srcs:
            consumers[s].append(l.name)
    for name, users in consumers.items():
        if len(users) > 1:
            raise UnsupportedModelError(
                f"{ctx}: layer '{name}' ({by_name[name].cls}) feeds {len(users)} layers ({', '.join(users)}) "
                "(a branch); only single-chain models are supported")
    chain = []
    cur = first.name
    while cur != outputs[0]:
        nxt = consumers[cur]
        if not nxt or len(chain) >= len(layers):
            raise ModelFileError(f"{ctx}: the output '{outputs[0]}' cannot be reached from the input")
        cur = nxt[0]
        chain.append(by_name[cur])
    on_chain = {first.name} | {l.name for l in chain}
    for l in layers:
        if l.name not in on_chain:
            raise UnsupportedModelError(
                f"{ctx}: layer '{l.name}' ({l.cls}) is not on the chain from the input to the output; "
                "only single-chain models are supported")
        if l.cls == "InputLayer" and l is not first:
            raise UnsupportedModelError(f"{ctx}: layer '{l.name}' (InputLayer): only one input is supported")
    batch_shape = first.config.get("batch_shape", first.config.get("batch_input_shape"))
    if batch_shape is None:
        raise ModelFileError(f"{ctx}: the InputLayer '{first.name}' has no batch_shape")
    return _Model(_opt_str(body.get("name")), chain, layers, batch_shape, first.name)


# ------------------------------------------------------------------ layer conversion

def _where(ctx: str, l: _Layer) -> str:
    return f"{ctx}: layer '{l.name}' ({l.cls})"


def _int(v: Any, what: str, w: str, lo: int, hi: int) -> int:
    if (isinstance(v, bool) or not isinstance(v, (int, float))
            or (isinstance(v, float) and not (math.isfinite(v) and v.is_integer()))):
        raise ModelFileError(f"{w}: {what} must be an integer, found {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise ModelFileError(f"{w}: {what} = {v} is out of range [{lo}, {hi}]")
    return v


def _pair(v: Any, what: str, w: str, lo: int, hi: int) -> tuple[int, int]:
    if isinstance(v, (list, tuple)):
        if len(v) != 2:
            raise ModelFileError(f"{w}: {what} must have 2 values, found {v!r}")
        return _int(v[0], what, w, lo, hi), _int(v[1], what, w, lo, hi)
    n = _int(v, what, w, lo, hi)
    return n, n


def _padding(cfg: dict, w: str) -> Literal["valid", "same"]:
    p = cfg.get("padding", "valid")
    if not isinstance(p, str):
        raise ModelFileError(f"{w}: padding must be a string, found {p!r}")
    if p.lower() not in ("valid", "same"):
        raise UnsupportedModelError(f"{w}: padding {p!r} is not supported (only 'valid' and 'same')")
    return cast(Literal["valid", "same"], p.lower())


def _data_format(cfg: dict, w: str) -> Optional[str]:
    df = cfg.get("data_format")
    if df is None:
        return None
    if df not in ("channels_last", "channels_first"):
        raise ModelFileError(f"{w}: unknown data_format {df!r}")
    return df


def _scalar(v: Any, what: str, w: str) -> float:
    """A float from a number or a (nested) list of equal numbers."""
    vals = v
    if isinstance(v, (list, tuple)):
        vals = np.asarray(v, dtype=object).reshape(-1).tolist() if v else []
        if not vals or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
            raise UnsupportedModelError(f"{w}: {what} {v!r} is not supported (a number is)")
        if any(x != vals[0] for x in vals):
            raise UnsupportedModelError(f"{w}: a per-channel {what} {v!r} is not supported")
        vals = vals[0]
    if isinstance(vals, bool) or not isinstance(vals, (int, float)):
        raise UnsupportedModelError(f"{w}: {what} {v!r} is not supported (a number is)")
    x = float(vals)
    if not math.isfinite(x):
        raise ModelFileError(f"{w}: {what} {x} is not finite")
    return x


def _relu_layer(cfg: dict, w: str) -> Activation:
    mv, ns, th = cfg.get("max_value"), cfg.get("negative_slope", 0.0), cfg.get("threshold", 0.0)
    if mv is not None or ns not in (0, 0.0, None) or th not in (0, 0.0, None):
        raise UnsupportedModelError(
            f"{w}: ReLU with max_value={mv}, negative_slope={ns}, threshold={th} is not supported "
            "(only the plain ReLU)")
    return "relu"


def _softmax_layer(cfg: dict, w: str) -> Activation:
    axis = cfg.get("axis", -1)
    if axis not in (-1, [-1]):
        raise UnsupportedModelError(f"{w}: Softmax over axis {axis} is not supported (only axis -1)")
    return "softmax"


def _activation(v: Any, w: str) -> Activation:
    """One of _ACTIVATIONS from a string or a Keras 3 serialized dict."""
    if v is None:
        return "linear"
    name = v
    if isinstance(v, dict):
        cls, cfg = v.get("class_name"), v.get("config")
        if cls == "ReLU" and isinstance(cfg, dict):
            return _relu_layer(cfg, w)
        if cls == "Softmax" and isinstance(cfg, dict):
            return _softmax_layer(cfg, w)
        if cls == "Activation" and isinstance(cfg, dict):
            return _activation(cfg.get("activation"), w)
        if cls == "function" or str(v.get("module", "")).startswith("keras.activations"):
            name = cfg if isinstance(cfg, str) else v.get("registered_name")
        else:
            raise UnsupportedModelError(f"{w}: activation {cls!r} is not supported "
                                        f"(supported: {', '.join(_ACTIVATIONS)})")
    if not isinstance(name, str):
        raise ModelFileError(f"{w}: malformed activation {v!r}")
    if name not in _ACTIVATIONS:
        raise UnsupportedModelError(f"{w}: activation {name!r} is not supported "
                                    f"(supported: {', '.join(_ACTIVATIONS)})")
    return cast(Activation, name)


def _convert_layer(l: _Layer, ctx: str) -> Optional[LayerSpec]:
    """The LayerSpec of one Keras layer (None for layers that do nothing at inference).
    Options are checked here; shapes in ``_convert_model``."""
    w = _where(ctx, l)
    c = l.config
    if l.cls in _DROPPED:
        return None
    if l.cls == "Conv2D":
        if _pair(c.get("dilation_rate", 1), "dilation_rate", w, 1, 1 << 20) != (1, 1):
            raise UnsupportedModelError(f"{w}: dilation_rate {c.get('dilation_rate')} is not supported (only 1)")
        if _int(c.get("groups", 1), "groups", w, 1, 1 << 20) != 1:
            raise UnsupportedModelError(f"{w}: groups={c.get('groups')} is not supported (only 1)")
        return LayerSpec("conv2d", l.name, l.cls,
                         kernel=_pair(c.get("kernel_size"), "kernel_size", w, 1, MAX_KERNEL),
                         strides=_pair(c.get("strides", 1), "strides", w, 1, MAX_STRIDE),
                         padding=_padding(c, w),
                         filters=_int(c.get("filters"), "filters", w, 1, MAX_CHANNELS),
                         activation=_activation(c.get("activation"), w))
    if l.cls in ("MaxPooling2D", "AveragePooling2D"):
        pool = _pair(c.get("pool_size", 2), "pool_size", w, 1, MAX_KERNEL)
        strides = c.get("strides")
        return LayerSpec("max_pool2d" if l.cls == "MaxPooling2D" else "avg_pool2d", l.name, l.cls,
                         kernel=pool,
                         strides=pool if strides is None else _pair(strides, "strides", w, 1, MAX_STRIDE),
                         padding=_padding(c, w))
    if l.cls == "ZeroPadding2D":
        p = c.get("padding", 1)
        if isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(q, (list, tuple)) for q in p):
            (t, b), (le, r) = _pair(p[0], "padding", w, 0, MAX_PAD), _pair(p[1], "padding", w, 0, MAX_PAD)
        else:
            (t, le) = _pair(p, "padding", w, 0, MAX_PAD)
            b, r = t, le
        return LayerSpec("zero_pad2d", l.name, l.cls, pad=(t, b, le, r))
    if l.cls == "Flatten":
        return LayerSpec("flatten", l.name, l.cls)   # flatten_order set in _convert_model
    if l.cls == "Dense":
        return LayerSpec("dense", l.name, l.cls,
                         units=_int(c.get("units"), "units", w, 1, MAX_UNITS),
                         activation=_activation(c.get("activation"), w))
    if l.cls == "Activation":
        return LayerSpec("activation", l.name, l.cls, activation=_activation(c.get("activation"), w))
    if l.cls == "ReLU":
        return LayerSpec("activation", l.name, l.cls, activation=_relu_layer(c, w))
    if l.cls == "Softmax":
        return LayerSpec("activation", l.name, l.cls, activation=_softmax_layer(c, w))
    if l.cls == "Rescaling":
        return LayerSpec("rescaling", l.name, l.cls,
                         scale=_scalar(c.get("scale", 1.0), "scale", w),
                         offset=_scalar(c.get("offset", 0.0), "offset", w))
    if l.cls == "InputLayer":
        raise ModelFileError(f"{w}: an InputLayer inside the model")
    raise UnsupportedModelError(
        f"{w}: layer class {l.cls!r} is not supported (supported: InputLayer, Conv2D, MaxPooling2D, "
        "AveragePooling2D, ZeroPadding2D, Flatten, Dense, Activation, ReLU, Softmax, Rescaling, Dropout)")


def _input_dims(model: _Model, ctx: str) -> list[int]:
    bs = model.batch_shape
    if not isinstance(bs, (list, tuple)) or len(bs) < 2:
        raise ModelFileError(f"{ctx}: malformed input shape {bs!r}")
    dims = list(bs[1:])
    if any(d is None for d in dims):
        raise UnsupportedModelError(
            f"{ctx}: input '{model.input_name}' has a variable size {tuple(bs)}; only fixed input sizes are supported")
    return [_int(d, "an input dimension", f"{ctx}: input '{model.input_name}'", 1, max(MAX_INPUT_DIM, MAX_CHANNELS))
            for d in dims]


def _convert_model(model: _Model, ctx: str) -> list[_Layer]:
    """Convert every layer, settle the data format and the input shape, and infer the
    tensor shape after each layer, recording the expected weight shapes."""
    for l in model.chain:
        l.spec = _convert_layer(l, ctx)

    # One data format for the whole model: the conv/pool/padding layers' (KERAS-H5.md section 6).
    fmt_layer: Optional[_Layer] = None
    for l in model.chain:
        if l.cls in _SPATIAL:
            df = _data_format(l.config, _where(ctx, l)) or "channels_last"
            if fmt_layer is None:
                fmt_layer, model.data_format = l, df
            elif df != model.data_format:
                raise UnsupportedModelError(
                    f"{_where(ctx, l)}: data_format {df!r} differs from {model.data_format!r} of layer "
                    f"'{fmt_layer.name}'; mixed data formats are not supported")

    dims = _input_dims(model, ctx)
    iw = f"{ctx}: input '{model.input_name}'"
    first = next((l for l in model.chain if l.spec is not None and l.spec.kind not in ("rescaling", "activation")),
                 None)
    if len(dims) == 3:
        if fmt_layer is None and first is not None and first.cls == "Flatten":
            # No conv/pool: Flatten(channels_first) reads the input as (C, H, W).
            model.data_format = _data_format(first.config, _where(ctx, first)) or "channels_last"
        if model.data_format == "channels_first":
            c, h, wd = dims
        else:
            h, wd, c = dims
    elif len(dims) == 2 and first is not None and first.cls == "Flatten":
        h, wd, c = dims[0], dims[1], 1
        if _data_format(first.config, _where(ctx, first)) == "channels_first":
            raise UnsupportedModelError(
                f"{_where(ctx, first)}: Flatten(data_format='channels_first') of a 2-D input transposes it; "
                "not supported")
    else:
        raise UnsupportedModelError(
            f"{iw}: input shape {tuple(model.batch_shape)} is not supported: an image (H, W, C) is needed "
            "(a 2-D input (H, W) only when Flatten comes first)")
    if h > MAX_INPUT_DIM or wd > MAX_INPUT_DIM or c > MAX_CHANNELS:
        raise ModelFileError(f"{iw}: input shape {(h, wd, c)} exceeds the limits "
                             f"({MAX_INPUT_DIM}x{MAX_INPUT_DIM}x{MAX_CHANNELS})")
    if h * wd * c > MAX_ACTIVATION:
        raise ModelFileError(f"{iw}: input shape {(h, wd, c)} has more than {MAX_ACTIVATION} elements")
    model.input_shape = (h, wd, c)

    shape: tuple = (h, wd, c)        # (H, W, C) while spatial, (n,) once flat
    params = 0
    for l in model.chain:
        s = l.spec
        if s is None:
            continue
        w = _where(ctx, l)
        flat = len(shape) == 1
        if s.kind in ("conv2d", "max_pool2d", "avg_pool2d", "zero_pad2d") and flat:
            raise ModelFileError(f"{w}: needs an image input but its input is flat {shape}")
        if s.kind == "conv2d" or s.kind.endswith("pool2d"):
            hw = []
            for n, k, st in zip(shape[:2], s.kernel, s.strides):
                out = -(-n // st) if s.padding == "same" else (n - k) // st + 1
                if out < 1:
                    raise ModelFileError(f"{w}: window {s.kernel} does not fit its input {shape} "
                                         f"(padding '{s.padding}')")
                hw.append(out)
            if s.kind == "conv2d":
                l.kernel_shape = (s.kernel[0], s.kernel[1], shape[2], s.filters)
                l.bias_shape = (s.filters,) if l.config.get("use_bias", True) else None
                shape = (hw[0], hw[1], s.filters)
            else:
                shape = (hw[0], hw[1], shape[2])
        elif s.kind == "zero_pad2d":
            t, b, le, r = s.pad
            shape = (shape[0] + t + b, shape[1] + le + r, shape[2])
        elif s.kind == "flatten":
            if flat:
                l.spec = None          # flattening a flat tensor does nothing
                continue
            df = _data_format(l.config, w)
            if model.data_format == "channels_first":
                s.flatten_order = "hwc" if df == "channels_first" else "chw"
            elif df == "channels_first" and shape[0] != 1:
                raise UnsupportedModelError(
                    f"{w}: Flatten(data_format='channels_first') after channels_last layers flattens in "
                    "W, C, H order; not supported")
            else:
                s.flatten_order = "hwc"
            shape = (shape[0] * shape[1] * shape[2],)
        elif s.kind == "dense":
            if not flat:
                raise UnsupportedModelError(
                    f"{w}: Dense on a non-flat input {shape} is not supported (add a Flatten before it)")
            l.kernel_shape = (shape[0], s.units)
            l.bias_shape = (s.units,) if l.config.get("use_bias", True) else None
            shape = (s.units,)
        elif s.activation == "softmax" and not flat:
            raise UnsupportedModelError(f"{w}: softmax over a non-flat tensor {shape} is not supported")
        if s.kind in ("conv2d", "dense") and s.activation == "softmax" and len(shape) != 1:
            raise UnsupportedModelError(f"{w}: softmax over a non-flat tensor {shape} is not supported")
        if math.prod(shape) > MAX_ACTIVATION:
            raise ModelFileError(f"{w}: its output {shape} has more than {MAX_ACTIVATION} elements")
        if l.kernel_shape is not None:
            params += math.prod(l.kernel_shape) + (math.prod(l.bias_shape) if l.bias_shape else 0)
            if params > MAX_PARAMS:
                raise ModelFileError(f"{w}: the model has more than {MAX_PARAMS} parameters")
        if not isinstance(l.config.get("use_bias", True), bool):
            raise ModelFileError(f"{w}: use_bias must be true or false, found {l.config.get('use_bias')!r}")
    if len(shape) != 1:
        raise UnsupportedModelError(
            f"{ctx}: the model's output {shape} is not a vector per image (it must end with Flatten or Dense)")
    return model.chain


# ------------------------------------------------------------------------- weights

class _WeightReader:
    def fetch(self, model: _Model, ctx: str) -> dict[int, list[tuple[str, Any]]]:
        """{id(_Layer): [(weight name, h5py.Dataset), ...]} for the weighted layers."""
        raise NotImplementedError


def _get(group: h5py.Group, name: str, where: str) -> Any:
    """group.get(name), with HDF5's own failures (a soft link that loops, a corrupt
    object header) named as the object's. External links are refused: the loader
    reads the model file and nothing else (a link to a FIFO or a device would hang or
    read what it should not)."""
    try:
        parts = [p for p in name.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if isinstance(group.get(sub, getlink=True), h5py.ExternalLink):
                raise ModelFileError(f"{where}: '{sub}' is an external link to another file; lenet reads only "
                                     "the model file itself")
        return group.get(name)
    except Error:
        raise
    except Exception as e:
        raise ModelFileError(f"{where}: cannot open '{name}' ({type(e).__name__}: {e})") from e


class _LegacyWeights(_WeightReader):
    """``model_weights/`` of a full-model file or the root of a Keras 2 weights-only file."""

    def __init__(self, group: h5py.Group, where: str):
        self.group, self.where = group, where

    def fetch(self, model: _Model, ctx: str) -> dict[int, list[tuple[str, Any]]]:
        gw = self.where + ("" if self.group.name == "/" else f": group '{self.group.name}'")
        names = _str_list_attr(self.group, "layer_names", gw)
        if names is None:
            raise ModelFileError(f"{gw}: no 'layer_names' attribute")
        if len(names) > MAX_LAYERS:
            raise ModelFileError(f"{gw}: {len(names)} layers (at most {MAX_LAYERS})")
        in_file = []
        for name in names:
            g = _get(self.group, name, f"{gw}: layer '{name}'")
            if not isinstance(g, h5py.Group):
                raise ModelFileError(f"{gw}: layer '{name}' is listed in layer_names but has no group")
            wn = _str_list_attr(g, "weight_names", f"{gw}: layer '{name}'") or []
            if wn:
                in_file.append((name, g, wn))
        wanted = [l for l in model.config_order if l.cls in _WEIGHTED]
        if len(wanted) != len(in_file):
            raise ModelFileError(
                f"{ctx}: the architecture has {len(wanted)} layers with weights "
                f"({', '.join(l.name for l in wanted) or 'none'}) but the file has {len(in_file)} "
                f"({', '.join(n for n, _, _ in in_file) or 'none'})")
        out = {}
        for l, (name, g, wn) in zip(wanted, in_file):
            dsets = []
            for wname in wn:
                ds = _get(g, wname, f"{gw}: layer '{name}': weight '{wname}'")
                if not isinstance(ds, h5py.Dataset):
                    raise ModelFileError(f"{gw}: layer '{name}': weight '{wname}' is listed in weight_names "
                                         "but there is no such dataset")
                dsets.append((f"{name}/{wname}", ds))
            out[id(l)] = dsets
        return out


class _Keras3Weights(_WeightReader):
    """``layers/<snake_case(class)>[_k]/vars/<i>`` of a Keras 3 .weights.h5 (or model.weights.h5)."""

    def __init__(self, group: h5py.Group, where: str, prefix: str):
        self.group, self.where, self.prefix = group, where, prefix

    def fetch(self, model: _Model, ctx: str) -> dict[int, list[tuple[str, Any]]]:
        used: dict[str, int] = {}
        out = {}
        # model.layers order: Sequential omits its InputLayer; counters are per class, so it does not matter.
        for l in model.config_order:
            key = _snake_case(l.cls)
            if key in used:
                used[key] += 1
                key = f"{key}_{used[key]}"
            else:
                used[key] = 0
            if l.cls not in _WEIGHTED:
                continue
            where = f"{self.where}: layer '{l.name}' ({l.cls})"
            g = _get(self.group, key, where)
            vars_ = _get(g, "vars", where) if isinstance(g, h5py.Group) else None
            if not isinstance(vars_, h5py.Group):
                present = ", ".join(list(self.group.keys())[:20])
                raise ModelFileError(
                    f"{self.where}: no group '{self.prefix}/{key}/vars' for layer '{l.name}' ({l.cls}) "
                    f"(groups present: {present or 'none'})")
            dsets = []
            while str(len(dsets)) in vars_:
                i = str(len(dsets))
                ds = _get(vars_, i, where)
                if not isinstance(ds, h5py.Dataset):
                    raise ModelFileError(f"{self.where}: '{self.prefix}/{key}/vars/{i}' is not a dataset")
                dsets.append((f"{self.prefix}/{key}/vars/{i}", ds))
                if len(dsets) > 16:
                    break
            out[id(l)] = dsets
        return out


def _snake_case(name: str) -> str:
    """keras.src.utils.naming.to_snake_case."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _attach_weights(layers: list[_Layer], model: _Model, reader: _WeightReader, ctx: str) -> None:
    found = reader.fetch(model, ctx)
    for l in layers:
        if l.kernel_shape is None:
            continue
        w = _where(ctx, l)
        dsets = found.get(id(l), [])
        expected = [l.kernel_shape] + ([l.bias_shape] if l.bias_shape else [])
        if len(dsets) != len(expected):
            what = "kernel and bias" if l.bias_shape else "kernel only (use_bias=false)"
            raise ModelFileError(
                f"{w}: expected {len(expected)} weights ({what}), the file has {len(dsets)} "
                f"({', '.join(n for n, _ in dsets) or 'none'})")
        arrays = []
        for (wname, ds), shape in zip(dsets, expected):
            if tuple(ds.shape) != shape:
                raise ModelFileError(f"{w}: weight '{wname}' has shape {tuple(ds.shape)}, expected {shape}")
            if ds.dtype.kind != "f" or ds.dtype.itemsize not in (2, 4, 8):
                raise ModelFileError(f"{w}: weight '{wname}' has dtype {ds.dtype}; float16/32/64 expected")
            if ds.external or ds.is_virtual:
                raise ModelFileError(f"{w}: weight '{wname}' keeps its values in other files "
                                     f"({'external storage' if ds.external else 'a virtual dataset'}); lenet reads "
                                     "only the model file itself")
            try:
                a = np.ascontiguousarray(ds[()], dtype=np.float32)
            except Exception as e:
                raise ModelFileError(f"{w}: cannot read weight '{wname}' ({type(e).__name__}: {e})") from e
            if not np.isfinite(a).all():
                raise ModelFileError(f"{w}: weight '{wname}' contains NaN or infinite values")
            arrays.append(a)
        l.spec.weights = arrays[0]
        l.spec.bias = arrays[1] if len(arrays) > 1 else None
