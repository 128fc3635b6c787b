"""Coverage-guided fuzz targets (atheris, libFuzzer) for lenet's untrusted inputs.

Run by tests/models/test_fuzz_model.py and tests/images/test_fuzz_images.py in a subprocess, one
target per process, for a bounded time:

    python tests/fuzz_targets.py TARGET --seeds DIR --work DIR --stats FILE -- [libFuzzer flags]

Targets (each input is one case; libFuzzer mutates the seeds and keeps the inputs
that reach new code):

* ``model-bytes``: the bytes of a model file (seeds: real Keras 2 / Keras 3 .h5,
  .weights.h5 and .keras files; byte 0 picks the architecture given with arch=).
  libFuzzer's mutations flip bits, truncate, insert, splice files together.
* ``model-config``: a real model config (JSON) with 1-4 structured mutations: any
  value replaced by an absurd one (10^9 filters, negative or huge sizes, NaN, wrong
  types), layers duplicated / deleted / swapped / repeated up to 10^6 times, names
  duplicated, classes and activations unknown, Functional graphs rewired into
  cycles, branches and references to missing layers.
* ``model-h5``: a real .h5 file edited through h5py: groups and datasets deleted or
  replaced by the other kind, weights of other dtypes (int, bool, complex, strings,
  compound), shapes (scalar, empty, 10^9 declared elements) and values (NaN, Inf,
  1e38), attributes of wrong types or encodings, soft links that loop or dangle,
  external links, compressed datasets.
* ``lenet-bytes``: the bytes of lenet's own model file (.lenet, csrc/net/model_file.h;
  seeds: the model seeds loaded and saved with ``Model.save``), read by the core's bounded
  reader, the one the C++ API uses, through ``lenet.load``. A file ends in a checksum of
  its bytes, which refuses nearly every mutation at once: each case is loaded as mutated,
  then sealed again with the checksum recomputed (zlib.crc32, the format's CRC-32), as a
  hostile writer would seal it, so that the mutations reach the parser behind the check.
  (Files of the format's earlier versions, which carry no checksum, are no seeds: the
  coverage libFuzzer sees is the Python's, the same for every version, so it would keep
  the smallest seed, an earlier file, and drop the current ones.)
* ``onnx-bytes``: the bytes of an ONNX file (seeds: tests/data/onnx, torch.onnx.export
  files of every opset form the loader reads), loaded by content like any model file.
* ``onnx-graph``: a real ONNX graph with 1-4 structured mutations: attributes (pads,
  strides, kernel shapes, axes, perms, epsilons) and tensor dims set to absurd values,
  node inputs rewired (to the output itself: a cycle; to missing names), operators
  renamed or deleted, the opset and the input's dimensions changed, initializers
  replaced by other dtypes, shapes and values (NaN, Inf, 1e38).
* ``image-bytes``: the bytes of an encoded image (seeds: PNG gray / 16-bit / RGBA /
  palette / 1-bit, JPEG gray / progressive / CMYK, BMP, GIF, WebP, TIFF 8/16-bit,
  PNM) given to Engine.infer.
* ``image-array``: NumPy arrays of every dtype (object, complex, bool, strings,
  datetimes, byte-swapped), rank 0-5, empty dimensions, NaN / Inf / negative / huge
  values, non-contiguous, transposed, read-only and zero-stride views, given to
  Engine.infer and Engine.predict_proba; a view must give exactly the answer of
  its contiguous copy.

The target accepts a result or a ``lenet.Error``; any other exception is a crash
(libFuzzer saves the input and the process exits non-zero), as are a signal, a
per-input time-out (hang) and the RSS limit. Counts per category and outcome go
to --stats (JSON) as the run goes.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import math
import os
import shutil
import struct
import sys
import time
import warnings
import zlib
from pathlib import Path

import atheris
import numpy as np

with atheris.instrument_imports(include=["lenet"]):
    import lenet
    import lenet.cli
    import lenet.images.sniff
    import lenet.keras
    import lenet.onnx

import cv2  # noqa: E402
import h5py  # noqa: E402
from fuzz_runner import image_seeds  # noqa: E402

from lenet._native import _core  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
warnings.simplefilter("ignore")

# ----------------------------------------------------------------------------- stats

STATS: dict = {"target": "", "cases": 0, "categories": {}, "outcomes": {}, "started": time.time()}
_stats_path: Path | None = None
_last_flush = 0.0
_flush_at_exit = None  # the C exit handler (kept alive)


def tally(category: str, outcome: str) -> None:
    cats = STATS["categories"].setdefault(category, {})
    cats[outcome] = cats.get(outcome, 0) + 1


def finish_case(outcome: str) -> None:
    global _last_flush
    STATS["cases"] += 1
    STATS["outcomes"][outcome] = STATS["outcomes"].get(outcome, 0) + 1
    now = time.monotonic()
    if _stats_path is not None and now - _last_flush > 0.5:
        _last_flush = now
        flush()


def flush() -> None:
    STATS["elapsed_s"] = round(time.time() - STATS["started"], 1)
    tmp = _stats_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(STATS, indent=1, sort_keys=True))
    os.replace(tmp, _stats_path)


def outcome_of(fn) -> str:
    """Runs fn(); 'ok' or the lenet.Error class name. Anything else propagates: a crash."""
    try:
        fn()
        return "ok"
    except lenet.Error as e:
        assert str(e).strip(), f"{type(e).__name__} with an empty message"
        return type(e).__name__


def run_model(model: "lenet.Model") -> None:
    """A model that loaded must run: outputs of the right shape on zeros."""
    eng = lenet.Engine(model, device="cpu", threads=1)
    x = np.zeros((2,) + tuple(model.input_shape[1:]), np.float32)
    y = eng.predict(x)
    assert y.shape == (2,) + tuple(model.output_shape[1:]) and y.dtype == np.float32, y.shape
    if not np.isfinite(y).all():
        tally("model output", "non-finite outputs")


# ------------------------------------------------------------------------ model seeds


def model_seeds(seed_dir: Path) -> list[tuple[Path, Path | None]]:
    """(weights, arch) pairs from the seed directory: every .h5 / .keras, with the
    .json of the same stem (weights-only files) as its architecture."""
    out = []
    for p in sorted(seed_dir.iterdir()):
        if p.suffix not in (".h5", ".keras"):
            continue
        arch = None
        if p.suffix == ".h5" and not _has_config(p):
            stem = p.name.split(".")[0]
            arch = next(
                (
                    seed_dir / f"{s}.json"
                    for s in (stem, stem.replace("_weights", ""))
                    if (seed_dir / f"{s}.json").exists()
                ),
                None,
            )
            if arch is None:
                continue
        out.append((p, arch))
    return out


def _has_config(p: Path) -> bool:
    with h5py.File(p, "r") as f:
        return "model_config" in f.attrs


class ModelBytes:
    def __init__(self, seeds, work: Path, corpus: Path):
        self.archs = [None] + sorted({a for _, a in seeds if a is not None})
        self.path = work / "case.h5"
        for i, (w, a) in enumerate(seeds):
            if w.stat().st_size <= 100_000:
                (corpus / f"seed-{i}").write_bytes(bytes([self.archs.index(a)]) + w.read_bytes())

    def __call__(self, data: bytes) -> None:
        if not data:
            return
        arch = self.archs[data[0] % len(self.archs)]
        body = data[1:]
        self.path.write_bytes(body)
        cat = ("hdf5" if body[:8] == b"\x89HDF\r\n\x1a\n" else "zip" if body[:4] == b"PK\x03\x04" else "other") + (
            " + arch" if arch else ""
        )
        out = outcome_of(lambda: run_model(lenet.load(self.path, arch=str(arch) if arch else None)))
        tally(cat, out)
        finish_case(out)


class LenetBytes:
    def __init__(self, seeds, work: Path, corpus: Path):
        self.path = work / "case.bin"  # not named .lenet: the content decides
        for i, (w, a) in enumerate(seeds):
            try:
                lenet.load(w, arch=str(a) if a else None).save(work / "seed.lenet")
            except lenet.Error:
                continue
            data = (work / "seed.lenet").read_bytes()
            if len(data) <= 100_000:
                (corpus / f"seed-{i}").write_bytes(data)

    def load(self, data: bytes) -> str:
        self.path.write_bytes(data)
        return outcome_of(lambda: run_model(lenet.load(self.path)))

    def __call__(self, data: bytes) -> None:
        lenet_file = data[:8] == b"LENETMDL"
        out = self.load(data)
        tally("lenet" if lenet_file else "other", out)
        if lenet_file and len(data) >= 16 and struct.unpack_from("<I", data, 8)[0] >= 3:
            sealed = data[:-4] + struct.pack("<I", zlib.crc32(data[:-4]))
            if sealed != data:
                out = self.load(sealed)
                tally("lenet, sealed again", out)
        finish_case(out)


# Absurd and ordinary values for config fields.
INTERESTING = [
    0,
    1,
    -1,
    2,
    3,
    5,
    28,
    255,
    1000,
    10**6,
    10**9,
    2**31 - 1,
    2**31,
    2**63,
    -(2**63),
    10**100,
    0.5,
    1.5,
    -0.0,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    False,
    None,
    "",
    "same",
    "valid",
    "causal",
    "full",
    "SAME",
    "channels_first",
    "channels_last",
    "NCHW",
    "relu",
    "gelu",
    "swish",
    "softmax",
    "linear",
    "tanh",
    "sigmoid",
    "elu",
    "selu",
    "hard_sigmoid",
    "x" * 5000,
    "\udcff",
    "\0",
    "max_poo\udce9ing2d",
    "a\0b",
    [],
    [1],
    [0, 0],
    [1, 1],
    [2, 2],
    [3, 3],
    [10**9, 10**9],
    [-1, -1],
    [1, 1, 1],
    [[1, 1], [1, 1]],
    [[0, 10**9], [0, 0]],
    [None, 28, 28, 1],
    [None, 10**9, 10**9, 1],
    [1, 10**5, 10**5, 10**5],
    [None, 28, 28],
    [None, None, None, 1],
    [None, 1, 1, 10**9],
    [None],
    [None, 28, 28, 1, 1],
    {},
    {"class_name": "X"},
    {"class_name": "Activation", "config": {}},
    {"module": "keras.activations", "class_name": "function", "config": "gelu"},
]
ACTIVATIONS = [
    "relu",
    "gelu",
    "swish",
    "softmax",
    "linear",
    "tanh",
    "sigmoid",
    "elu",
    "selu",
    "",
    None,
    5,
    {"class_name": "X"},
    {"class_name": "ReLU", "config": {"max_value": 6}},
    {"class_name": "Softmax", "config": {"axis": 1}},
    {"module": "keras.activations", "class_name": "function", "config": "gelu"},
    {"module": "keras.activations", "class_name": "function", "config": 7},
]
CLASSES = [
    "Conv2D",
    "Dense",
    "Flatten",
    "MaxPooling2D",
    "AveragePooling2D",
    "ZeroPadding2D",
    "Dropout",
    "Activation",
    "ReLU",
    "Softmax",
    "Rescaling",
    "InputLayer",
    "BatchNormalization",
    "Conv1D",
    "Conv3D",
    "DepthwiseConv2D",
    "Lambda",
    "Add",
    "Concatenate",
    "Reshape",
    "LSTM",
    "Sequential",
    "Functional",
    "Model",
    "",
    "conv2d",
    "MaxPool2D",
    "AvgPool2D",
    "SpatialDropout2D",
    "TFOpLambda",
    "SeparableConv2D",
    "GlobalAveragePooling2D",
    "Cropping2D",
    "Resizing",
    "UpSampling2D",
    "Permute",
    "PReLU",
    "LeakyReLU",
    "Normalization",
    "Multiply",
    "Subtract",
    "Maximum",
    "Convolution2D",
    "Merge",
    "Average",
]
# Names are data too: invalid UTF-8 (h5py and JSON give lone surrogates), NUL, very long, empty.
NAMES = ["max_poo\udce9ing2d_2", "a\0b", "x" * 5000, "", " ", "layers\\conv2d", "../x", "input_1"]


def _nodes(tree, path=()):
    """Every (container, key) in a JSON tree, depth first."""
    out = []
    stack = [tree]
    while stack and len(out) < 5000:
        node = stack.pop()
        keys = list(node.keys()) if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else []
        for k in keys:
            out.append((node, k))
            stack.append(node[k])
    return out


def _layers(cfg):
    c = cfg.get("config") if isinstance(cfg, dict) else None
    if isinstance(c, list):
        return c
    if isinstance(c, dict) and isinstance(c.get("layers"), list):
        return c["layers"]
    return None


def _layer_name(entry):
    if isinstance(entry, dict):
        if isinstance(entry.get("name"), str):
            return entry["name"]
        if isinstance(entry.get("config"), dict) and isinstance(entry["config"].get("name"), str):
            return entry["config"]["name"]
    return "?"


def _keras3_ref(name):
    return {
        "class_name": "__keras_tensor__",
        "config": {"shape": [None, 1], "dtype": "float32", "keras_history": [name, 0, 0]},
    }


def mutate_config(cfg, fdp) -> list[str]:
    """1-4 structured mutations of a model config, in place; returns their names."""
    done = []
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        op = fdp.ConsumeIntInRange(0, 12)
        layers = _layers(cfg)
        if op <= 2:  # any value -> an interesting or fuzzed one
            nodes = _nodes(cfg)
            if not nodes:
                continue
            node, key = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
            kind = fdp.ConsumeIntInRange(0, 3)
            value = (
                INTERESTING[fdp.ConsumeIntInRange(0, len(INTERESTING) - 1)]
                if kind <= 1
                else fdp.ConsumeInt(8)
                if kind == 2
                else fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
            )
            node[key] = copy.deepcopy(value)
            done.append("value replaced")
        elif op == 3 and isinstance(cfg, dict) and _nodes(cfg):  # delete a key / list item
            nodes = _nodes(cfg)
            node, key = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
            del node[key]
            done.append("key deleted")
        elif op == 4 and layers:  # duplicate a layer: same name twice
            i = fdp.ConsumeIntInRange(0, len(layers) - 1)
            layers.insert(fdp.ConsumeIntInRange(0, len(layers)), copy.deepcopy(layers[i]))
            done.append("layer duplicated")
        elif op == 5 and layers:  # delete / swap layers
            i, j = (fdp.ConsumeIntInRange(0, len(layers) - 1) for _ in range(2))
            if fdp.ConsumeBool():
                del layers[i]
                done.append("layer deleted")
            else:
                layers[i], layers[j] = layers[j], layers[i]
                done.append("layers swapped")
        elif op == 6 and layers:  # many layers: up to 10^6 (refused before any work)
            i = fdp.ConsumeIntInRange(0, len(layers) - 1)
            n = [2, 10, 999, 1001, 5000, 10**6][fdp.ConsumeIntInRange(0, 5)]
            layers[i : i + 1] = [layers[i]] * n
            done.append(f"layer repeated x{n}")
        elif op == 7 and layers:  # class name replaced
            e = layers[fdp.ConsumeIntInRange(0, len(layers) - 1)]
            if isinstance(e, dict):
                e["class_name"] = CLASSES[fdp.ConsumeIntInRange(0, len(CLASSES) - 1)]
                done.append("class replaced")
        elif op == 8 and layers:  # activation replaced
            e = layers[fdp.ConsumeIntInRange(0, len(layers) - 1)]
            if isinstance(e, dict) and isinstance(e.get("config"), dict):
                e["config"]["activation"] = copy.deepcopy(
                    ACTIVATIONS[fdp.ConsumeIntInRange(0, len(ACTIVATIONS) - 1)]
                    if fdp.ConsumeBool()
                    else fdp.ConsumeUnicode(8)
                )
                done.append("activation replaced")
        elif op == 9 and layers:  # a name made equal to another layer's
            i, j = (fdp.ConsumeIntInRange(0, len(layers) - 1) for _ in range(2))
            e = layers[i]
            if isinstance(e, dict) and isinstance(e.get("config"), dict):
                e["config"]["name"] = _layer_name(layers[j])
                if "name" in e:
                    e["name"] = _layer_name(layers[j])
                done.append("name duplicated")
        elif op in (10, 11) and layers and any(isinstance(e, dict) and "inbound_nodes" in e for e in layers):
            # Functional graph rewired: a layer's input becomes another layer (a cycle,
            # a branch, itself) or a missing one; or input/output_layers point elsewhere.
            i, j = (fdp.ConsumeIntInRange(0, len(layers) - 1) for _ in range(2))
            e = layers[i]
            target = _layer_name(layers[j]) if fdp.ConsumeIntInRange(0, 4) else "no_such_layer"
            if op == 10 and isinstance(e, dict):
                nodes = e.get("inbound_nodes")  # an earlier mutation may have made it anything
                k3 = isinstance(nodes, list) and bool(nodes) and isinstance(nodes[0], dict)
                e["inbound_nodes"] = [{"args": [_keras3_ref(target)], "kwargs": {}}] if k3 else [[[target, 0, 0, {}]]]
                if fdp.ConsumeBool():  # two inputs: a merge
                    e["inbound_nodes"] = (
                        e["inbound_nodes"] * 2
                        if fdp.ConsumeBool()
                        else [[[target, 0, 0, {}], [_layer_name(layers[i]), 0, 0, {}]]]
                    )
                done.append("graph rewired")
            else:
                c = cfg.get("config")
                if isinstance(c, dict):
                    c["input_layers" if fdp.ConsumeBool() else "output_layers"] = [[target, 0, 0]]
                    done.append("graph endpoints moved")
        elif op == 12 and layers:  # a layer name replaced by a strange one
            e = layers[fdp.ConsumeIntInRange(0, len(layers) - 1)]
            if isinstance(e, dict) and isinstance(e.get("config"), dict):
                e["config"]["name"] = NAMES[fdp.ConsumeIntInRange(0, len(NAMES) - 1)]
                if "name" in e:
                    e["name"] = e["config"]["name"]
                done.append("strange name")
    return done or ["unchanged"]


class ModelConfig:
    def __init__(self, seeds):
        self.seeds = []
        for w, a in seeds:
            if a is not None:
                self.seeds.append((w, json.loads(a.read_text())))
            elif w.suffix == ".h5":
                with h5py.File(w, "r") as f:
                    self.seeds.append((w, json.loads(f.attrs["model_config"])))

    def __call__(self, data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        weights, seed_cfg = self.seeds[fdp.ConsumeIntInRange(0, len(self.seeds) - 1)]
        cfg = copy.deepcopy(seed_cfg)
        ops = mutate_config(cfg, fdp)
        arch = cfg
        layers = _layers(cfg)
        if fdp.ConsumeBool() and (layers is None or len(layers) <= 5000):  # also through the JSON text path
            try:
                arch = json.dumps(cfg)
            except (ValueError, RecursionError):
                pass
        out = outcome_of(lambda: run_model(lenet.Model(lenet.keras.read_model(weights, arch=arch))))
        for op in set(ops):
            tally(op, out)
        finish_case(out)


# ----------------------------------------------------------------------------- ONNX


class OnnxBytes:
    def __init__(self, seed_dir: Path, work: Path, corpus: Path):
        self.path = work / "case.onnx.bin"  # not named .onnx: the content decides
        for i, p in enumerate(sorted(seed_dir.glob("*.onnx"))):
            if p.stat().st_size <= 100_000:
                (corpus / f"seed-{i}").write_bytes(p.read_bytes())

    def __call__(self, data: bytes) -> None:
        self.path.write_bytes(data)
        out = outcome_of(lambda: run_model(lenet.load(self.path)))
        tally("onnx" if data[:1] == b"\x08" else "other", out)
        finish_case(out)


ONNX_OPS = [
    "Conv",
    "Gemm",
    "MatMul",
    "Relu",
    "Softmax",
    "LogSoftmax",
    "MaxPool",
    "AveragePool",
    "Flatten",
    "Reshape",
    "Transpose",
    "Concat",
    "Add",
    "Mul",
    "Div",
    "Sub",
    "BatchNormalization",
    "Pad",
    "Clip",
    "Squeeze",
    "Unsqueeze",
    "Shape",
    "Gather",
    "Slice",
    "Cast",
    "Erf",
    "Loop",
    "If",
    "Identity",
    "",
]


class OnnxGraph:
    def __init__(self, seed_dir: Path, work: Path):
        import onnx

        self.onnx = onnx
        self.seeds = [onnx.load(str(p)) for p in sorted(seed_dir.glob("*.onnx"))]
        self.path = work / "case.onnx"

    def __call__(self, data: bytes) -> None:
        onnx = self.onnx
        fdp = atheris.FuzzedDataProvider(data)
        m = onnx.ModelProto()
        m.CopyFrom(self.seeds[fdp.ConsumeIntInRange(0, len(self.seeds) - 1)])
        g = m.graph
        ops = []
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            what = fdp.ConsumeIntInRange(0, 6)
            nodes = g.node
            if what == 0 and nodes:
                n = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
                if n.attribute:
                    a = n.attribute[fdp.ConsumeIntInRange(0, len(n.attribute) - 1)]
                    v = INTERESTING[fdp.ConsumeIntInRange(0, len(INTERESTING) - 1)]
                    whole = isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
                    if a.ints and whole:
                        a.ints[fdp.ConsumeIntInRange(0, len(a.ints) - 1)] = v
                    elif a.type == onnx.AttributeProto.INT and whole:
                        a.i = v
                    elif (
                        a.type == onnx.AttributeProto.FLOAT
                        and isinstance(v, (int, float))
                        and not isinstance(v, bool)
                        and abs(v) < 1e300
                    ):
                        a.f = float(v)
                    ops.append("attribute")
            elif what == 1 and g.initializer:
                t = g.initializer[fdp.ConsumeIntInRange(0, len(g.initializer) - 1)]
                if t.dims:
                    t.dims[fdp.ConsumeIntInRange(0, len(t.dims) - 1)] = fdp.ConsumeIntInRange(-1, 10**6)
                ops.append("dims")
            elif what == 2 and nodes:
                n = nodes[fdp.ConsumeIntInRange(0, len(nodes) - 1)]
                if n.input:
                    pick = fdp.ConsumeIntInRange(0, 2)
                    n.input[fdp.ConsumeIntInRange(0, len(n.input) - 1)] = [n.output[0], "missing", g.input[0].name][
                        pick
                    ]
                ops.append("rewire")
            elif what == 3 and nodes:
                i = fdp.ConsumeIntInRange(0, len(nodes) - 1)
                if fdp.ConsumeBool():
                    nodes[i].op_type = ONNX_OPS[fdp.ConsumeIntInRange(0, len(ONNX_OPS) - 1)]
                    ops.append("operator renamed")
                else:
                    del nodes[i]
                    ops.append("node deleted")
            elif what == 4:
                m.opset_import[0].version = fdp.ConsumeIntInRange(-1, 40)
                ops.append("opset")
            elif what == 5:
                dims = g.input[0].type.tensor_type.shape.dim
                if dims:
                    dims[fdp.ConsumeIntInRange(0, len(dims) - 1)].dim_value = fdp.ConsumeIntInRange(0, 10**5)
                ops.append("input dims")
            elif what == 6 and g.initializer:
                t = g.initializer[fdp.ConsumeIntInRange(0, len(g.initializer) - 1)]
                kind = fdp.ConsumeIntInRange(0, 3)
                try:
                    a = onnx.numpy_helper.to_array(t)
                except ValueError:  # its dims already mutated
                    continue
                if kind == 0:
                    a = a.astype(np.float64)
                elif kind == 1:
                    a = np.full(a.shape, [np.nan, np.inf, 1e38][fdp.ConsumeIntInRange(0, 2)], np.float32)
                elif kind == 2:
                    a = a.reshape(-1)[: fdp.ConsumeIntInRange(0, max(a.size, 1))]
                else:
                    a = a.astype(np.int64)
                t.CopyFrom(onnx.numpy_helper.from_array(a, t.name))
                ops.append("initializer")
        self.path.write_bytes(m.SerializeToString())
        out = outcome_of(lambda: run_model(lenet.load(self.path)))
        for op in set(ops) or {"unchanged"}:
            tally(op, out)
        finish_case(out)


H5_DTYPES = ["i4", "i8", "u1", "f2", "f8", "c8", "?", "S4", "vlen-str", "compound", ">f4"]


class ModelH5:
    def __init__(self, seeds, work: Path):
        self.seeds = [(w, a) for w, a in seeds if w.suffix == ".h5" and w.stat().st_size <= 100_000]
        self.path = work / "case.h5"
        self.work = work

    def __call__(self, data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        seed, arch = self.seeds[fdp.ConsumeIntInRange(0, len(self.seeds) - 1)]
        shutil.copyfile(seed, self.path)
        ops = []
        with h5py.File(self.path, "a") as f:
            for _ in range(fdp.ConsumeIntInRange(1, 3)):
                try:
                    ops.append(self.mutate(f, fdp))
                except (ValueError, TypeError, KeyError, OSError, RuntimeError):
                    ops.append("mutation not writable")  # h5py refused the edit itself: not a case
        out = outcome_of(lambda: run_model(lenet.load(self.path, arch=str(arch) if arch else None)))
        for op in set(ops):
            tally(op, out)
        finish_case(out)

    def mutate(self, f, fdp) -> str:
        names = []
        f.visit(names.append)
        objs = [""] + names
        name = objs[fdp.ConsumeIntInRange(0, len(objs) - 1)]
        obj = f[name] if name else f
        parent = f[name.rsplit("/", 1)[0]] if "/" in name else f
        base = name.rsplit("/", 1)[-1]
        op = fdp.ConsumeIntInRange(0, 10)
        if op == 0 and name:
            del parent[base]
            return "object deleted"
        if op == 10 and name:  # an object renamed: invalid UTF-8, long, Windows style
            new = [b"max_poo\xe9ing2d_2", b"x" * 3000, "layers\\" + base, base + " ", b"\xff"][
                fdp.ConsumeIntInRange(0, 4)
            ]
            parent.move(base, new)
            return "object renamed"
        if op == 1 and isinstance(obj, h5py.Dataset):
            kind = H5_DTYPES[fdp.ConsumeIntInRange(0, len(H5_DTYPES) - 1)]
            shape = obj.shape
            del parent[base]
            if kind == "vlen-str":
                parent.create_dataset(base, shape=shape, dtype=h5py.string_dtype())
            elif kind == "compound":
                parent.create_dataset(base, shape=shape, dtype=np.dtype([("a", "f4"), ("b", "i4")]))
            else:
                parent.create_dataset(base, shape=shape, dtype=kind)
            return f"weight dtype {kind}"
        if op == 2 and isinstance(obj, h5py.Dataset):
            shape = [
                (),
                (0,),
                (10**9,),
                (obj.size,),
                tuple(reversed(obj.shape)),
                obj.shape + (1,),
                (2**31, 2**31),
                obj.shape[:-1],
            ][fdp.ConsumeIntInRange(0, 7)]
            del parent[base]
            parent.create_dataset(base, shape=shape, dtype="f4")  # declared only: nothing is written
            return "weight shape changed"
        small = isinstance(obj, h5py.Dataset) and 0 < obj.size <= 10**6  # the harness reads it: keep it small
        if op == 3 and small:
            v = [np.nan, np.inf, -np.inf, 1e38, -1e38, 0.0][fdp.ConsumeIntInRange(0, 5)]
            a = obj[()].astype(np.float32) if obj.dtype.kind == "f" else np.zeros(obj.shape, np.float32)
            a.reshape(-1)[fdp.ConsumeIntInRange(0, a.size - 1) if fdp.ConsumeBool() else slice(None)] = v
            obj[...] = a
            return f"weight values {v}"
        if op == 4 and name:  # a group <-> dataset swap
            del parent[base]
            if isinstance(obj, h5py.Group):
                parent.create_dataset(base, data=np.zeros(3, np.float32))
                return "group became a dataset"
            parent.create_group(base)
            return "dataset became a group"
        if op == 5 and name:  # links: a loop, dangling, external
            del parent[base]
            kind = fdp.ConsumeIntInRange(0, 3)
            if kind == 0:
                parent[base] = h5py.SoftLink("/" + name)
            elif kind == 1:
                parent[base] = h5py.SoftLink("/" + (name.rsplit("/", 1)[0] if "/" in name else ""))
            elif kind == 2:
                parent[base] = h5py.SoftLink("/no/such/object")
            else:
                parent[base] = h5py.ExternalLink(str(self.work / "missing.h5"), "/x")
            return "link"
        if op == 6 and small:  # compressed, chunked copy
            a = obj[()]
            del parent[base]
            parent.create_dataset(base, data=a, compression=["gzip", "lzf"][fdp.ConsumeIntInRange(0, 1)], chunks=True)
            return "weight compressed"
        # attributes
        attrs = list(obj.attrs.keys())
        if not attrs:
            return "no-op"
        key = attrs[fdp.ConsumeIntInRange(0, len(attrs) - 1)]
        choice = fdp.ConsumeIntInRange(0, 14)
        if choice == 0:
            del obj.attrs[key]
            return "attribute deleted"
        value = [
            np.int64(7),
            np.float64(np.nan),
            np.zeros(3),
            np.array([], dtype="f8"),
            np.bytes_(b"\xff\xfe\x00"),
            "x" * 70000,
            np.array([b"a", b"b"]),
            np.array(["no_such_layer"], dtype=h5py.string_dtype()),
            np.array([1, 2], dtype="i4"),
            "{",
            json.dumps({"class_name": "Sequential", "config": 5}),
            np.array([b"conv2d\0\0"] * 3),
            np.array([b"max_poo\xe9ing2d_2", b"dense"]),
            np.array([b"a\0b"]),
        ][choice - 1]
        obj.attrs[key] = value
        return f"attribute {key} replaced"


# ------------------------------------------------------------------------- images

_engine = None


def engine():
    global _engine
    if _engine is None:
        _engine = lenet.Engine(device="cpu", threads=1)
    return _engine


def check_results(res, n=None) -> None:
    items = res if isinstance(res, list) else [res]
    if n is not None:
        assert len(items) == n, (len(items), n)
    for r in items:
        p = r.probabilities
        assert p.shape == (10,) and np.isfinite(p).all() and abs(float(p.sum()) - 1) < 1e-4, p
        assert 0 <= r.digit <= 9 and r.mode in ("mnist", "photo")


class ImageBytes:
    def __init__(self, corpus: Path, work: Path):
        for name, data in image_seeds().items():
            (corpus / name).write_bytes(data)
        self.file = os.fsencode(work / "case.png")

    def __call__(self, data: bytes) -> None:
        fmt = lenet.images.sniff.format_of(data) or "unknown format"
        mode = ("auto", "mnist", "photo")[data[-1] % 3] if data else "auto"
        out = outcome_of(lambda: check_results(engine().infer(data, mode=mode)))
        tally(fmt, out)
        if fmt == "PNG" and _core.png_decoder:
            tally("PNG fast lane", self.lane(data))
        finish_case(out)

    def lane(self, data: bytes) -> str:
        """The core's PNG fast lane on the same bytes, as a file: a file it decodes must give
        OpenCV's pixels exactly; any other is handed back unchanged."""
        w, h = struct.unpack_from(">II", data, 16) if len(data) >= 24 else (28, 28)
        if not (0 < w * h <= 1 << 16):
            w = h = 28
        with open(self.file, "wb") as f:
            f.write(data)
        files, pixels, rows = _core.read_gray_images([self.file], 1 << 30, h, w)
        if rows[0] < 0:
            assert files[0] == data
            return "left to OpenCV"
        want = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        assert want is not None and np.array_equal(pixels[0], want), "the lane and OpenCV disagree"
        return "decoded"


