"""Small Keras models written to disk, with what Keras itself outputs on them.

Every fixture is a file that ``lenet.keras.read_model`` (and ``lenet.Engine``)
reads, built with Keras 3 (``keras``) or Keras 2 (``tf_keras``), with seeded
random weights (biases too, so that a dropped bias shows) and a recorded Keras
output on seeded random inputs. ``get_fixtures()`` builds the whole set once per
process into a temporary directory (about 20 s on 2 cores, most of it importing
TensorFlow); ``build_fixtures(directory)`` writes it where you like.

Inputs (``KerasFixture.x``) are in the model's own input shape, as Keras takes
them: (N, H, W, C) for channels_last models, (N, C, H, W) for channels_first
ones, (N, 28, 28) for a (28, 28) input; already scaled as the model expects
(models with a Rescaling layer take raw 0..255 pixels).

The same architecture is built in both frameworks with the same weights (the
weights come from numpy, not from Keras' initialisers), so Keras 2 and Keras 3
files of one architecture must give the same ``ModelSpec``.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import re
import shutil
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

N_INPUTS = 256  # random inputs per fixture
# ../shared/mnist beside the checkout; LENET_MNIST_DIR overrides (as in conftest.py).
MNIST_DIR = Path(os.environ.get("LENET_MNIST_DIR", Path(__file__).resolve().parents[3] / "shared" / "mnist"))

# name -> framework. Tests parametrize over this without building anything.
FIXTURES = {
    "k3_testnet": "keras3",  # KERAS-H5.md section 8 test net: same padding odd/even, strides, same pools
    "k2_testnet": "keras2",
    "k3_testnet_keras": "keras3",  # the same model as a .keras zip
    "k2_testnet_weights": "keras2",  # Keras 2 save_weights + to_json
    "k3_lenet5": "keras3",  # classic LeNet-5: Rescaling 1/255, ZeroPadding 28->32, tanh, avg pools
    "k2_lenet5": "keras2",  # the same, first layer with input_shape= (batch_input_shape)
    "k3_activations": "keras3",  # use_bias=False, Activation/ReLU/Softmax layers, sigmoid,
    # ZeroPadding before a max pool, non-square pools
    "k2_activations": "keras2",
    "k3_cf": "keras3",  # channels_first, Flatten(channels_first): rows in HWC order
    "k2_cf": "keras2",
    "k3_cf_chw": "keras3",  # channels_first, Flatten(channels_last): rows in CHW order
    "k2_cf_chw": "keras2",
    "k3_functional": "keras3",  # Functional chain, layers named c1, c3, f5, f6
    "k2_functional": "keras2",
    "k3_functional_weights": "keras3",  # Keras 3 .weights.h5 + to_json (keys conv2d, conv2d_1 ... not c1, c3)
    "k3_deep_dense_weights": "keras3",  # 12 Dense layers: keys dense_10, dense_11 sort before dense_2
    "k2_deep_dense_weights": "keras2",
    "k3_mlp2d": "keras3",  # 2-D input (28, 28) -> Flatten first
    "k3_logits": "keras3",  # lenet-tf style, last Dense linear; lenet_input_scale attribute added
    "k2_list_json": "keras2",  # hand-written Keras <= 2.1 list-style Sequential JSON + save_weights
    "k2_list_json_cf": "keras2",  # the same for channels_first with a Flatten lacking data_format (CHW)
}


@dataclass
class KerasFixture:
    name: str
    framework: str  # "keras3" | "keras2"
    weights: Path  # the file for read_model(weights) / Engine(weights=...)
    arch: Optional[Path]  # the architecture JSON of a weights-only file, else None
    data_format: str  # "channels_last" | "channels_first"
    input_shape: tuple  # (H, W, C)
    x: np.ndarray  # inputs in the model's input shape, float32
    expected: np.ndarray  # what Keras outputs on x (float32; logits when `logits`)
    logits: bool  # the last layer is linear: compare softmax(expected)
    pixel_scale: float  # multiply 0..255 pixels by this to get the model's input
    reference: Callable[[np.ndarray], np.ndarray] = field(repr=False)  # x (engine layout) -> Keras output
    notes: str = ""


# ----------------------------------------------------------------------------- helpers


def softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def distribution(y: np.ndarray, kind: str) -> np.ndarray:
    """What predict_proba and every Result give for a model's outputs y (docs/python.md):
    softmax as is, log-softmax exponentiated, sigmoids divided by their sum, anything else
    softmaxed; in float64."""
    y = np.asarray(y, np.float64)
    if kind == "softmax":
        return y
    if kind == "log_softmax":
        return np.exp(y)
    if kind == "sigmoid":
        return y / y.sum(axis=1, keepdims=True)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def decisive_rows(expected: np.ndarray, tol: float) -> np.ndarray:
    """Rows whose argmax no answer within tol of `expected` can change: top-2 gap > 2 * tol. The
    argmax is compared on these rows only: elsewhere the two classes are tied at the tolerance,
    and which one wins depends on the order of the sums (oneDNN's, Eigen's, lenet's); random
    weights give flat outputs, and a few rows of the zoo (about 70 of 17,664) are such ties."""
    s = np.sort(np.asarray(expected, dtype=np.float64), axis=-1)
    return (s[..., -1] - s[..., -2]) > 2 * tol


def load_mnist_test(n: Optional[int] = None):
    """(images uint8 (n, 28, 28), labels uint8 (n,)) of the MNIST test set, or None
    when MNIST_DIR does not hold it."""
    img, lab = MNIST_DIR / "t10k-images-idx3-ubyte.gz", MNIST_DIR / "t10k-labels-idx1-ubyte.gz"
    if not (img.is_file() and lab.is_file()):
        return None
    from lenet.bench.workload import read_idx

    images, labels = read_idx(img), read_idx(lab)
    if n is not None:
        images, labels = images[:n], labels[:n]
    return images, labels


_loaded_models: dict = {}


def keras_model(path: Any):
    """The Keras 3 model of a full-model file (``keras.models.load_model(path,
    compile=False)``: it reads Keras 2 and 3 .h5 files and .keras files), loaded once."""
    key = str(Path(path).resolve())
    if key not in _loaded_models:
        import keras

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _loaded_models[key] = keras.models.load_model(key, compile=False)
    return _loaded_models[key]


def keras_predict(path_or_model: Any, x: np.ndarray, batch_size: int = 500) -> np.ndarray:
    """What Keras outputs on x (in the Keras model's own input layout). A path is loaded
    once with ``keras_model``; a model is called directly.

    A model with a channels_first layer is called through XLA, always: TensorFlow's own CPU
    kernels of Conv2D and the poolings take NCHW only when oneDNN is on, and TensorFlow turns
    oneDNN on by default only on processors with AVX-512 VNNI, BF16 or AMX (neither Keras 3
    nor tf_keras transposes for them). Choosing XLA by the model, not by a first failure,
    keeps the reference the same computation on every x86 processor, oneDNN on or off
    (XLA's CPU convolutions are FP32)."""
    model = keras_model(path_or_model) if isinstance(path_or_model, (str, os.PathLike)) else path_or_model
    x = np.asarray(x, dtype=np.float32)
    call = lambda t: model(t, training=False)  # noqa: E731
    if _has_channels_first_layer(model):
        import tensorflow as tf

        call = tf.function(call, jit_compile=True)
    outs = []
    for i in range(0, len(x), batch_size):
        y = call(x[i : i + batch_size])
        outs.append(np.asarray(y.numpy() if hasattr(y, "numpy") else y, dtype=np.float32))
    return np.concatenate(outs) if outs else np.zeros((0,), np.float32)


def _has_channels_first_layer(model) -> bool:
    """Whether any layer of the model, nested models included, is channels_first, when the
    model runs on TensorFlow (tf_keras, or Keras 3 on its TensorFlow backend)."""
    if not type(model).__module__.startswith("tf_keras"):
        import keras

        if keras.backend.backend() != "tensorflow":
            return False
    stack = list(getattr(model, "layers", []))
    while stack:
        layer = stack.pop()
        if getattr(layer, "data_format", None) == "channels_first":
            return True
        stack.extend(getattr(layer, "layers", []))
    return False


def _randomize(model, seed: int) -> None:
    """Deterministic weights from numpy: kernels N(0, 1/fan_in), biases N(0, 0.1)."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        ws = layer.get_weights()
        if not ws:
            continue
        new = []
        for w in ws:
            if w.ndim >= 2:
                fan_in = int(np.prod(w.shape[:-1]))
                new.append(rng.normal(0.0, 1.0 / np.sqrt(fan_in), w.shape).astype(np.float32))
            else:
                new.append(rng.normal(0.0, 0.1, w.shape).astype(np.float32))
        layer.set_weights(new)


def _frameworks() -> dict:
    out = {}
    try:
        import keras

        out["keras3"] = keras
    except ImportError:
        pass
    try:
        import tf_keras

        out["keras2"] = tf_keras
    except ImportError:
        pass
    return out


# ------------------------------------------------------------------------ architectures
# Each builder takes the Keras module (keras or tf_keras). Layers are named
# explicitly so that the names do not depend on what was built before.


def _testnet(K):
    L = K.layers
    return K.Sequential(
        [
            K.Input(shape=(28, 28, 1)),
            L.Conv2D(4, 3, strides=2, padding="same", activation="relu", name="c1"),  # 28->14, pad (0,1)
            L.Conv2D(5, 4, padding="same", name="c2"),  # pad (1,2)
            L.MaxPooling2D(3, strides=2, padding="same", name="p1"),  # 14->7, window hits the border
            L.AveragePooling2D(2, strides=2, padding="same", name="p2"),  # 7->4, averages real pixels
            L.Flatten(name="fl"),
            L.Dense(7, activation="tanh", name="d1"),
            L.Dense(3, name="d2"),  # logits
        ],
        name="testnet",
    )


def _lenet5(K, input_kwarg: bool = False, rescale: bool = True):
    """input_kwarg: no Input, the first layer gets input_shape= (Keras 2 style)."""
    L = K.layers
    kw = {"input_shape": (28, 28, 1)} if input_kwarg else {}
    first = [] if input_kwarg else [K.Input(shape=(28, 28, 1))]
    if rescale:
        first.append(L.Rescaling(1.0 / 255, name="scale", **kw))
        kw = {}
    return K.Sequential(
        first
        + [
            L.ZeroPadding2D(2, name="pad", **kw),  # 28 -> 32
            L.Conv2D(6, 5, activation="tanh", name="c1"),
            L.AveragePooling2D(2, name="s2"),
            L.Conv2D(16, 5, activation="tanh", name="c3"),
            L.AveragePooling2D(pool_size=2, strides=None, name="s4"),  # strides None = pool_size
            L.Flatten(name="fl"),
            L.Dense(120, activation="tanh", name="c5"),
            L.Dense(84, activation="tanh", name="f6"),
            L.Dense(10, activation="softmax", name="out"),
        ],
        name="lenet5",
    )


def _activations(K):
    L = K.layers
    return K.Sequential(
        [
            K.Input(shape=(28, 28, 1)),
            L.Conv2D(3, 3, use_bias=False, name="c1"),  # 26x26x3, no bias
            L.Activation("relu", name="a1"),
            L.ZeroPadding2D(((1, 0), (2, 1)), name="pad"),  # 27x29: zeros ARE pooled (not -inf)
            L.MaxPooling2D(2, name="p1"),  # 13x14
            L.Activation("sigmoid", name="a2"),
            L.Conv2D(4, 3, strides=(1, 2), padding="same", activation="sigmoid", name="c2"),  # 13x7
            L.ReLU(name="r1"),
            L.AveragePooling2D(pool_size=(3, 2), strides=(2, 1), padding="same", name="p2"),  # 7x7
            L.Flatten(name="fl"),
            L.Dropout(0.3, name="drop"),
            L.Dense(16, activation="tanh", use_bias=False, name="d1"),
            L.Dense(10, name="d2"),
            L.Softmax(name="sm"),
        ],
        name="activations",
    )


def _cf_net(K, df: str, flatten_df: Optional[str], permute_chw: bool = False):
    """The channels_first test net (df='channels_first'), or its channels_last twin.
    permute_chw inserts Permute((3, 1, 2)) before Flatten: the channels_last twin of a
    channels_first model whose Flatten is channels_last (rows in C, H, W order)."""
    L = K.layers
    shape = (1, 28, 28) if df == "channels_first" else (28, 28, 1)
    layers = [
        K.Input(shape=shape),
        L.Conv2D(4, 5, activation="relu", data_format=df, name="c1"),  # 24
        L.MaxPooling2D(2, data_format=df, name="p1"),  # 12
        L.ZeroPadding2D(1, data_format=df, name="pad"),  # 14
        L.Conv2D(6, 3, strides=2, padding="same", data_format=df, name="c2"),  # 7
        L.AveragePooling2D(2, padding="same", data_format=df, name="p2"),  # 4
    ]
    if permute_chw:
        layers.append(L.Permute((3, 1, 2), name="to_chw"))
    layers += [L.Flatten(data_format=flatten_df, name="fl"), L.Dense(10, activation="softmax", name="out")]
    return K.Sequential(layers, name="cfnet")


def _functional(K):
    L = K.layers
    inp = K.Input(shape=(28, 28, 1), name="img")
    x = L.Conv2D(6, 5, activation="relu", name="c1")(inp)
    x = L.MaxPooling2D(2, name="s2")(x)
    x = L.Conv2D(16, 5, activation="relu", name="c3")(x)
    x = L.MaxPooling2D(2, name="s4")(x)
    x = L.Flatten(name="fl")(x)
    x = L.Dense(32, activation="relu", name="f5")(x)
    x = L.Dropout(0.5, name="drop")(x)
    out = L.Dense(10, activation="softmax", name="f6")(x)
    return K.Model(inp, out, name="functional")


def _deep_dense(K):
    L = K.layers
    layers = [K.Input(shape=(8, 8, 1)), L.Flatten(name="fl")]
    layers += [L.Dense(8, activation="tanh", name=f"h{i}") for i in range(11)]
    layers += [L.Dense(4, activation="softmax", name="out")]
    return K.Sequential(layers, name="deep_dense")


def _mlp2d(K):
    L = K.layers
    return K.Sequential(
        [
            K.Input(shape=(28, 28)),
            L.Rescaling(1.0 / 255, name="scale"),
            L.Flatten(name="fl"),
            L.Dense(32, activation="relu", name="d1"),
            L.Dense(10, activation="softmax", name="out"),
        ],
        name="mlp2d",
    )


def _logits(K):
    L = K.layers
    return K.Sequential(
        [
            K.Input(shape=(28, 28, 1)),
            L.Conv2D(8, 5, padding="same", activation="relu", name="c1"),
            L.MaxPooling2D(2, name="p1"),
            L.Conv2D(16, 5, padding="same", activation="relu", name="c2"),
            L.MaxPooling2D(2, name="p2"),
            L.Flatten(name="fl"),
            L.Dense(64, activation="relu", name="d1"),
            L.Dropout(0.4, name="drop"),
            L.Dense(10, name="logits"),
        ],
        name="logits",
    )


def _old_list_json(model, drop_flatten_format: bool, version: str = "2.1.2") -> dict:
    """A Keras <= 2.1 style JSON from a tf_keras model: the Sequential config is the
    layer list itself, no InputLayer (the first layer carries batch_input_shape),
    no module/registered_name/build_config keys, dtype a plain string; with
    drop_flatten_format, Flatten has no data_format key (Keras < 2.1.6)."""
    cfg = json.loads(model.to_json())
    layers = cfg["config"]["layers"]
    batch_shape = None
    out = []
    for entry in layers:
        if entry["class_name"] == "InputLayer":
            batch_shape = entry["config"]["batch_input_shape"]
            continue
        c = copy.deepcopy(entry["config"])
        for k in ("groups", "kernel_initializer", "bias_initializer"):
            c.pop(k, None)
        if entry["class_name"] == "Flatten" and drop_flatten_format:
            c.pop("data_format", None)
        out.append({"class_name": entry["class_name"], "config": c})
    out[0]["config"] = {"batch_input_shape": batch_shape, **out[0]["config"]}
    return {"class_name": "Sequential", "config": out, "keras_version": version, "backend": "tensorflow"}


# ----------------------------------------------------------------------------- building


def _inputs(seed: int, shape: tuple, pixels: bool) -> np.ndarray:
    rng = np.random.default_rng(1000 + seed)
    if pixels:
        return rng.integers(0, 256, size=(N_INPUTS,) + shape).astype(np.float32)
    return rng.random((N_INPUTS,) + shape, dtype=np.float32)


def _save_full(model, path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(str(path))
    if path.suffix == ".keras":
        _without_dates(path)
    return path


def _without_dates(path: Path) -> None:
    """A .keras zip made the same to the byte on every run (its members and
    metadata.json carry the time of saving, config.json the addresses of shared
    Python objects as their ids): the fuzzers' seeds must not change between a CI run
    and the local run that replays it."""
    with zipfile.ZipFile(path) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            if name == "metadata.json":
                meta = json.loads(data)
                meta.pop("date_saved", None)
                data = json.dumps(meta).encode()
            elif name == "config.json":
                ids: dict = {}
                data = re.sub(
                    rb'"shared_object_id": (\d+)',
                    lambda m: b'"shared_object_id": %d' % ids.setdefault(m[1], len(ids) + 1),
                    data,
                )
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)


def build_fixtures(directory: Path, only: Optional[set] = None) -> dict[str, KerasFixture]:
    """Write the fixtures into ``directory``; returns {name: KerasFixture}. Fixtures of a
    framework that is not installed are left out."""
    with warnings.catch_warnings():  # Keras' legacy-format and numpy 2 __array__ warnings
        warnings.simplefilter("ignore")
        return _build_fixtures(Path(directory), only)


def _build_fixtures(directory: Path, only: Optional[set]) -> dict[str, KerasFixture]:
    directory.mkdir(parents=True, exist_ok=True)
    fw = _frameworks()
    out: dict[str, KerasFixture] = {}

    def want(name):
        return FIXTURES[name] in fw and (only is None or name in only)

    def add(
        name,
        model,
        weights,
        arch=None,
        *,
        seed,
        data_format="channels_last",
        input_shape=(28, 28, 1),
        pixels=False,
        logits=False,
        reference=None,
        notes="",
    ):
        if reference is None:
            reference = lambda x, m=model: keras_predict(m, x)  # noqa: E731
        shape = (
            input_shape
            if data_format == "channels_last" or len(input_shape) != 3
            else (input_shape[2], input_shape[0], input_shape[1])
        )
        x = _inputs(seed, shape, pixels)
        out[name] = KerasFixture(
            name,
            FIXTURES[name],
            weights,
            arch,
            data_format,
            input_shape,
            x,
            reference(x),
            logits,
            1.0 if pixels else 1.0 / 255,
            reference,
            notes,
        )

    def build(K, builder, seed, *args, **kw):
        m = builder(K, *args, **kw)
        _randomize(m, seed)
        return m

    for tag, prefix in (("keras3", "k3"), ("keras2", "k2")):
        if tag not in fw:
            continue
        K = fw[tag]

        # KERAS-H5.md section 8 test net.
        if any(want(n) for n in (f"{prefix}_testnet", "k3_testnet_keras", "k2_testnet_weights")):
            m = build(K, _testnet, 1)
            if want(f"{prefix}_testnet"):
                add(f"{prefix}_testnet", m, _save_full(m, directory / f"{prefix}_testnet.h5"), seed=1, logits=True)
            if tag == "keras3" and want("k3_testnet_keras"):
                add("k3_testnet_keras", m, _save_full(m, directory / "k3_testnet.keras"), seed=1, logits=True)
            if tag == "keras2" and want("k2_testnet_weights"):
                w = directory / "k2_testnet_weights.h5"
                m.save_weights(str(w))
                a = directory / "k2_testnet.json"
                a.write_text(m.to_json())
                add("k2_testnet_weights", m, w, a, seed=1, logits=True)

        if want(f"{prefix}_lenet5"):
            m = build(K, _lenet5, 2, input_kwarg=(tag == "keras2"))
            add(
                f"{prefix}_lenet5",
                m,
                _save_full(m, directory / f"{prefix}_lenet5.h5"),
                seed=2,
                pixels=True,
                notes="Rescaling(1/255) in the model: inputs are raw 0..255 pixels",
            )

        if want(f"{prefix}_activations"):
            m = build(K, _activations, 3)
            add(f"{prefix}_activations", m, _save_full(m, directory / f"{prefix}_activations.h5"), seed=3)

        # channels_first. The Keras reference comes from the channels_first model itself
        # when TensorFlow can run it (TF 2.21 on CPU does); older TF builds refuse NCHW
        # convolutions and pooling on the CPU ("only supports NHWC"), so it is also computed
        # with the channels_last twin (same HWIO kernels, NHWC input, Permute((3, 1, 2))
        # before the Flatten where the rows are in C, H, W order) and the two must agree.
        for suffix, flatten_df in (("cf", "channels_first"), ("cf_chw", "channels_last")):
            name = f"{prefix}_{suffix}"
            if not want(name):
                continue
            m = build(K, _cf_net, 4, "channels_first", flatten_df)
            twin = _cf_net(K, "channels_last", "channels_last", permute_chw=(flatten_df == "channels_last"))
            twin.set_weights(m.get_weights())
            ref = _channels_first_reference(m, twin)
            add(
                name,
                m,
                _save_full(m, directory / f"{name}.h5"),
                seed=4,
                data_format="channels_first",
                reference=ref,
                notes=f"channels_first, Flatten(data_format={flatten_df!r})",
            )

        if want(f"{prefix}_functional") or want("k3_functional_weights"):
            m = build(K, _functional, 5)
            if want(f"{prefix}_functional"):
                add(f"{prefix}_functional", m, _save_full(m, directory / f"{prefix}_functional.h5"), seed=5)
            if tag == "keras3" and want("k3_functional_weights"):
                w = directory / "k3_functional.weights.h5"
                m.save_weights(str(w))
                a = directory / "k3_functional.json"
                a.write_text(m.to_json())
                add("k3_functional_weights", m, w, a, seed=5)

        name = f"{prefix}_deep_dense_weights"
        if want(name):
            m = build(K, _deep_dense, 6)
            w = directory / (f"{name}.weights.h5" if tag == "keras3" else f"{name}.h5")
            m.save_weights(str(w))
            a = directory / f"{name}.json"
            a.write_text(m.to_json())
            add(name, m, w, a, seed=6, input_shape=(8, 8, 1))

        if tag == "keras3" and want("k3_mlp2d"):
            m = build(K, _mlp2d, 7)
            add(
                "k3_mlp2d",
                m,
                _save_full(m, directory / "k3_mlp2d.h5"),
                seed=7,
                pixels=True,
                input_shape=(28, 28),
                notes="input (N, 28, 28)",
            )

        if tag == "keras3" and want("k3_logits"):
            import h5py

            m = build(K, _logits, 8)
            p = _save_full(m, directory / "k3_logits.h5")
            with h5py.File(p, "a") as f:
                f.attrs["lenet_input_scale"] = np.float64(1.0 / 255)
            add("k3_logits", m, p, seed=8, logits=True)

        if tag == "keras2" and want("k2_list_json"):
            # Keras 2.1 had no Rescaling layer: LeNet-5 without it.
            plain = build(K, _lenet5, 9, input_kwarg=True, rescale=False)
            w = directory / "k2_list_json.h5"
            plain.save_weights(str(w))
            cfg = _old_list_json(plain, drop_flatten_format=True)
            a = directory / "k2_list_json.json"
            a.write_text(json.dumps(cfg))
            add("k2_list_json", plain, w, a, seed=9, notes="Keras <= 2.1 list-style Sequential JSON")

        if tag == "keras2" and want("k2_list_json_cf"):
            # Keras < 2.1.6: Flatten has no data_format and flattens the NCHW tensor as it
            # is (rows in C, H, W order) - the same as Flatten(data_format='channels_last').
            m = build(K, _cf_net, 4, "channels_first", "channels_last")  # the weights of k2_cf_chw
            twin = _cf_net(K, "channels_last", "channels_last", permute_chw=True)
            twin.set_weights(m.get_weights())
            w = directory / "k2_list_json_cf.h5"
            m.save_weights(str(w))
            a = directory / "k2_list_json_cf.json"
            a.write_text(json.dumps(_old_list_json(m, drop_flatten_format=True, version="2.0.6")))
            add(
                "k2_list_json_cf",
                m,
                w,
                a,
                seed=10,
                data_format="channels_first",
                reference=_channels_first_reference(m, twin),
                notes="Keras 2.0 list-style JSON, channels_first, Flatten without data_format (CHW)",
            )
    return out


def _channels_first_reference(model, twin) -> Callable[[np.ndarray], np.ndarray]:
    def reference(x: np.ndarray) -> np.ndarray:
        y_twin = keras_predict(twin, np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
        try:
            y = keras_predict(model, x)
        except Exception:  # TF without NCHW kernels on the CPU: the twin is the reference
            return y_twin
        assert np.abs(y - y_twin).max() <= 1e-5, "channels_first model and its channels_last twin disagree"
        return y

    return reference


_cache: dict = {}


def get_fixtures() -> dict[str, KerasFixture]:
    """All fixtures, built once per process into a temporary directory removed at exit."""
    if "all" not in _cache:
        d = Path(tempfile.mkdtemp(prefix="lenet-keras-fixtures-"))
        atexit.register(shutil.rmtree, d, True)
        _cache["all"] = build_fixtures(d)
    return _cache["all"]


if __name__ == "__main__":  # python tests/models/keras_fixtures.py [DIR]: write and list them
    import sys
    import time

    t = time.perf_counter()
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="lenet-keras-fixtures-"))
    fx = build_fixtures(target)
    for f in fx.values():
        print(
            f"{f.name:24s} {f.weights.name:32s} {f.arch.name if f.arch else '':24s} {f.data_format:15s} "
            f"{f.expected.shape} {f.notes}"
        )
    print(f"{len(fx)} fixtures in {target} ({time.perf_counter() - t:.1f} s)")


# Shared by the loader and parity tests: the fixture set, built once per session.
@pytest.fixture(scope="session")
def fixtures():
    return get_fixtures()


def fixture(fixtures, name):
    """One fixture by name; skips visibly when its Keras flavour is not installed."""
    if name not in fixtures:
        pytest.skip(f"{name}: {FIXTURES[name]} (tf_keras for keras2) is not installed")
    return fixtures[name]


def edit_config(path, fn):
    """Rewrites the model_config attribute of a full-model .h5 with fn(config)."""
    import h5py

    with h5py.File(path, "a") as f:
        cfg = json.loads(f.attrs["model_config"])
        fn(cfg)
        f.attrs["model_config"] = json.dumps(cfg)