DTYPES = [
    np.uint8,
    np.uint16,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.longdouble,
    np.bool_,
    np.complex64,
    np.complex128,
    object,
    "U3",
    "S3",
    "M8[s]",
    "m8[s]",
    [("a", "u1"), ("b", "f4")],
    ">f4",
    ">u2",
    "V4",
]
DIMS = [0, 1, 2, 3, 4, 5, 7, 28, 29, 56, 100]
SPECIAL = [0.0, 1.0, 255.0, 256.0, 65535.0, 65536.0, -1.0, -1e-30, 1e30, np.nan, np.inf, -np.inf, 0.5, 1e-45]


class ImageArray:
    def __call__(self, data: bytes) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        dtype = np.dtype(DTYPES[fdp.ConsumeIntInRange(0, len(DTYPES) - 1)])
        rank = fdp.ConsumeIntInRange(0, 5)
        shape = tuple(DIMS[fdp.ConsumeIntInRange(0, len(DIMS) - 1)] for _ in range(rank))
        if math.prod(shape) > 200_000:
            shape = shape[:2]
        cat = f"{dtype.kind}{dtype.itemsize} rank {rank}"
        try:
            a = self.values(fdp, dtype, shape)
        except (ValueError, TypeError, OverflowError):  # value not representable in the dtype
            a = np.zeros(shape, dtype)
        layout = fdp.ConsumeIntInRange(0, 6)
        view, lname = self.layout(a, layout, fdp)
        mode = ("auto", "mnist", "photo")[fdp.ConsumeIntInRange(0, 2)]
        got = {}

        def run():
            got["infer"] = engine().infer(view, mode=mode)
            check_results(got["infer"])

        out = outcome_of(run)
        if out == "ok" and lname != "contiguous":
            # A view must give exactly the answer of its contiguous copy.
            want = engine().infer(np.ascontiguousarray(view), mode=mode)
            pairs = zip(got["infer"], want) if isinstance(want, list) else [(got["infer"], want)]
            for g, w in pairs:
                assert np.array_equal(g.probabilities, w.probabilities), (lname, cat)
        tally(cat, out)
        tally(f"layout {lname}", out)
        # predict_proba: the ready-batch entry point, for arrays near the model's shape.
        if a.ndim in (3, 4) and a.shape[1:3] == (28, 28):
            pout = outcome_of(lambda: self.proba(view))
            tally(f"predict_proba {cat}", pout)
        finish_case(out)

    @staticmethod
    def proba(view):
        p = engine().predict_proba(view)
        assert p.shape == (view.shape[0] if view.ndim == 4 else 1, 10), p.shape
        if view.dtype.kind in "fiu" and view.size:
            if np.isfinite(view.astype(np.float64)).all():
                want = engine().predict_proba(np.ascontiguousarray(view, dtype=np.float32))
                assert np.array_equal(p, want)

    @staticmethod
    def values(fdp, dtype, shape):
        n = math.prod(shape)
        kind = fdp.ConsumeIntInRange(0, 3)
        if dtype.kind == "O":
            pool = [1, 1.5, None, "x", b"y", [1], object()]
            flat = np.empty(n, object)
            for i in range(n):
                flat[i] = pool[i % len(pool)]
            return flat.reshape(shape)
        if dtype.kind in "USVMm" or dtype.fields:
            return np.zeros(shape, dtype)
        if kind == 0:
            return np.zeros(shape, dtype)
        if kind == 1:  # one special value everywhere, or sprinkled
            v = SPECIAL[fdp.ConsumeIntInRange(0, len(SPECIAL) - 1)]
            a = np.full(shape, 0, dtype)
            if n:
                with np.errstate(all="ignore"):
                    a.reshape(-1)[:: max(1, fdp.ConsumeIntInRange(1, 50))] = np.array(v).astype(dtype)
            return a
        raw = fdp.ConsumeBytes(n * dtype.itemsize)
        raw += bytes(n * dtype.itemsize - len(raw))
        return np.frombuffer(raw, dtype).reshape(shape).copy()

    @staticmethod
    def layout(a, layout, fdp):
        if layout == 0 or a.ndim == 0:
            return a, "contiguous"
        if layout == 1:
            b = a.copy()
            b.setflags(write=False)
            return b, "read-only"
        if layout == 2:
            return a[(slice(None, None, 2),) * a.ndim], "strided"
        if layout == 3:
            return np.asfortranarray(a), "fortran"
        if layout == 4:
            return a[(slice(None, None, -1),) * a.ndim], "reversed"
        if layout == 5:  # zero strides: a huge virtual image on one element
            big = [(28, 28), (1, 10**6), (10**5, 10**5), (3, 10**4, 10**4), (2, 28, 28, 3)][fdp.ConsumeIntInRange(0, 4)]
            return np.broadcast_to(a.reshape(-1)[:1] if a.size else np.zeros(1, a.dtype), big), "zero-stride"
        if a.dtype.kind in "fiu" and a.dtype.itemsize > 1:
            return a.astype(a.dtype.newbyteorder()), "byte-swapped"
        return a, "contiguous"


# ----------------------------------------------------------------------------- main


def main() -> None:
    global _stats_path
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "target",
        choices=[
            "model-bytes",
            "model-config",
            "model-h5",
            "lenet-bytes",
            "onnx-bytes",
            "onnx-graph",
            "image-bytes",
            "image-array",
        ],
    )
    ap.add_argument("--seeds", type=Path, help="directory of model seed files (.h5, .keras, .json)")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--stats", type=Path, required=True)
    args, libfuzzer = ap.parse_known_args()
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = args.work / "corpus"
    corpus.mkdir(exist_ok=True)
    _stats_path = args.stats
    STATS["target"] = args.target
    # The fuzzers explore decoding, not big images: a small pixel limit keeps cases fast
    # (the default limit has its own tests).
    lenet.set_max_image_pixels(4_000_000)

    if args.target.startswith("onnx"):
        target = (
            OnnxBytes(args.seeds, args.work, corpus)
            if args.target == "onnx-bytes"
            else OnnxGraph(args.seeds, args.work)
        )
        if args.target == "onnx-graph":
            (corpus / "seed").write_bytes(bytes(range(64)))
    elif args.target.startswith("model") or args.target == "lenet-bytes":
        seeds = model_seeds(args.seeds)
        assert seeds, f"no model seeds in {args.seeds}"
        target = {
            "lenet-bytes": lambda: LenetBytes(seeds, args.work, corpus),
            "model-bytes": lambda: ModelBytes(seeds, args.work, corpus),
            "model-config": lambda: ModelConfig(seeds),
            "model-h5": lambda: ModelH5(seeds, args.work),
        }[args.target]()
        if args.target not in ("model-bytes", "lenet-bytes"):
            (corpus / "seed").write_bytes(bytes(range(64)))
    elif args.target == "image-bytes":
        target = ImageBytes(corpus, args.work)
    else:
        target = ImageArray()
        (corpus / "seed").write_bytes(bytes(range(64)))
    flush()
    # libFuzzer ends a run with C's exit(), which runs no Python exit handler: the
    # last half second of stats is written by a C exit handler instead.
    global _flush_at_exit
    _flush_at_exit = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_void_p)(lambda status, arg: flush())
    ctypes.CDLL(None).on_exit(_flush_at_exit, None)  # glibc's; atexit is not an exported symbol
    atheris.Setup([sys.argv[0], *libfuzzer, str(corpus)], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
