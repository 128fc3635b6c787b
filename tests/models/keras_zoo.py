"""A zoo of small Keras models as people write them for MNIST, saved in every Keras
file form, with what Keras itself outputs on them.

``keras_fixtures.py`` holds a few hand-picked LeNets; this module is the wide net:
one *case* per layer or placement that real MNIST models use, built with Keras 3
(``keras``) and, where tf_keras has the layer, with Keras 2 (``tf_keras``), with
the same weights (drawn from numpy, never from Keras' initialisers), saved in the
file forms of its framework, and the output Keras computes on ``x`` recorded.

    get_zoo(only=None)             -> Zoo {name: ZooModel}, built once per process (temp dir); only: cases
    build_zoo(directory, only)     -> the same into a directory; only = set of case names
    CASES                          -> {case: what it covers}; tests parametrize over it without building
    LAYER_CLASSES / build_layer_zoo(directory) / get_layer_zoo()
                                   -> one small model per public class of keras.layers (Keras 3),
                                      Zoo {class name: ZooModel}; LAYER_ALIASES, LAYER_SKIPPED (why)
    Zoo.not_built                  -> {key: why}: the models the tests expect that could not be built
                                      here (a layer class, or "<k3|k2>_<case>"), each with its reason
    verify(models)                 -> reload every file with Keras and compare with ``expected``;
                                      KERAS3_REFUSES / KERAS3_DIFFERS say where Keras 3 cannot

``python tests/models/keras_zoo.py DIR [--layers] [--verify]`` builds into DIR and prints a table.

Names: ``<k3|k2>_<case>.<form tag>``: ``.h5`` (``model.save('x.h5')``), ``.keras`` (zip),
``.weights.h5`` (Keras 3 ``save_weights('x.weights.h5')`` + ``to_json()``), ``.weights``
(Keras 2 ``save_weights('x.h5')``, legacy layout + ``to_json()``), ``.keras_windows``.

Inputs ``x`` are in the Keras model's own input shape (N, *input_shape). For a model whose
input is a 28x28 image in some form ((784,), (28, 28), (28, 28, 1), (1, 28, 28)) and when
MNIST is present (../shared/mnist or $LENET_MNIST_DIR), the first 64 rows are the first 64
MNIST test digits and ``mnist`` is True; the other 64 rows (all 128 otherwise) are seeded
random values. Scaling: raw 0..255 pixels when the model starts with Rescaling or
Normalization (looking past InputLayer, Reshape, Flatten and the Random* augmentation layers,
which are identities at inference), else pixels / 255; random rows are integers 0..255 or
U[0, 1) accordingly. ``expected`` is ``model(x, training=False)`` of the model that was saved,
raw (logits stay logits), float32.

Weights: every float variable is set from numpy, keyed by (case, layer name, index,
variable name), so the Keras 2 and Keras 3 twins of a case get the same values (layer names
are Keras' automatic ones: ``clear_session()`` runs before each build, so they do not depend
on what was built before). Kernels N(0, 1/fan_in) (depthwise kernels: fan_in = kh*kw), biases
and beta N(0, 0.1), gamma and (moving_)variance U(0.5, 1.5), moving_mean N(0, 0.2), PReLU
alpha U(0.05, 0.5). STFTSpectrogram keeps its DFT kernels. Normalization keeps what ``adapt()``
or its constructor gave it (adapted on
the first 2000 MNIST *training* digits; on seeded random pixels when MNIST is absent). Integer
variables (Keras 3 SeedGenerator states, Normalization count) are left alone. A case's
``gain`` multiplies its first kernel, so that clipping activations (relu6, hard_sigmoid, ReLU
max_value) are exercised.

Cases (see CASES for the list; k2 = also built with tf_keras):
- MLPs: mlp784 (+Dropout), mlp2d (Flatten first), mlp784_logits (linear output).
- Reshape: reshape_cnn (784 -> (28, 28, 1)), dense_reshape_conv (Dense(392) -> (7, 7, 8)),
  reshape2d_cnn ((28, 28) -> (28, 28, 1)).
- BatchNormalization: bn_cnn (Conv(use_bias=False)/Conv -> BN -> Activation), bn_mlp,
  bn_input (right after the Input), bn_center_scale (center/scale False, epsilon 1e-5),
  bn_after_pool (epsilon 0.01, momentum 0.9), bn_branch (BN input also feeds a 1x1 conv),
  bn_trained (BN after activations, epsilon 1e-5, statistics measured on MNIST as training
  leaves them, |mean| / std in the hundreds: what folding a BN costs in float32).
- Heads: head_sigmoid, head_relu, head_log_softmax, head_activation_softmax, head_softmax_layer (and
  mlp784_logits / lenet logits elsewhere).
- Preprocessing: rescale_cnn, rescale_offset (1/127.5, -1), norm_adapted (adapted, per
  channel), norm_adapted_flat (axis=None on 784), norm_const (mean=/variance= given),
  resize_bilinear / resize_nearest (28 -> 32), resize_down (28 -> 14), augment_identity
  (RandomFlip/Rotation/Zoom/Translation), augment_nested (nested Sequential augmentation in a
  functional model), dense_4d (Dense on a 4-D tensor), nested_cnn (nested Sequential with weights).
- Other layers: gap / gmp (+ _keepdims), leaky_relu (default 0.3 and 0.1), elu_layer, prelu
  (per-element alpha and shared_axes=[1, 2]), relu_variants (max_value=6; negative_slope=0.1,
  threshold=0.5), act_<name> for selu, elu, gelu, swish, softplus, softsign, hard_sigmoid,
  relu6, exponential, tanh, sigmoid; act_inline (the same names as Dense(activation=...)),
  act_conv (every activation name, mish, silu, hard_silu, leaky_relu included, after a Conv2D),
  identity_layers (SpatialDropout2D, GaussianNoise, GaussianDropout, ActivityRegularization,
  AlphaDropout), cropping (symmetric, asymmetric), zero_padding, depthwise (multiplier 1, 2),
  separable, dilated, grouped (groups=2, 4), pool_strides (strides != pool_size, 'same'),
  cf_cnn / cf_global / cf_gap (channels_first, input (1, 28, 28)), lenet5_32 ((32, 32, 1) input),
  cnn16 ((16, 16, 1) input: digits drawn at 16x16),
  lenet5_classic (tanh, average pooling, sigmoid head).
- Functional: bn_dropout_functional (BatchNormalization, Dropout), residual (Add), concat_branches
  (Concatenate on channels), merge_average,
  merge_multiply, merge_subtract, merge_maximum, merge_minimum, concat_dense (two flat branches).

Keras 2 (tf_keras 2.21) vs Keras 3 (3.15.1) differences seen in these files (dumped with h5py):
- ``hard_sigmoid``: tf_keras ``clip(0.2x + 0.5, 0, 1)``, Keras 3 ``relu6(x + 3) / 6`` =
  ``clip(x/6 + 0.5, 0, 1)``, under the same name in the file. Keras 3 loading a tf_keras file
  computes its own formula (KERAS3_DIFFERS). Every other activation agrees (max diff 0).
- ``swish``: tf_keras writes ``"swish"``, Keras 3 ``"silu"`` (same function, both names load).
  ``gelu`` as a string is the exact erf form in both (approximate=False).
- LeakyReLU: tf_keras ``{"alpha": 0.30000001192092896}`` (float32 noise), Keras 3
  ``{"negative_slope": 0.3}``. ReLU: ``max_value``, ``negative_slope``, ``threshold`` in both.
- BatchNormalization ``axis``: tf_keras a list (``[3]``, ``[1]``), Keras 3 an int (-1, 1); Keras 3
  adds synchronized/renorm keys. Weights gamma, beta, moving_mean, moving_variance in both.
- DepthwiseConv2D: the kernel is ``depthwise_kernel`` in tf_keras, ``kernel`` in Keras 3 (same
  (kh, kw, in, multiplier) array); tf_keras writes a ``groups`` key Keras 3 rejects.
  SeparableConv2D: depthwise_kernel, pointwise_kernel, bias in both.
- Normalization: variables mean, variance, count (int64 scalar) in both; legacy .h5 names
  ``normalization/mean`` (Keras 3, no model prefix, unlike every other layer) vs ``mean:0``
  (tf_keras, no layer prefix). With mean=/variance= in the constructor there are no weights
  at all, only the config values. ``axis=None`` is written as ``"axis": []``.
- RandomRotation ``factor``: tf_keras 0.1, Keras 3 [-0.1, 0.1]; tf_keras random layers add
  ``rng_type``. No Random* layer has weights in a file (Keras 3 SeedGenerator state is not saved).
- Resizing: Keras 3 adds data_format, pad_to_aspect_ratio, fill_mode, fill_value, antialias.
- Nested model in legacy .h5: the group of the nested model (``model_weights/features``) holds
  ``weight_names`` ``features/conv2d/kernel`` (Keras 3: datasets at ``features/features/conv2d/kernel``)
  or ``conv2d/kernel:0`` (tf_keras: datasets at ``features/conv2d/kernel:0``), the inner layers
  in order. tf_keras refers to the call as inbound node ``["features", 1, 0, {}]`` (node 1:
  node 0 is the nested model's own Input); Keras 3 cannot load that.
- Nested model in ``.weights.h5`` / ``.keras``: ``layers/sequential/layers/conv2d/vars/0`` (keys
  are snake_case class names with per-class counters at each level; the nested model also has
  an empty ``layers/sequential/vars``). Keras 3 puts ``@name`` (the layer name) on each vars
  group; tf_keras writes no attributes.
- Keras 3 reads tf_keras files only in part: see KERAS3_REFUSES (config keys it rejects, the
  class ``Functional`` in a tf_keras .keras, BN axis lists in .keras, nested-model node indices).

Keras 3 oddities met by the layer walker (keras 3.15.1, TF 2.21, CPU): AdaptiveMaxPooling3D
with an output size of 1 on any axis kills the process (SIGFPE); RandomCrop passes its input
through at inference although its output shape is the crop size; legacy .h5 saving fails with
"cannot pickle 'module' object" for RandomBrightness, RandomColorDegeneration,
RandomPosterization, RandomSaturation, RandomSharpness and Solarization (saved as .keras
instead); a functional Masking writes its mask ops as layers ``NotEqual`` and ``Any`` into
model_config; Keras 3 cannot reload its own .h5 for Normalization(axis=None), Attention,
Masking, RandomShear (KERAS3_REFUSES).

"keras_windows" form: a tf_keras ``.keras`` zip whose model.weights.h5 is laid out as
tf_keras writes it on Windows. tf_keras ``saving_lib`` joins the inner path of each object
with ``tf.io.gfile.join`` (= ``os.path.join`` = ``ntpath.join`` on Windows) and
``H5IOStore.make(path)`` calls ``h5_file.create_group(path).create_group("vars")``, so each
layer's group is a *root* group whose name holds backslashes: ``layers\\conv2d/vars/0``,
``layers\\conv2d/vars/1``, ``layers\\flatten/vars`` (empty), for a nested model
``layers\\sequential/vars`` and ``layers\\sequential\\layers\\conv2d/vars/0``; the model's own
``vars`` group stays ``vars`` at the root. There is no ``layers`` group. (Keras 3 joins with
``file_utils.join(...).replace("\\\\", "/")``, so Keras 3 files never have this; see
keras-team/keras#18528.) We produce it by copying every ``.../vars`` group of a Linux-written
tf_keras .keras to that name. Neither Keras 3 nor tf_keras on Linux loads it (``expected`` is
the original model's output); tf_keras with ``tf.io.gfile.join`` patched to ``ntpath.join``
does, which ``verify`` checks.
"""

from __future__ import annotations

import atexit
import dataclasses
import inspect
import io
import ntpath
import os
import shutil
import sys
import tempfile
import time
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if str(Path(__file__).resolve().parent) not in sys.path:  # keras_fixtures beside this file
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from keras_fixtures import MNIST_DIR, _without_dates, keras_predict, load_mnist_test  # noqa: E402

N_MNIST = 64  # MNIST test digits at the head of x (when present)
N_RANDOM = 64  # random rows after them (128 when x has no MNIST rows)
IMAGE_SHAPES = {(784,), (28, 28), (28, 28, 1), (1, 28, 28)}


@dataclass
class ZooModel:
    name: str  # unique, e.g. "k3_bn_cnn.h5", "k2_mlp784.weights"
    case: str  # the architecture case name, e.g. "bn_cnn"
    framework: str  # "keras3" | "keras2"  (keras2 = tf_keras)
    form: str  # "h5" | "keras" | "weights_h5" (Keras 2) | "weights.h5" (Keras 3) | "keras_windows"
    path: Path  # the model/weights file
    arch: Optional[Path]  # the to_json() file for weights-only forms, else None
    input_shape: tuple  # the Keras per-sample input shape, e.g. (784,), (28, 28, 1), (1, 28, 28)
    x: np.ndarray  # float32 inputs (N, *input_shape)
    expected: np.ndarray  # float32: model(x, training=False), raw
    mnist: bool  # the first 64 rows of x are MNIST test digits
    notes: str = ""


class Zoo(dict):
    """{name: ZooModel}, and ``not_built``: {key: reason} for each model the tests expect that could
    not be built here (key: a class of LAYER_CLASSES, or "<k3|k2>_<case>"). A test that wants such
    a model fails with the reason (``require``), never with a KeyError, and never skips: what the
    zoo needs is declared in pyproject.toml's test extra."""

    def __init__(self):
        super().__init__()
        self.not_built: dict[str, str] = {}

    def require(self, *keys: str) -> None:
        """Fails the calling test, with the reasons, when any of keys could not be built."""
        why = [f"{k}: {self.not_built[k]}" for k in keys if k in self.not_built]
        if why:
            import pytest

            pytest.fail("the Keras zoo could not build " + "; ".join(why), pytrace=False)


def _why(e: BaseException) -> str:
    why = f"{type(e).__name__}: {e}"
    if isinstance(e, ImportError):
        why += (
            " (a module Keras needs for it is missing: the tests' dependencies are declared in "
            "pyproject.toml's test extra, pip install '.[test]')"
        )
    return why


# Seconds spent per ZooModel name (build + weights + predict for the first form of a model,
# plus its own save), filled by build_zoo / build_layer_zoo.
BUILD_SECONDS: dict[str, float] = {}


# ----------------------------------------------------------------------------- helpers


def _frameworks() -> tuple[dict, dict[str, str]]:
    """({tag: module} of the Keras versions importable here, {tag: why not} for the others)."""
    found, missing = {}, {}
    for tag, mod in (("keras3", "keras"), ("keras2", "tf_keras")):
        try:
            found[tag] = __import__(mod)
        except ImportError as e:
            missing[tag] = f"{mod} cannot be imported: {_why(e)}"
    return found, missing


def _clear(K) -> None:
    """Fresh automatic layer names (dense, dense_1, ...) for the next build."""
    if K.__name__ == "keras":
        K.backend.clear_session(free_memory=False)
    else:
        K.backend.clear_session()


def _seed(*parts) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


def _leaf_layers(layer):
    """The layers holding weights themselves: nested models are opened, wrappers
    (Bidirectional, TimeDistributed...) are kept whole."""
    subs = getattr(layer, "layers", None)
    if isinstance(subs, list) and (subs or hasattr(layer, "inputs")):
        for sub in subs:
            yield from _leaf_layers(sub)
    else:
        yield layer


# Layers whose variables are not random: Normalization (adapt() or constructor values) and
# STFTSpectrogram (real_kernel/imag_kernel are the windowed DFT basis its config defines).
_KEEP_WEIGHTS = {"Normalization", "STFTSpectrogram"}


def _set_weights(model, key: str, gain: float = 1.0) -> None:
    """Deterministic weights from numpy (see the module docstring)."""
    first = True
    for layer in _leaf_layers(model):
        if type(layer).__name__ in _KEEP_WEIGHTS:
            continue
        ws = layer.get_weights()
        if not ws:
            continue
        names = [v.name.split(":")[0].split("/")[-1] for v in layer.weights]
        assert len(names) == len(ws), (layer.name, names)
        if type(layer).__name__.startswith("DepthwiseConv"):  # Keras 3 calls it "kernel"
            names = ["depthwise_kernel" if n == "kernel" else n for n in names]
        new = []
        for i, (short, w) in enumerate(zip(names, ws)):
            if not np.issubdtype(w.dtype, np.floating):
                new.append(w)
                continue
            rng = np.random.default_rng(_seed(key, layer.name, i, short))
            shape = w.shape
            if short in ("gamma", "moving_variance", "variance"):
                v = rng.uniform(0.5, 1.5, shape)
            elif short == "moving_mean":
                v = rng.normal(0.0, 0.2, shape)
            elif short == "alpha":
                v = rng.uniform(0.05, 0.5, shape)
            elif w.ndim >= 2:
                fan_in = int(np.prod(shape[:-2] if short == "depthwise_kernel" else shape[:-1])) or 1
                v = rng.normal(0.0, 1.0 / np.sqrt(fan_in), shape)
                if first and "kernel" in short:
                    v = v * gain
                    first = False
            else:
                v = rng.normal(0.0, 0.1, shape)
            new.append(v.astype(w.dtype))
        layer.set_weights(new)


_TRANSPARENT = {"InputLayer", "Reshape", "Flatten", "RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation"}


def takes_raw_pixels(model) -> bool:
    """True when the model starts with Rescaling or Normalization (it wants 0..255)."""
    for layer in _leaf_layers(model):
        cls = type(layer).__name__
        if cls in _TRANSPARENT:
            continue
        return cls in ("Rescaling", "Normalization")
    return False


_mnist_cache: dict = {}


def _mnist_test_digits() -> Optional[np.ndarray]:
    if "test" not in _mnist_cache:
        t = load_mnist_test(N_MNIST)
        _mnist_cache["test"] = None if t is None else t[0]
    return _mnist_cache["test"]


def _mnist_train_pixels(n: int = 2000) -> np.ndarray:
    """(n, 28, 28) float32 raw pixels: the first n MNIST *training* digits (adapt() data;
    the test set is never used for fitting anything), seeded random pixels without MNIST."""
    if "train" not in _mnist_cache:
        p = MNIST_DIR / "train-images-idx3-ubyte.gz"
        if p.is_file():
            from lenet.bench.workload import read_idx

            imgs = read_idx(p)[:n]
        else:
            imgs = np.random.default_rng(7).integers(0, 256, (n, 28, 28))
        _mnist_cache["train"] = imgs.astype(np.float32)
    return _mnist_cache["train"]


def make_x(key: str, input_shape: tuple, raw: bool) -> tuple[np.ndarray, bool]:
    """(x, mnist) for a model taking input_shape (see the module docstring)."""
    rng = np.random.default_rng(_seed("x", key))
    digits = _mnist_test_digits() if tuple(input_shape) in IMAGE_SHAPES else None
    n_rand = N_RANDOM if digits is not None else N_MNIST + N_RANDOM
    if raw:
        rand = rng.integers(0, 256, (n_rand,) + tuple(input_shape)).astype(np.float32)
    else:
        rand = rng.random((n_rand,) + tuple(input_shape), dtype=np.float32)
    if digits is None:
        return rand, False
    d = digits.astype(np.float32).reshape((N_MNIST,) + tuple(input_shape))
    if not raw:
        d = d / np.float32(255.0)
    return np.ascontiguousarray(np.concatenate([d, rand]), dtype=np.float32), True


def _input_shape(model) -> tuple:
    shape = model.inputs[0].shape
    return tuple(int(d) for d in shape[1:])


class _Silence:
    """Keras' legacy-format and numpy-2 warnings, and absl's HDF5 nag."""

    def __enter__(self):
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")
        import logging

        self._lg = [(lg, lg.level) for lg in (logging.getLogger("absl"), logging.getLogger("tensorflow"))]
        for lg, _ in self._lg:
            lg.setLevel(logging.ERROR)
        return self

    def __exit__(self, *a):
        for lg, lvl in self._lg:
            lg.setLevel(lvl)
        self._w.__exit__(*a)


# ------------------------------------------------------------------------ saving


def _save(model, framework: str, form: str, directory: Path, stem: str) -> tuple[Path, Optional[Path]]:
    """Write model in one form; returns (path, arch json or None)."""
    if form == "h5":
        p = directory / f"{stem}.h5"
        model.save(str(p))
        return p, None
    if form == "keras":
        p = directory / f"{stem}.keras"
        model.save(str(p))
        _without_dates(p)
        return p, None
    if form == "weights.h5":
        assert framework == "keras3"
        p = directory / f"{stem}.weights.h5"
        model.save_weights(str(p))
        a = directory / f"{stem}.json"
        a.write_text(model.to_json())
        return p, a
    if form == "weights_h5":
        assert framework == "keras2"
        p = directory / f"{stem}_weights.h5"
        model.save_weights(str(p))
        a = directory / f"{stem}.json"
        a.write_text(model.to_json())
        return p, a
    if form == "keras_windows":
        assert framework == "keras2"
        tmp = directory / f".{stem}_linux.keras"
        model.save(str(tmp))
        p = directory / f"{stem}_windows.keras"
        windows_keras(tmp, p)
        tmp.unlink()
        return p, None
    raise ValueError(form)


def _backslash_weights(data: bytes) -> bytes:
    """model.weights.h5 bytes -> the same with every '<a>/<b>/.../vars' group moved to a
    root group '<a>\\<b>\\...' (holding 'vars'), as tf_keras writes it on Windows."""
    import h5py

    src = h5py.File(io.BytesIO(data), "r")
    buf = io.BytesIO()
    dst = h5py.File(buf, "w")
    groups = []
    src.visititems(lambda n, o: groups.append(n) if isinstance(o, h5py.Group) and n.split("/")[-1] == "vars" else None)
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    for g in groups:
        parent = g[: -len("vars")].rstrip("/")
        target = dst if not parent else dst.create_group(parent.replace("/", "\\"))
        src.copy(src[g], target, name="vars")
    dst.close()
    src.close()
    return buf.getvalue()


def windows_keras(src: Path, dst: Path) -> None:
    """A .keras zip as tf_keras writes it on Windows (see the module docstring)."""
    with zipfile.ZipFile(src) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    tmp = Path(str(dst) + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for name, data in members:
            if name == "model.weights.h5":
                data = _backslash_weights(data)
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    _without_dates(tmp)
    tmp.replace(dst)


# ----------------------------------------------------------------------- cases


def _seq(K, shape, *layers, name=None):
    return K.Sequential([K.Input(shape=shape), *layers], **({"name": name} if name else {}))


def _head(L, act="softmax"):
    return [L.Flatten(), L.Dense(10, activation=act)]


def _set_data_format(K, fmt: str) -> str:
    cfg = getattr(K, "config", None)
    if cfg is not None and hasattr(cfg, "set_image_data_format"):
        old = cfg.image_data_format()
        cfg.set_image_data_format(fmt)
    else:
        old = K.backend.image_data_format()
        K.backend.set_image_data_format(fmt)
    return old


def _adapted_normalization(K, shape, **kw):
    layer = K.layers.Normalization(**kw)
    layer.adapt(_mnist_train_pixels().reshape((-1,) + tuple(shape)))
    return layer


def _b_mlp784(K, dropout=False, logits=False):
    L = K.layers
    layers = [L.Dense(64, activation="relu")]
    layers += [L.Dropout(0.2)] if dropout else []
    layers += [L.Dense(32, activation="relu")]
    layers += [L.Dropout(0.5)] if dropout else []
    layers += [L.Dense(10, activation=None if logits else "softmax")]
    return _seq(K, (784,), *layers)


def _b_mlp2d(K):
    L = K.layers
    return _seq(K, (28, 28), L.Flatten(), L.Dense(64, activation="relu"), L.Dense(10, activation="softmax"))


def _b_reshape_cnn(K):
    L = K.layers
    return _seq(
        K,
        (784,),
        L.Reshape((28, 28, 1)),
        L.Conv2D(6, 5, activation="relu"),
        L.MaxPooling2D(2),
        L.Conv2D(12, 5, activation="relu"),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_dense_reshape_conv(K):
    L = K.layers
    return _seq(
        K,
        (784,),
        L.Dense(7 * 7 * 8, activation="relu"),
        L.Reshape((7, 7, 8)),
        L.Conv2D(8, 3, padding="same", activation="relu"),
        *_head(L),
    )


def _b_reshape2d_cnn(K):
    L = K.layers
    return _seq(K, (28, 28), L.Reshape((28, 28, 1)), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(2), *_head(L))


def _b_bn_cnn(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(8, 3, use_bias=False),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.MaxPooling2D(2),
        L.Conv2D(16, 3),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_bn_mlp(K):
    L = K.layers
    return _seq(
        K,
        (784,),
        L.Dense(64),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.Dense(32, use_bias=False),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.Dense(10, activation="softmax"),
    )


def _b_ln_mlp(K):
    L = K.layers
    return _seq(
        K,
        (784,),
        L.Dense(64),
        L.LayerNormalization(),
        L.Activation("relu"),
        L.Dense(32),
        L.LayerNormalization(center=False, epsilon=1e-5),
        L.Activation("gelu"),
        L.Dense(10, activation="softmax"),
    )


def _b_ln_cnn(K):
    L = K.layers
    return _seq(
        K, (28, 28, 1), L.Conv2D(8, 3), L.LayerNormalization(), L.Activation("relu"), L.MaxPooling2D(2), *_head(L)
    )


def _b_conv1d_rows(K):
    """The image as 28 rows of 28 values: Conv1D over the rows (a Reshape to (28, 28) first)."""
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Reshape((28, 28)),
        L.Conv1D(16, 3, activation="relu"),
        L.MaxPooling1D(2),
        L.Conv1D(16, 3, padding="same", strides=2),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.GlobalAveragePooling1D(),
        L.Dense(10, activation="softmax"),
    )


def _b_bn_trained(K):
    L = K.layers
    bn = {"epsilon": 1e-5}
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(16, 3, activation="relu"),
        L.BatchNormalization(**bn),
        L.Conv2D(32, 3, activation="relu"),
        L.BatchNormalization(**bn),
        L.MaxPooling2D(2),
        L.Conv2D(32, 3),
        L.BatchNormalization(**bn),
        L.Activation("relu"),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(64, activation="relu"),
        L.BatchNormalization(**bn),
        L.Dense(10, activation="softmax"),
    )


def _trained_bn_statistics(model, key: str) -> None:
    """Batch-norm statistics as training leaves them, and as extreme as trained nets hold:
    the layers before each BatchNormalization get large steady responses (biases of tens,
    as channels of a trained net that are always on), and each BatchNormalization's
    moving mean and variance are the mean and variance of its input over MNIST training
    digits: means in the tens to hundreds, variances from 1e-3 up, |mean| / std in the
    hundreds (the engine folding them into the next convolution lost 2e-5 against Keras)."""
    rng = np.random.default_rng(_seed("trained-bn", key))
    layers = list(_leaf_layers(model))
    for prev, layer in zip(layers, layers[1:]):
        if type(layer).__name__ == "BatchNormalization" and len(prev.get_weights()) == 2:
            kernel, bias = prev.get_weights()
            prev.set_weights([kernel, np.abs(rng.normal(0.0, 30.0, bias.shape)).astype(bias.dtype)])
    x = _mnist_train_pixels()[:500].reshape((-1,) + _input_shape(model)) / np.float32(255.0)
    for layer in layers:
        if type(layer).__name__ != "BatchNormalization":
            continue
        seen = np.asarray(_sub_model(model, layer)(x), dtype=np.float64)
        axes = tuple(range(seen.ndim - 1))
        gamma, beta, _, _ = layer.get_weights()
        layer.set_weights([gamma, beta, seen.mean(axes).astype(np.float32), seen.var(axes).astype(np.float32)])


def _sub_model(model, layer):
    import importlib

    K = importlib.import_module(type(model).__module__.split(".")[0])
    return K.Model(model.inputs, layer.input)


def _b_bn_input(K):
    L = K.layers
    return _seq(K, (28, 28, 1), L.BatchNormalization(), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(2), *_head(L))


def _b_bn_center_scale(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3),
        L.BatchNormalization(center=False),
        L.Activation("relu"),
        L.Conv2D(6, 3, strides=2),
        L.BatchNormalization(scale=False),
        L.Activation("relu"),
        L.Conv2D(8, 3),
        L.BatchNormalization(center=False, scale=False, epsilon=1e-5),
        *_head(L),
    )


def _b_bn_after_pool(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(6, 5, activation="relu"),
        L.MaxPooling2D(2),
        L.BatchNormalization(epsilon=0.01, momentum=0.9),
        L.Conv2D(8, 3, activation="relu"),
        L.AveragePooling2D(2),
        L.BatchNormalization(epsilon=0.1),
        *_head(L),
    )


def _b_bn_branch(K):
    L = K.layers
    inp = K.Input(shape=(28, 28, 1))
    x = L.Conv2D(8, 3, activation="relu")(inp)
    a = L.Activation("relu")(L.BatchNormalization()(x))
    b = L.Conv2D(8, 1)(x)  # the BN input also feeds another branch
    y = L.MaxPooling2D(2)(L.Add()([a, b]))
    out = L.Dense(10, activation="softmax")(L.Flatten()(y))
    return K.Model(inp, out)


def _b_head(K, act, layer=None):
    L = K.layers
    tail = [L.Dense(10, activation=act)] + ([layer] if layer is not None else [])
    return _seq(K, (28, 28, 1), L.Flatten(), L.Dense(32, activation="relu"), *tail)


def _b_rescale_cnn(K):
    L = K.layers
    return _seq(K, (28, 28, 1), L.Rescaling(1.0 / 255), L.Conv2D(6, 5, activation="relu"), L.MaxPooling2D(2), *_head(L))


def _b_rescale_offset(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Rescaling(1.0 / 127.5, offset=-1.0),
        L.Conv2D(6, 5, activation="tanh"),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_norm_adapted(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        _adapted_normalization(K, (28, 28, 1)),
        L.Conv2D(6, 5, activation="relu"),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_norm_adapted_flat(K):
    L = K.layers
    return _seq(
        K,
        (784,),
        _adapted_normalization(K, (784,), axis=None),
        L.Dense(32, activation="relu"),
        L.Dense(10, activation="softmax"),
    )


def _b_norm_const(K):
    L = K.layers
    return _seq(
        K,
        (784,),
        L.Normalization(mean=33.32, variance=78.57**2),
        L.Dense(32, activation="relu"),
        L.Dense(10, activation="softmax"),
    )


def _b_resize(K, size, interpolation):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Resizing(size, size, interpolation=interpolation),
        L.Conv2D(6, 5, activation="tanh"),
        L.AveragePooling2D(2),
        *_head(L),
    )


def _b_augment_identity(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.RandomFlip("horizontal"),
        L.RandomRotation(0.1),
        L.RandomZoom(0.1),
        L.RandomTranslation(0.1, 0.1),
        L.Conv2D(6, 5, activation="relu"),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_augment_nested(K):
    L = K.layers
    aug = K.Sequential([L.RandomFlip("horizontal"), L.RandomRotation(0.1)], name="augmentation")
    inp = K.Input(shape=(28, 28, 1))
    x = aug(inp)
    x = L.MaxPooling2D(2)(L.Conv2D(6, 5, activation="relu")(x))
    out = L.Dense(10, activation="softmax")(L.Flatten()(x))
    return K.Model(inp, out)


def _b_dense_4d(K):
    L = K.layers
    return _seq(
        K, (28, 28, 1), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(2), L.Dense(8, activation="relu"), *_head(L)
    )


def _b_nested_cnn(K):
    L = K.layers
    features = K.Sequential(
        [
            K.Input(shape=(28, 28, 1)),
            L.Conv2D(6, 5, activation="relu"),
            L.MaxPooling2D(2),
            L.Conv2D(8, 3, activation="relu"),
            L.MaxPooling2D(2),
        ],
        name="features",
    )
    inp = K.Input(shape=(28, 28, 1))
    x = L.Flatten()(features(inp))
    x = L.Dense(32, activation="relu")(x)
    return K.Model(inp, L.Dense(10, activation="softmax")(x))


def _b_global_pool(K, cls, keepdims):
    L = K.layers
    kw = {"keepdims": True} if keepdims else {}
    tail = [L.Conv2D(10, 1), L.Flatten(), L.Softmax()] if keepdims else [L.Dense(10, activation="softmax")]
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(8, 3, activation="relu"),
        L.Conv2D(16, 3, activation="relu"),
        getattr(L, cls)(**kw),
        *tail,
    )


def _b_leaky_relu(K):
    L = K.layers
    return _seq(
        K, (28, 28, 1), L.Conv2D(4, 3), L.LeakyReLU(), L.MaxPooling2D(2), L.Conv2D(8, 3), L.LeakyReLU(0.1), *_head(L)
    )


def _b_elu_layer(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3),
        L.ELU(),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(32),
        L.ELU(alpha=0.5),
        L.Dense(10, activation="softmax"),
    )


def _b_prelu(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3),
        L.PReLU(),
        L.MaxPooling2D(2),
        L.Conv2D(8, 3),
        L.PReLU(shared_axes=[1, 2]),
        *_head(L),
    )


def _b_relu_variants(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3),
        L.ReLU(max_value=6.0),
        L.MaxPooling2D(2),
        L.Conv2D(8, 3),
        L.ReLU(negative_slope=0.1, threshold=0.5),
        *_head(L),
    )


ACTIVATIONS = (
    "selu",
    "elu",
    "gelu",
    "swish",
    "softplus",
    "softsign",
    "hard_sigmoid",
    "relu6",
    "exponential",
    "tanh",
    "sigmoid",
)


def _b_act(K, act):
    L = K.layers
    return _seq(K, (784,), L.Dense(32), L.Activation(act), L.Dense(10))


def _b_act_inline(K):
    L = K.layers
    return _seq(K, (784,), *[L.Dense(16, activation=a) for a in ACTIVATIONS], L.Dense(10))


# Every activation a Keras file can name, each after a convolution: on the GPU the
# cuDNN-fused conv + bias + ReLU for plain ReLU, the convolution then lenet's bias and
# activation kernel for every other (names this Keras lacks are left out).
CONV_ACTIVATIONS = ("relu", *ACTIVATIONS, "mish", "silu", "hard_silu", "hard_swish", "leaky_relu", "linear")


def _b_act_conv(K):
    L = K.layers
    acts = [a for a in CONV_ACTIVATIONS if hasattr(K.activations, a)]
    return _seq(
        K, (28, 28, 1), *[L.Conv2D(4, 3, padding="same", activation=a) for a in acts], L.MaxPooling2D(4), *_head(L)
    )


def _b_identity_layers(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3, activation="relu"),
        L.SpatialDropout2D(0.2),
        L.GaussianNoise(0.1),
        L.MaxPooling2D(2),
        L.GaussianDropout(0.1),
        L.ActivityRegularization(l1=0.01),
        L.Flatten(),
        L.Dense(32, activation="selu"),
        L.AlphaDropout(0.1),
        L.Dense(10, activation="softmax"),
    )


def _b_cropping(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Cropping2D(2),
        L.Conv2D(4, 3, activation="relu"),
        L.Cropping2D(((1, 2), (3, 0))),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_zero_padding(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.ZeroPadding2D(2),
        L.Conv2D(4, 5, activation="relu"),
        L.ZeroPadding2D(((1, 0), (0, 2))),
        L.MaxPooling2D(2),
        L.ZeroPadding2D((1, 2)),
        *_head(L),
    )


def _b_depthwise(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3),
        L.DepthwiseConv2D(3, activation="relu"),
        L.DepthwiseConv2D(3, depth_multiplier=2, strides=2, padding="same"),
        *_head(L),
    )


def _b_separable(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.SeparableConv2D(8, 3, activation="relu"),
        L.MaxPooling2D(2),
        L.SeparableConv2D(16, 3, depth_multiplier=2, strides=2, padding="same"),
        *_head(L),
    )


def _b_dilated(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3, dilation_rate=2, activation="relu"),
        L.Conv2D(8, 3, dilation_rate=(2, 1), padding="same"),
        L.MaxPooling2D(2),
        *_head(L),
    )


def _b_grouped(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3, activation="relu"),
        L.Conv2D(8, 3, groups=2, activation="relu"),
        L.MaxPooling2D(2),
        L.Conv2D(8, 1, groups=4),
        *_head(L),
    )


def _b_pool_strides(K):
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(4, 3, activation="relu"),  # 26
        L.MaxPooling2D(3, strides=2),  # 12
        L.AveragePooling2D(3, strides=1, padding="same"),  # 12
        L.MaxPooling2D(2, strides=1, padding="same"),  # 12
        L.AveragePooling2D((2, 3), strides=(2, 1)),  # 6x10
        L.MaxPooling2D(3, strides=2, padding="same"),  # 3x5
        *_head(L),
    )


def _b_cf_cnn(K):
    L = K.layers
    cf = "channels_first"
    return _seq(
        K,
        (1, 28, 28),
        L.Conv2D(6, 5, use_bias=False, data_format=cf),
        L.BatchNormalization(axis=1),
        L.Activation("relu"),
        L.MaxPooling2D(2, data_format=cf),
        L.Conv2D(8, 3, padding="same", activation="relu", data_format=cf),
        L.AveragePooling2D(2, data_format=cf),
        L.Flatten(),
        L.Dense(10, activation="softmax"),
    )  # Flatten: config default (CHW rows)


def _b_cf_global(K):
    L = K.layers
    old = _set_data_format(K, "channels_first")
    try:
        return _seq(
            K,
            (1, 28, 28),
            L.Conv2D(6, 5, activation="relu"),
            L.MaxPooling2D(2),
            L.DepthwiseConv2D(3, depth_multiplier=2),
            L.BatchNormalization(axis=1),
            L.Conv2D(8, 3, padding="same", activation="relu"),
            L.ZeroPadding2D(1),
            L.Cropping2D(((1, 0), (0, 1))),
            L.Flatten(),
            L.Dense(10, activation="softmax"),
        )  # Flatten(channels_first): HWC rows
    finally:
        _set_data_format(K, old)


def _b_cf_gap(K):
    L = K.layers
    cf = "channels_first"
    return _seq(
        K,
        (1, 28, 28),
        L.Conv2D(8, 3, activation="relu", data_format=cf),
        L.MaxPooling2D(2, data_format=cf),
        L.Conv2D(16, 3, activation="relu", data_format=cf),
        L.GlobalAveragePooling2D(data_format=cf),
        L.Dense(10, activation="softmax"),
    )


def _b_lenet5_32(K):
    L = K.layers
    return _seq(
        K,
        (32, 32, 1),
        L.Conv2D(6, 5, activation="tanh"),
        L.AveragePooling2D(2),
        L.Conv2D(16, 5, activation="tanh"),
        L.AveragePooling2D(2),
        L.Flatten(),
        L.Dense(120, activation="tanh"),
        L.Dense(84, activation="tanh"),
        L.Dense(10, activation="softmax"),
    )


def _b_lenet5_classic(K):
    """LeNet-5 as users write it for MNIST: 'same' first convolution, tanh, average
    pooling, and a sigmoid head."""
    L = K.layers
    return _seq(
        K,
        (28, 28, 1),
        L.Conv2D(6, 5, padding="same", activation="tanh"),
        L.AveragePooling2D(2),
        L.Conv2D(16, 5, activation="tanh"),
        L.AveragePooling2D(2),
        L.Flatten(),
        L.Dense(120, activation="tanh"),
        L.Dense(84, activation="tanh"),
        L.Dense(10, activation="sigmoid"),
    )


def _b_cnn16(K):
    """A CNN on digits drawn at 16x16 (USPS-sized)."""
    L = K.layers
    return _seq(
        K,
        (16, 16, 1),
        L.Conv2D(8, 3, padding="same", activation="relu"),
        L.MaxPooling2D(2),
        L.Conv2D(16, 3, activation="relu"),
        *_head(L),
    )


def _b_bn_dropout_functional(K):
    """A Functional CNN as tutorials write it: Conv -> BatchNormalization -> relu -> MaxPool ->
    Dropout, twice, then Dense -> Dropout -> Dense."""
    L = K.layers
    inp = K.Input(shape=(28, 28, 1))
    x = inp
    for filters in (8, 16):
        x = L.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = L.Activation("relu")(L.BatchNormalization()(x))
        x = L.Dropout(0.25)(L.MaxPooling2D(2)(x))
    x = L.Dropout(0.5)(L.Dense(32, activation="relu")(L.Flatten()(x)))
    return K.Model(inp, L.Dense(10, activation="softmax")(x))


def _b_residual(K):
    L = K.layers
    inp = K.Input(shape=(28, 28, 1))
    x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
    y = L.Conv2D(8, 3, padding="same", activation="relu")(x)
    y = L.Conv2D(8, 3, padding="same")(y)
    x = L.Activation("relu")(L.Add()([x, y]))
    x = L.MaxPooling2D(2)(x)
    return K.Model(inp, L.Dense(10, activation="softmax")(L.Flatten()(x)))


def _b_concat_branches(K):
    L = K.layers
    inp = K.Input(shape=(28, 28, 1))
    a = L.Conv2D(4, 3, padding="same", activation="relu")(inp)
    b = L.Conv2D(4, 5, padding="same", activation="relu")(inp)
    x = L.MaxPooling2D(2)(L.Concatenate(axis=-1)([a, b]))
    return K.Model(inp, L.Dense(10, activation="softmax")(L.Flatten()(x)))


def _b_merge(K, cls):
    L = K.layers
    inp = K.Input(shape=(28, 28, 1))
    a = L.Conv2D(4, 3, activation="relu")(inp)
    b = L.Conv2D(4, 3, activation="tanh")(inp)
    x = L.MaxPooling2D(2)(getattr(L, cls)()([a, b]))
    return K.Model(inp, L.Dense(10, activation="softmax")(L.Flatten()(x)))


def _b_concat_dense(K):
    L = K.layers
    inp = K.Input(shape=(784,))
    a = L.Dense(32, activation="relu")(inp)
    b = L.Dense(16, activation="tanh")(inp)
    x = L.Concatenate()([a, b])
    return K.Model(inp, L.Dense(10, activation="softmax")(x))


@dataclass(frozen=True)
class _Case:
    name: str
    desc: str
    build: Callable  # (K) -> model
    k2: bool = True  # also built with tf_keras
    forms3: tuple = ("h5",)  # Keras 3 forms ("h5", "keras", "weights.h5")
    forms2: tuple = ("h5",)  # tf_keras forms ("h5", "weights_h5", "keras", "keras_windows")
    gain: float = 1.0  # multiplies the first kernel
    notes: str = ""
    post: Optional[Callable] = None  # (model, key): after the weights are set


def _p(f, *a, **kw):
    return lambda K: f(K, *a, **kw)


_ALL3 = ("h5", "keras", "weights.h5")
_SPECS: list[_Case] = [
    # 1. MLPs on flat input
    _Case(
        "mlp784",
        "Input(784) -> Dense(relu) x2 -> Dense(10, softmax)",
        _b_mlp784,
        forms3=_ALL3,
        forms2=("h5", "weights_h5", "keras"),
    ),
    _Case(
        "mlp784_dropout",
        "the same with Dropout(0.2)/(0.5) between the Dense layers",
        _p(_b_mlp784, dropout=True),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "mlp2d",
        "Input((28, 28)) -> Flatten -> Dense(relu) -> Dense(10, softmax)",
        _b_mlp2d,
        forms3=("h5", "keras"),
        forms2=("h5", "keras"),
    ),
    _Case(
        "mlp784_logits",
        "Input(784) MLP ending in Dense(10) logits (linear)",
        _p(_b_mlp784, logits=True),
        forms3=("h5", "weights.h5"),
        forms2=("h5", "weights_h5"),
    ),
    # 2. Reshape
    _Case(
        "reshape_cnn",
        "Input(784) -> Reshape((28, 28, 1)) -> Conv/MaxPool x2 -> Dense",
        _b_reshape_cnn,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "dense_reshape_conv",
        "Input(784) -> Dense(392) -> Reshape((7, 7, 8)) -> Conv2D(same) -> Dense",
        _b_dense_reshape_conv,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "keras"),
    ),
    _Case(
        "reshape2d_cnn",
        "Input((28, 28)) -> Reshape((28, 28, 1)) -> Conv -> MaxPool -> Dense",
        _b_reshape2d_cnn,
        forms2=("h5", "weights_h5"),
    ),
    # 3. BatchNormalization
    _Case(
        "bn_cnn",
        "Conv(use_bias=False)/Conv(bias) -> BN -> Activation('relu') -> MaxPool stacks",
        _b_bn_cnn,
        forms3=_ALL3,
        forms2=("h5", "weights_h5", "keras", "keras_windows"),
    ),
    _Case(
        "bn_mlp",
        "Input(784) -> Dense -> BN -> Activation (twice, second Dense without bias)",
        _b_bn_mlp,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "bn_trained",
        "Conv(relu) -> BN (epsilon 1e-5) twice, Conv -> BN -> relu, Dense(relu) -> BN, with "
        "trained-like statistics: |mean| / std in the hundreds",
        _b_bn_trained,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
        post=_trained_bn_statistics,
    ),
    _Case("bn_input", "BatchNormalization directly after the Input, then Conv", _b_bn_input),
    _Case(
        "bn_center_scale",
        "BN(center=False), BN(scale=False), BN(center=False, scale=False, epsilon=1e-5)",
        _b_bn_center_scale,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "bn_after_pool",
        "BN after MaxPool (epsilon=0.01, momentum=0.9) and after AvgPool (epsilon=0.1)",
        _b_bn_after_pool,
        forms2=("h5", "keras"),
    ),
    _Case(
        "bn_branch",
        "functional: the BN input also feeds a 1x1 Conv branch, Add",
        _b_bn_branch,
        forms3=("h5", "keras"),
        forms2=("h5", "keras_windows"),
    ),
    _Case(
        "ln_mlp",
        "Input(784) -> Dense -> LayerNormalization -> relu (twice, center=False, gelu) -> Dense",
        _b_ln_mlp,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "ln_cnn",
        "Conv -> LayerNormalization (channel axis) -> relu -> MaxPool -> Dense",
        _b_ln_cnn,
        forms3=("h5", "keras"),
    ),
    _Case(
        "conv1d_rows",
        "Reshape((28, 28)) -> Conv1D -> MaxPooling1D -> Conv1D(same, strides 2) -> BN -> "
        "GlobalAveragePooling1D -> Dense",
        _b_conv1d_rows,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    # 4. Output heads
    _Case("head_sigmoid", "final Dense(10, sigmoid)", _p(_b_head, "sigmoid")),
    _Case("head_relu", "final Dense(10, relu)", _p(_b_head, "relu"), forms3=("h5", "weights.h5")),
    _Case(
        "head_log_softmax",
        "final Dense(10, log_softmax): Keras 3's activation (tf_keras has none)",
        _p(_b_head, "log_softmax"),
        k2=False,
        forms3=("h5", "keras"),
    ),
    _Case(
        "head_activation_softmax",
        "final Dense(10) -> Activation('softmax')",
        lambda K: _b_head(K, None, K.layers.Activation("softmax")),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "head_softmax_layer",
        "final Dense(10) -> Softmax() layer",
        lambda K: _b_head(K, None, K.layers.Softmax()),
        forms3=("h5", "keras"),
    ),
    # 5. Preprocessing inside the model
    _Case(
        "rescale_cnn",
        "Rescaling(1/255) first (raw 0..255 input) -> Conv",
        _b_rescale_cnn,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case("rescale_offset", "Rescaling(1/127.5, offset=-1) first -> Conv(tanh)", _b_rescale_offset),
    _Case(
        "norm_adapted",
        "Normalization() adapted on MNIST training digits (per channel) first -> Conv",
        _b_norm_adapted,
        forms3=_ALL3,
        forms2=("h5", "keras"),
    ),
    _Case(
        "norm_adapted_flat",
        "Input(784) -> Normalization(axis=None) adapted (one scalar mean/variance)",
        _b_norm_adapted_flat,
        forms3=("h5", "weights.h5"),
    ),
    _Case(
        "norm_const",
        "Input(784) -> Normalization(mean=33.32, variance=78.57**2) from the constructor",
        _b_norm_const,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "resize_bilinear",
        "Resizing(32, 32) bilinear (28 -> 32) -> LeNet-5 conv",
        _p(_b_resize, 32, "bilinear"),
        forms3=("h5", "keras"),
    ),
    _Case("resize_nearest", "Resizing(32, 32, 'nearest') -> conv", _p(_b_resize, 32, "nearest")),
    _Case(
        "resize_down",
        "Resizing(14, 14) bilinear (28 -> 14, no antialias) -> conv",
        _p(_b_resize, 14, "bilinear"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "augment_identity",
        "RandomFlip/RandomRotation/RandomZoom/RandomTranslation (identities at inference)",
        _b_augment_identity,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "augment_nested",
        "functional; augmentation = nested Sequential([RandomFlip, RandomRotation]) on the input",
        _b_augment_nested,
        forms3=_ALL3,
        forms2=("h5", "keras"),
    ),
    _Case(
        "dense_4d",
        "Conv2D -> MaxPool -> Dense(8) on the 4-D tensor -> Flatten -> Dense(10)",
        _b_dense_4d,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "nested_cnn",
        "functional model calling a nested Sequential 'features' (Conv/MaxPool, with weights)",
        _b_nested_cnn,
        forms3=_ALL3,
        forms2=("h5", "weights_h5", "keras", "keras_windows"),
    ),
    # 6. Other layers
    _Case(
        "gap",
        "Conv -> Conv -> GlobalAveragePooling2D -> Dense",
        _p(_b_global_pool, "GlobalAveragePooling2D", False),
        forms3=("h5", "keras"),
    ),
    _Case(
        "gmp",
        "Conv -> Conv -> GlobalMaxPooling2D -> Dense",
        _p(_b_global_pool, "GlobalMaxPooling2D", False),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "gap_keepdims",
        "GlobalAveragePooling2D(keepdims=True) -> Conv2D 1x1 -> Flatten -> Softmax",
        _p(_b_global_pool, "GlobalAveragePooling2D", True),
    ),
    _Case(
        "gmp_keepdims",
        "GlobalMaxPooling2D(keepdims=True) -> Conv2D 1x1 -> Flatten -> Softmax",
        _p(_b_global_pool, "GlobalMaxPooling2D", True),
        forms3=("h5", "weights.h5"),
    ),
    _Case(
        "leaky_relu",
        "LeakyReLU() (0.3) and LeakyReLU(0.1) (K3 negative_slope, K2 alpha)",
        _b_leaky_relu,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case("elu_layer", "ELU() layer after Conv and ELU(alpha=0.5) after Dense", _b_elu_layer),
    _Case(
        "prelu",
        "PReLU() (alpha per element, (26, 26, 4)) and PReLU(shared_axes=[1, 2]) (alpha (1, 1, 8))",
        _b_prelu,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "relu_variants",
        "ReLU(max_value=6), ReLU(negative_slope=0.1, threshold=0.5); first kernel x8",
        _b_relu_variants,
        gain=8.0,
        forms2=("h5", "keras"),
    ),
    *[
        _Case(
            f"act_{a}",
            f"Dense(32) -> Activation('{a}') -> Dense(10) logits"
            + {"exponential": "", "relu6": "; first kernel x8"}.get(a, "; first kernel x4"),
            _p(_b_act, a),
            gain={"exponential": 1.0, "relu6": 8.0}.get(a, 4.0),
            forms3={"gelu": ("h5", "keras"), "swish": ("h5", "weights.h5")}.get(a, ("h5",)),
            forms2={"hard_sigmoid": ("h5", "weights_h5", "keras"), "selu": ("h5", "weights_h5")}.get(a, ("h5",)),
            notes=("hard_sigmoid: tf_keras clip(0.2x + 0.5), Keras 3 clip(x/6 + 0.5)" if a == "hard_sigmoid" else ""),
        )
        for a in ACTIVATIONS
    ],
    _Case(
        "act_inline",
        "Dense(16, activation=a) for every a of ACTIVATIONS in a chain -> Dense(10) logits",
        _b_act_inline,
        gain=2.0,
        forms3=("h5", "keras"),
    ),
    _Case(
        "act_conv",
        "Conv2D(4, 3, same, activation=a) for every a of CONV_ACTIVATIONS in a chain -> MaxPool -> Dense(10, softmax)",
        _b_act_conv,
        forms3=("h5", "keras"),
    ),
    _Case(
        "identity_layers",
        "SpatialDropout2D, GaussianNoise, GaussianDropout, ActivityRegularization, "
        "AlphaDropout (identities at inference)",
        _b_identity_layers,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case("cropping", "Cropping2D(2) and Cropping2D(((1, 2), (3, 0)))", _b_cropping),
    _Case("zero_padding", "ZeroPadding2D(2), ((1, 0), (0, 2)), (1, 2)", _b_zero_padding, forms3=("h5", "weights.h5")),
    _Case(
        "depthwise",
        "DepthwiseConv2D(3) (multiplier 1) and (multiplier 2, strides 2, same)",
        _b_depthwise,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "separable",
        "SeparableConv2D(8, 3) and (16, 3, depth_multiplier=2, strides 2, same)",
        _b_separable,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "keras"),
    ),
    _Case("dilated", "Conv2D dilation_rate=2 (valid) and (2, 1) (same)", _b_dilated),
    _Case("grouped", "Conv2D groups=2 and groups=4 (1x1)", _b_grouped, forms3=("h5", "keras")),
    _Case(
        "pool_strides",
        "Max/AveragePooling2D with strides != pool_size, 'same' and valid, non-square",
        _b_pool_strides,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "cf_cnn",
        "channels_first (1, 28, 28): Conv, BN(axis=1), pools; Flatten default (CHW rows)",
        _b_cf_cnn,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "cf_global",
        "built under image_data_format='channels_first': Conv, MaxPool, DepthwiseConv2D(x2), "
        "BN(axis=1), ZeroPadding2D, Cropping2D, Flatten(channels_first) (HWC rows)",
        _b_cf_global,
    ),
    _Case(
        "cf_gap",
        "channels_first Conv -> GlobalAveragePooling2D(channels_first) -> Dense",
        _b_cf_gap,
        forms3=("h5", "weights.h5"),
    ),
    _Case(
        "lenet5_32", "LeNet-5 on a (32, 32, 1) input (random inputs only)", _b_lenet5_32, forms2=("h5", "weights_h5")
    ),
    _Case(
        "lenet5_classic",
        "classic LeNet-5: Conv(6, 5, same, tanh) -> AveragePooling -> Conv(16, 5, tanh) -> "
        "AveragePooling -> Dense(120, tanh) -> Dense(84, tanh) -> Dense(10, sigmoid)",
        _b_lenet5_classic,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
    _Case(
        "cnn16",
        "CNN on 16x16 digits: Conv(same, relu) -> MaxPool -> Conv(relu) -> Dense (random inputs only)",
        _b_cnn16,
        k2=False,
        forms3=("keras",),
    ),
    # 7. Functional
    _Case(
        "bn_dropout_functional",
        "Functional CNN: (Conv -> BN -> relu -> MaxPool -> Dropout) x2 -> Dense(relu) -> Dropout -> Dense",
        _b_bn_dropout_functional,
        k2=False,
        forms3=("keras",),
    ),
    _Case(
        "residual",
        "residual block: Conv -> Conv -> Conv, Add with the skip, Activation",
        _b_residual,
        forms3=_ALL3,
        forms2=("h5", "weights_h5", "keras_windows"),
    ),
    _Case(
        "concat_branches",
        "3x3 and 5x5 Conv branches -> Concatenate(axis=-1)",
        _b_concat_branches,
        forms3=("h5", "weights.h5"),
        forms2=("h5", "keras"),
    ),
    *[
        _Case(
            f"merge_{op.lower()}",
            f"two Conv branches (relu, tanh) -> {op}() -> MaxPool -> Dense",
            _p(_b_merge, op),
            forms3={"Subtract": ("h5", "keras")}.get(op, ("h5",)),
            forms2={"Multiply": ("h5", "weights_h5")}.get(op, ("h5",)),
        )
        for op in ("Average", "Multiply", "Subtract", "Maximum", "Minimum")
    ],
    _Case(
        "concat_dense",
        "Input(784) -> Dense(relu) and Dense(tanh) branches -> Concatenate -> Dense",
        _b_concat_dense,
        forms3=("h5", "keras"),
        forms2=("h5", "weights_h5"),
    ),
]

CASES: dict[str, str] = {c.name: c.desc for c in _SPECS}
_SPEC = {c.name: c for c in _SPECS}
assert len(CASES) == len(_SPECS), "duplicate case names"

_FORM_TAG = {
    "h5": "h5",
    "keras": "keras",
    "weights.h5": "weights.h5",
    "weights_h5": "weights",
    "keras_windows": "keras_windows",
}
_FW_ERR_BN = "BatchNormalization 'axis': [3] (a list) in config.json: int() of a list"
_FW_ERR_FUNCTIONAL = "config.json class_name 'Functional' (module tf_keras.src.engine.functional) unknown to Keras 3"
_FW_ERR_HARD_SIGMOID = "hard_sigmoid: Keras 3 computes clip(x/6 + 0.5), the file was made with clip(0.2x + 0.5)"
_FW_ERR_NORM_AXIS_NONE = (
    "Normalization(axis=None): the file holds mean/variance of shape (), the rebuilt layer wants (784,)"
)

# What keras 3.15.1 load_model does with files it does not reproduce (observed; verify() checks
# that it still does). Every other file reloads with Keras within 1e-6 (tf_keras weights-only
# files: rebuilt with tf_keras, whose JSON Keras 3 model_from_json refuses).
KERAS3_REFUSES: dict[str, str] = {
    "k3_norm_adapted_flat.h5": _FW_ERR_NORM_AXIS_NONE,  # Keras 3 cannot reload its own .h5
    "k2_norm_adapted_flat.h5": _FW_ERR_NORM_AXIS_NONE,
    "k2_bn_cnn.keras": _FW_ERR_BN,
    "k2_bn_after_pool.keras": _FW_ERR_BN,
    "k2_norm_adapted.keras": "Normalization config carries 'batch_input_shape' (unknown keyword)",
    "k2_separable.h5": "SeparableConv2D keys 'groups', 'kernel_initializer/regularizer/constraint' unknown",
    "k2_separable.keras": "SeparableConv2D keys 'groups', 'kernel_initializer/regularizer/constraint' unknown",
    "k2_concat_branches.keras": _FW_ERR_FUNCTIONAL,
    "k2_augment_nested.keras": _FW_ERR_FUNCTIONAL,
    "k2_nested_cnn.keras": _FW_ERR_FUNCTIONAL,
    "k2_augment_identity.h5": "RandomFlip key 'rng_type' unknown",
    "k2_augment_nested.h5": "RandomFlip key 'rng_type' unknown",
    "k2_identity_layers.h5": "SpatialDropout2D.__init__ rejects 'trainable'",
    "k2_depthwise.h5": "DepthwiseConv2D key 'groups' unknown",
    "k2_cf_global.h5": "DepthwiseConv2D key 'groups' unknown",
    "k2_nested_cnn.h5": "inbound node ['features', 1, 0] (node index 1 of the nested Sequential): 'graph has "
    "loops or disconnected nodes'",
    # layer walker (Keras 3 files)
    "layer_Lambda.h5": "Lambda holding a Python lambda: refused unless safe_mode=False",
    "layer_Attention.h5": "the legacy .h5 loader turns score_mode 'dot' into the function keras.ops.dot",
    "layer_Masking.h5": "model_config holds the mask ops as layers 'NotEqual' and 'Any': 'Unknown layer'",
    "layer_RandomShear.h5": "its own x_factor [-0.1, 0.1] is refused by the constructor",
}
KERAS3_DIFFERS: dict[str, str] = {
    "k2_act_hard_sigmoid.h5": _FW_ERR_HARD_SIGMOID,
    "k2_act_hard_sigmoid.keras": _FW_ERR_HARD_SIGMOID,
    "k2_act_inline.h5": _FW_ERR_HARD_SIGMOID,
    "k2_act_conv.h5": _FW_ERR_HARD_SIGMOID,
}


def _notes(name: str, framework: str, form: str, extra: str = "") -> str:
    notes = [extra] if extra else []
    if form == "keras_windows":
        notes.append(
            "Windows layout (root groups 'layers\\<key>/vars'): Keras 3 and tf_keras on Linux refuse "
            "it; expected = the original model"
        )
    elif name in KERAS3_REFUSES:
        notes.append("Keras 3 refuses it: " + KERAS3_REFUSES[name])
    elif name in KERAS3_DIFFERS:
        notes.append("Keras 3 loads it but differs: " + KERAS3_DIFFERS[name])
    elif framework == "keras2" and form == "weights_h5":
        notes.append("tf_keras JSON: rebuild with tf_keras (Keras 3 model_from_json refuses Keras 2 JSON)")
    elif framework == "keras2":
        notes.append("tf_keras file; Keras 3 load_model reproduces it")
    return "; ".join(notes)


def build_zoo(
    directory: Path,
    only: Optional[set[str]] = None,
    frameworks: Optional[set[str]] = None,
    forms: Optional[set[str]] = None,
) -> Zoo:
    """Write the zoo into directory; Zoo {name: ZooModel}. Cases whose framework (keras,
    tf_keras) cannot be imported are left out, with the reason in not_built; only = a set of
    case names; frameworks = {"keras3"} and/or {"keras2"} (default: both); forms = the file
    forms to write, of those each case has (default: all)."""
    with _Silence():
        return _build_zoo(Path(directory), only, frameworks, forms)


def _build_zoo(
    directory: Path, only: Optional[set[str]], frameworks: Optional[set[str]] = None, forms_: Optional[set[str]] = None
) -> Zoo:
    directory.mkdir(parents=True, exist_ok=True)
    if only is not None:
        unknown = set(only) - set(CASES)
        assert not unknown, f"unknown cases: {sorted(unknown)}"
    fw, fw_missing = _frameworks()
    out = Zoo()
    for spec in _SPECS:
        if only is not None and spec.name not in only:
            continue
        for tag, prefix, forms in (("keras3", "k3", spec.forms3), ("keras2", "k2", spec.forms2)):
            if (tag == "keras2" and not spec.k2) or (frameworks is not None and tag not in frameworks):
                continue
            if tag not in fw:
                out.not_built[f"{prefix}_{spec.name}"] = fw_missing[tag]
                continue
            K = fw[tag]
            t0 = time.perf_counter()
            _clear(K)
            model = spec.build(K)
            _set_weights(model, spec.name, spec.gain)
            if spec.post is not None:
                spec.post(model, spec.name)
            shape = _input_shape(model)
            x, mnist = make_x(spec.name, shape, takes_raw_pixels(model))
            expected = keras_predict(model, x)
            setup = time.perf_counter() - t0
            for form in forms:
                if forms_ is not None and form not in forms_:
                    continue
                t1 = time.perf_counter()
                path, arch = _save(model, tag, form, directory, f"{prefix}_{spec.name}")
                name = f"{prefix}_{spec.name}.{_FORM_TAG[form]}"
                notes = _notes(name, tag, form, spec.notes)
                out[name] = ZooModel(name, spec.name, tag, form, path, arch, shape, x, expected, mnist, notes)
                BUILD_SECONDS[name] = time.perf_counter() - t1 + setup
                setup = 0.0
    return out


_cache: dict = {}


def _tempdir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="lenet-keras-zoo-"))
    atexit.register(shutil.rmtree, d, True)
    return d


def get_zoo(only: Optional[Iterable[str]] = None) -> Zoo:
    """The whole zoo, built once per process into a temporary directory removed at exit; or
    only the cases named (a test module that needs a few need not build 250 models: under
    pytest-xdist each worker process builds what its modules ask for), from the whole zoo
    where this process has built it."""
    if "zoo" in _cache:
        return _cache["zoo"]
    if only is None:
        _cache["zoo"] = build_zoo(_tempdir())
        return _cache["zoo"]
    key = ("cases", frozenset(only))
    if key not in _cache:
        _cache[key] = build_zoo(_tempdir(), set(only))
    return _cache[key]


def get_layer_zoo() -> Zoo:
    """build_layer_zoo into a temporary directory, once per process."""
    if "layers" not in _cache:
        _cache["layers"] = build_layer_zoo(_tempdir())
    return _cache["layers"]


# ------------------------------------------------------------------ layer-class walker
# LAYER_CLASSES: [(class name, builder)], one per public class of keras.layers (Keras 3), the
# builder taking the keras module and returning a small model that puts the class where an
# MNIST model would (1-D and recurrent layers after Reshape((28, 28)): rows as time steps;
# 3-D layers after Reshape((28, 28, 1, 1)); colour augmentations after Concatenate([x, x, x])
# (grey -> RGB); integer layers after Discretization). LAYER_ALIASES: alias -> class name
# (the same Python class: its model is shared). LAYER_SKIPPED: class -> why no MNIST model can
# hold it. layer_coverage() lists public classes in none of the three (a newer Keras).


def _img(K):
    return K.Input(shape=(28, 28, 1))


def _fn(K, body):
    """A functional model: body(L, inp) -> output tensor."""
    inp = _img(K)
    return K.Model(inp, body(K.layers, inp))


def _conv_head(L, x, filters=4):
    x = L.Conv2D(filters, 3, activation="relu")(x)
    return L.Dense(10, activation="softmax")(L.Flatten()(L.MaxPooling2D(2)(x)))


def _first(layer_fn):
    """The layer first on the image, then Conv -> MaxPool -> Dense."""
    return lambda K: _fn(K, lambda L, x: _conv_head(L, layer_fn(L)(x)))


def _rgb(layer_fn):
    """Grey -> RGB by Concatenate([x, x, x]), then the (colour) layer, then Conv head."""
    return lambda K: _fn(K, lambda L, x: _conv_head(L, layer_fn(L)(L.Concatenate()([x, x, x]))))


def _after_conv(layer_fn, filters=4):
    """Conv(relu) -> layer -> Flatten -> Dense."""

    def b(K):
        def body(L, x):
            x = layer_fn(L)(L.Conv2D(filters, 3, activation="relu")(x))
            return L.Dense(10, activation="softmax")(L.Flatten()(x))

        return _fn(K, body)

    return b


def _rows(layer_fn, flatten=True):
    """Reshape((28, 28)) (rows as a sequence) -> layer -> (Flatten) -> Dense."""

    def b(K):
        def body(L, x):
            y = layer_fn(L)(L.Reshape((28, 28))(x))
            if flatten:
                y = L.Flatten()(y)
            return L.Dense(10, activation="softmax")(y)

        return _fn(K, body)

    return b


def _rows_conv1d(layer_fn):
    """Reshape((28, 28)) -> Conv1D(8, 3) -> layer -> Flatten -> Dense."""
    return _rows(lambda L: lambda t: layer_fn(L)(L.Conv1D(8, 3, activation="relu")(t)))


def _vol(layer_fn, conv=True, depth=1):
    """Reshape((28, 28 / depth, depth, 1)) (a volume: depth 1, or 2 = pairs of neighbouring
    columns) -> [Conv3D(4, (3, 3, 1))] -> layer -> Flatten -> Dense."""

    def b(K):
        def body(L, x):
            y = L.Reshape((28, 28 // depth, depth, 1))(x)
            if conv:
                y = L.Conv3D(4, (3, 3, 1), activation="relu")(y)
            return L.Dense(10, activation="softmax")(L.Flatten()(layer_fn(L)(y)))

        return _fn(K, body)

    return b


def _flat(layer_fn, units=32):
    """Flatten -> Dense(units) -> layer -> Dense(10)."""

    def b(K):
        def body(L, x):
            y = layer_fn(L)(L.Dense(units)(L.Flatten()(x)))
            return L.Dense(10, activation="softmax")(y)

        return _fn(K, body)

    return b


def _merge(cls):
    def b(K):
        def body(L, x):
            a = L.Conv2D(4, 3, activation="relu")(x)
            c = L.Conv2D(4, 3, activation="tanh")(x)
            return _conv_head(L, getattr(L, cls)()([a, c]))

        return _fn(K, body)

    return b


def _attention(cls, **kw):
    def b(K):
        def body(L, x):
            s = L.Reshape((28, 28))(x)
            q, v = L.Dense(16)(s), L.Dense(16)(s)
            y = (
                getattr(L, cls)(**kw)([q, v])
                if cls in ("Attention", "AdditiveAttention", "Dot")
                else getattr(L, cls)(**kw)(q, v)
            )
            return L.Dense(10, activation="softmax")(L.Flatten()(y))

        return _fn(K, body)

    return b


def _rnn(make):
    return _rows(lambda L: make(L), flatten=False)


_BINS = [0.25, 0.5, 0.75]


def _discretized(tail):
    """Reshape((28, 28)) -> Discretization(0.25, 0.5, 0.75) (pixel levels 0..3) -> tail."""

    def b(K):
        def body(L, x):
            d = L.Discretization(bin_boundaries=_BINS)(L.Reshape((28, 28))(x))
            return L.Dense(10, activation="softmax")(L.Flatten()(tail(L)(d)))

        return _fn(K, body)

    return b


def _scalar_codes(tail):
    """Flatten -> Dense(1) -> Discretization([-0.5, 0, 0.5]) (a 4-level code) -> tail -> Dense."""

    def b(K):
        def body(L, x):
            d = L.Discretization(bin_boundaries=[-0.5, 0.0, 0.5])(L.Dense(1)(L.Flatten()(x)))
            return L.Dense(10, activation="softmax")(tail(L)(d))

        return _fn(K, body)

    return b


def _w_hashed_crossing(K):
    def body(L, x):
        f = L.Flatten()(x)
        a = L.Discretization(bin_boundaries=[0.0])(L.Dense(1)(f))
        b = L.Discretization(bin_boundaries=[0.0])(L.Dense(1)(f))
        return L.Dense(10, activation="softmax")(L.HashedCrossing(num_bins=4, output_mode="one_hot")((a, b)))

    return _fn(K, body)


def _w_category_encoding(K):
    def body(L, x):
        d = L.Discretization(bin_boundaries=_BINS)(L.Flatten()(x))  # per-pixel level 0..3
        h = L.CategoryEncoding(num_tokens=4, output_mode="count")(d)  # histogram of levels
        return L.Dense(10, activation="softmax")(L.Rescaling(1.0 / 196)(h))  # counts to about unit size

    return _fn(K, body)


def _w_input_layer(K):
    L = K.layers
    return K.Sequential(
        [
            L.InputLayer(shape=(28, 28, 1)),
            L.Conv2D(4, 3, activation="relu"),
            L.MaxPooling2D(2),
            L.Flatten(),
            L.Dense(10, activation="softmax"),
        ]
    )


def _w_masking(K):
    # MNIST has all-zero rows: Masking(0) makes the LSTM skip them.
    return _rows(lambda L: lambda t: L.LSTM(16)(L.Masking(0.0)(t)), flatten=False)(K)


def _w_repeat_vector(K):
    def body(L, x):
        y = L.RepeatVector(4)(L.Dense(16, activation="relu")(L.Flatten()(x)))
        y = L.SimpleRNN(8)(y)
        return L.Dense(10, activation="softmax")(y)

    return _fn(K, body)


def _w_lambda(K):
    return _after_conv(lambda L: L.Lambda(lambda t: t * 2.0 - 1.0))(K)


def _w_spectrogram(make, scale):
    """The flattened digit as a 784-sample signal -> spectrogram -> Rescaling(scale) (dB to about
    unit size, else the softmax saturates and hides errors) -> Flatten -> Dense."""

    def b(K):
        def body(L, x):
            s = make(L)(L.Reshape((784,) if make is _mel else (784, 1))(x))
            return L.Dense(10, activation="softmax")(L.Flatten()(L.Rescaling(scale)(s)))

        return _fn(K, body)

    return b


def _mel(L):
    return L.MelSpectrogram(
        fft_length=64,
        sequence_stride=32,
        sequence_length=64,
        num_mel_bins=16,
        sampling_rate=8000,
        min_freq=20.0,
        max_freq=4000.0,
    )


def _stft(L):
    return L.STFTSpectrogram(mode="log", frame_length=64, frame_step=32, fft_length=64)


def _w_random_crop(K):
    def body(L, x):
        y = L.Conv2D(8, 3, activation="relu")(L.RandomCrop(24, 24)(x))
        return L.Dense(10, activation="softmax")(L.GlobalAveragePooling2D()(y))

    return _fn(K, body)


def _w_pipeline(K):
    return _first(lambda L: L.Pipeline([L.RandomFlip("horizontal"), L.CenterCrop(24, 24)]))(K)


def _w_time_distributed(K):
    return _rows(lambda L: L.TimeDistributed(L.Dense(8, activation="relu")))(K)


def _w_embedding(cls):
    return _discretized(lambda L: getattr(L, cls)(4, 2))


def _w_normalization(K):
    return _first(lambda L: L.Normalization(mean=33.32, variance=78.57**2))(K)


def _w_rescaling(K):
    return _first(lambda L: L.Rescaling(1.0 / 255))(K)


def _w_conv_lstm(cls, shape, kernel):
    def b(K):
        def body(L, x):
            y = getattr(L, cls)(2, kernel)(L.Reshape(shape)(x))
            return L.Dense(10, activation="softmax")(L.Flatten()(y))

        return _fn(K, body)

    return b


def _w_transpose(cls):
    if cls == "Conv1DTranspose":
        return _rows(lambda L: lambda t: L.Conv1DTranspose(4, 3, strides=2)(L.Conv1D(8, 3, strides=2)(t)))
    if cls == "Conv2DTranspose":
        return _after_conv(lambda L: L.Conv2DTranspose(4, 3, strides=2, padding="same"))
    return _vol(lambda L: L.Conv3DTranspose(2, (3, 3, 1), strides=(2, 2, 1)))


LAYER_CLASSES: list[tuple[str, Callable]] = [
    ("Activation", _after_conv(lambda L: L.Activation("tanh"))),
    ("ActivityRegularization", _after_conv(lambda L: L.ActivityRegularization(l1=1e-3))),
    ("AdaptiveAveragePooling1D", _rows_conv1d(lambda L: L.AdaptiveAveragePooling1D(7))),
    ("AdaptiveAveragePooling2D", _after_conv(lambda L: L.AdaptiveAveragePooling2D((5, 5)))),
    # Depth 2: AdaptiveMaxPooling3D with an output size of 1 along any axis kills the process with
    # SIGFPE in keras 3.15.1 / TF 2.21 (checked: (26, 26, 2, 4) -> (5, 5, 1)).
    ("AdaptiveAveragePooling3D", _vol(lambda L: L.AdaptiveAveragePooling3D((5, 5, 2)), depth=2)),
    ("AdaptiveMaxPooling1D", _rows_conv1d(lambda L: L.AdaptiveMaxPooling1D(7))),
    ("AdaptiveMaxPooling2D", _after_conv(lambda L: L.AdaptiveMaxPooling2D((5, 5)))),
    ("AdaptiveMaxPooling3D", _vol(lambda L: L.AdaptiveMaxPooling3D((5, 5, 2)), depth=2)),
    ("Add", _merge("Add")),
    ("AdditiveAttention", _attention("AdditiveAttention")),
    ("AlphaDropout", _flat(lambda L: lambda t: L.AlphaDropout(0.1)(L.Activation("selu")(t)))),
    ("Attention", _attention("Attention")),
    ("AugMix", _rgb(lambda L: L.AugMix(value_range=(0, 1)))),
    ("AutoContrast", _first(lambda L: L.AutoContrast(value_range=(0, 1)))),
    ("Average", _merge("Average")),
    ("AveragePooling1D", _rows_conv1d(lambda L: L.AveragePooling1D(2))),
    ("AveragePooling2D", _after_conv(lambda L: L.AveragePooling2D(2))),
    ("AveragePooling3D", _vol(lambda L: L.AveragePooling3D((2, 2, 1)))),
    ("BatchNormalization", _after_conv(lambda L: L.BatchNormalization())),
    ("Bidirectional", _rnn(lambda L: L.Bidirectional(L.LSTM(8)))),
    ("CategoryEncoding", _w_category_encoding),
    ("CenterCrop", _first(lambda L: L.CenterCrop(24, 24))),
    ("Concatenate", _merge("Concatenate")),
    (
        "ContrastLimitedAdaptiveHistogramEqualization",
        _first(lambda L: L.ContrastLimitedAdaptiveHistogramEqualization(value_range=(0, 1), tile_grid_size=(4, 4))),
    ),
    ("Conv1D", _rows(lambda L: L.Conv1D(8, 3, activation="relu"))),
    ("Conv1DTranspose", _w_transpose("Conv1DTranspose")),
    ("Conv2D", _after_conv(lambda L: L.Conv2D(8, 3, strides=2))),
    ("Conv2DTranspose", _w_transpose("Conv2DTranspose")),
    ("Conv3D", _vol(lambda L: L.Conv3D(4, (3, 3, 1)), conv=False)),
    ("Conv3DTranspose", _w_transpose("Conv3DTranspose")),
    ("ConvLSTM1D", _w_conv_lstm("ConvLSTM1D", (28, 28, 1), 3)),  # time = rows, 28x1 frames
    ("ConvLSTM2D", _w_conv_lstm("ConvLSTM2D", (7, 4, 28, 1), 3)),  # 7 frames of 4x28
    ("ConvLSTM3D", _w_conv_lstm("ConvLSTM3D", (7, 4, 28, 1, 1), (3, 3, 1))),
    ("Cropping1D", _rows_conv1d(lambda L: L.Cropping1D((2, 3)))),
    ("Cropping2D", _first(lambda L: L.Cropping2D(((1, 2), (3, 0))))),
    ("Cropping3D", _vol(lambda L: L.Cropping3D(((1, 2), (3, 0), (0, 0))))),
    ("CutMix", _first(lambda L: L.CutMix())),
    ("Dense", _flat(lambda L: L.Activation("relu"))),
    ("DepthwiseConv1D", _rows(lambda L: L.DepthwiseConv1D(3, depth_multiplier=2))),
    ("DepthwiseConv2D", _after_conv(lambda L: L.DepthwiseConv2D(3, depth_multiplier=2))),
    ("Discretization", _w_embedding("Embedding")),
    ("Dot", _attention("Dot", axes=(2, 2))),
    ("Dropout", _after_conv(lambda L: L.Dropout(0.25))),
    ("ELU", _after_conv(lambda L: L.ELU())),
    (
        "EinsumDense",
        _rows(lambda L: L.EinsumDense("abc,cd->abd", output_shape=(28, 16), bias_axes="d", activation="relu")),
    ),
    ("Embedding", _w_embedding("Embedding")),
    ("Equalization", _first(lambda L: L.Equalization(value_range=(0, 1)))),
    ("Flatten", _flat(lambda L: L.Activation("relu"))),
    ("GRU", _rnn(lambda L: L.GRU(16))),
    ("GRUCell", _rnn(lambda L: L.RNN(L.GRUCell(16)))),
    ("GaussianDropout", _after_conv(lambda L: L.GaussianDropout(0.1))),
    ("GaussianNoise", _after_conv(lambda L: L.GaussianNoise(0.1))),
    ("GlobalAveragePooling1D", _rows_conv1d(lambda L: L.GlobalAveragePooling1D())),
    ("GlobalAveragePooling2D", _after_conv(lambda L: L.GlobalAveragePooling2D(), filters=16)),
    ("GlobalAveragePooling3D", _vol(lambda L: L.GlobalAveragePooling3D())),
    ("GlobalMaxPooling1D", _rows_conv1d(lambda L: L.GlobalMaxPooling1D())),
    ("GlobalMaxPooling2D", _after_conv(lambda L: L.GlobalMaxPooling2D(), filters=16)),
    ("GlobalMaxPooling3D", _vol(lambda L: L.GlobalMaxPooling3D())),
    ("GroupNormalization", _after_conv(lambda L: L.GroupNormalization(groups=2), filters=8)),
    ("GroupQueryAttention", _attention("GroupQueryAttention", head_dim=8, num_query_heads=4, num_key_value_heads=2)),
    ("HashedCrossing", _w_hashed_crossing),
    ("Hashing", _scalar_codes(lambda L: L.Hashing(num_bins=8, output_mode="one_hot"))),
    ("Identity", _after_conv(lambda L: L.Identity())),
    ("InputLayer", _w_input_layer),
    ("IntegerLookup", _scalar_codes(lambda L: L.IntegerLookup(vocabulary=[0, 1, 2, 3], output_mode="one_hot"))),
    ("LSTM", _rnn(lambda L: L.LSTM(16))),
    ("LSTMCell", _rnn(lambda L: L.RNN(L.LSTMCell(16)))),
    ("Lambda", _w_lambda),
    ("LayerNormalization", _flat(lambda L: L.LayerNormalization())),
    ("LeakyReLU", _after_conv(lambda L: L.LeakyReLU(0.1))),
    ("Masking", _w_masking),
    ("MaxPooling1D", _rows_conv1d(lambda L: L.MaxPooling1D(2))),
    ("MaxPooling2D", _after_conv(lambda L: L.MaxPooling2D(2))),
    ("MaxPooling3D", _vol(lambda L: L.MaxPooling3D((2, 2, 1)))),
    ("Maximum", _merge("Maximum")),
    ("MelSpectrogram", _w_spectrogram(_mel, 0.05)),
    ("Minimum", _merge("Minimum")),
    ("MixUp", _first(lambda L: L.MixUp())),
    ("MultiHeadAttention", _attention("MultiHeadAttention", num_heads=2, key_dim=8)),
    ("Multiply", _merge("Multiply")),
    ("Normalization", _w_normalization),
    ("PReLU", _after_conv(lambda L: L.PReLU(shared_axes=[1, 2]))),
    ("Permute", _first(lambda L: L.Permute((2, 1, 3)))),
    ("Pipeline", _w_pipeline),
    ("RMSNormalization", _flat(lambda L: L.RMSNormalization())),
    ("RNN", _rnn(lambda L: L.RNN(L.SimpleRNNCell(16)))),
    ("RandAugment", _rgb(lambda L: L.RandAugment(value_range=(0, 1)))),
    ("RandomBrightness", _first(lambda L: L.RandomBrightness(0.2, value_range=(0, 1)))),
    ("RandomColorDegeneration", _rgb(lambda L: L.RandomColorDegeneration(0.2))),
    ("RandomColorJitter", _rgb(lambda L: L.RandomColorJitter(value_range=(0, 1), brightness_factor=0.2))),
    ("RandomContrast", _first(lambda L: L.RandomContrast(0.2))),
    # keras 3.15.1 RandomCrop returns its input unchanged at inference (not the documented
    # centre crop) although its output shape says 24x24: only a size-agnostic head runs.
    ("RandomCrop", _w_random_crop),
    ("RandomElasticTransform", _first(lambda L: L.RandomElasticTransform(value_range=(0, 1)))),
    ("RandomErasing", _first(lambda L: L.RandomErasing(value_range=(0, 1)))),
    ("RandomFlip", _first(lambda L: L.RandomFlip("horizontal"))),
    ("RandomGaussianBlur", _first(lambda L: L.RandomGaussianBlur(value_range=(0, 1)))),
    ("RandomGrayscale", _rgb(lambda L: L.RandomGrayscale(0.5))),
    ("RandomHue", _rgb(lambda L: L.RandomHue(0.2, value_range=(0, 1)))),
    ("RandomInvert", _first(lambda L: L.RandomInvert(value_range=(0, 1)))),
    ("RandomPerspective", _first(lambda L: L.RandomPerspective())),
    ("RandomPosterization", _first(lambda L: L.RandomPosterization(factor=4, value_range=(0, 1)))),
    ("RandomRotation", _first(lambda L: L.RandomRotation(0.1))),
    ("RandomSaturation", _rgb(lambda L: L.RandomSaturation(0.2, value_range=(0, 1)))),
    ("RandomSharpness", _first(lambda L: L.RandomSharpness(0.2, value_range=(0, 1)))),
    ("RandomShear", _first(lambda L: L.RandomShear(x_factor=0.1, y_factor=0.1))),
    ("RandomTranslation", _first(lambda L: L.RandomTranslation(0.1, 0.1))),
    ("RandomZoom", _first(lambda L: L.RandomZoom(0.1))),
    ("ReLU", _after_conv(lambda L: L.ReLU(max_value=6.0, negative_slope=0.1, threshold=0.2))),
    ("RepeatVector", _w_repeat_vector),
    ("Rescaling", _w_rescaling),
    ("Reshape", _first(lambda L: L.Reshape((14, 56, 1)))),
    ("Resizing", _first(lambda L: L.Resizing(32, 32))),
    ("ReversibleEmbedding", _w_embedding("ReversibleEmbedding")),
    ("STFTSpectrogram", _w_spectrogram(_stft, 0.25)),
    ("SeparableConv1D", _rows(lambda L: L.SeparableConv1D(8, 3, depth_multiplier=2))),
    ("SeparableConv2D", _after_conv(lambda L: L.SeparableConv2D(8, 3))),
    ("SimpleRNN", _rnn(lambda L: L.SimpleRNN(16))),
    ("SimpleRNNCell", _rnn(lambda L: L.RNN(L.SimpleRNNCell(16)))),
    ("Softmax", _flat(lambda L: L.Softmax())),
    ("Solarization", _first(lambda L: L.Solarization(addition_factor=0.2, threshold_factor=0.2, value_range=(0, 1)))),
    ("SpatialDropout1D", _rows_conv1d(lambda L: L.SpatialDropout1D(0.2))),
    ("SpatialDropout2D", _after_conv(lambda L: L.SpatialDropout2D(0.2))),
    ("SpatialDropout3D", _vol(lambda L: L.SpatialDropout3D(0.2))),
    ("SpectralNormalization", _flat(lambda L: L.SpectralNormalization(L.Dense(16, activation="relu")))),
    ("StackedRNNCells", _rnn(lambda L: L.RNN(L.StackedRNNCells([L.SimpleRNNCell(8), L.SimpleRNNCell(8)])))),
    ("Subtract", _merge("Subtract")),
    ("TimeDistributed", _w_time_distributed),
    ("UnitNormalization", _flat(lambda L: L.UnitNormalization())),
    ("UpSampling1D", _rows_conv1d(lambda L: L.UpSampling1D(2))),
    ("UpSampling2D", _after_conv(lambda L: L.UpSampling2D(2))),
    ("UpSampling3D", _vol(lambda L: L.UpSampling3D((2, 2, 1)))),
    ("ZeroPadding1D", _rows_conv1d(lambda L: L.ZeroPadding1D((1, 2)))),
    ("ZeroPadding2D", _first(lambda L: L.ZeroPadding2D(((1, 0), (2, 1))))),
    ("ZeroPadding3D", _vol(lambda L: L.ZeroPadding3D(((1, 0), (2, 1), (0, 1))))),
]

LAYER_ALIASES: dict[str, str] = {
    "AvgPool1D": "AveragePooling1D",
    "AvgPool2D": "AveragePooling2D",
    "AvgPool3D": "AveragePooling3D",
    "MaxPool1D": "MaxPooling1D",
    "MaxPool2D": "MaxPooling2D",
    "MaxPool3D": "MaxPooling3D",
    "GlobalAvgPool1D": "GlobalAveragePooling1D",
    "GlobalAvgPool2D": "GlobalAveragePooling2D",
    "GlobalAvgPool3D": "GlobalAveragePooling3D",
    "GlobalMaxPool1D": "GlobalMaxPooling1D",
    "GlobalMaxPool2D": "GlobalMaxPooling2D",
    "GlobalMaxPool3D": "GlobalMaxPooling3D",
    "Convolution1D": "Conv1D",
    "Convolution2D": "Conv2D",
    "Convolution3D": "Conv3D",
    "Convolution1DTranspose": "Conv1DTranspose",
    "Convolution2DTranspose": "Conv2DTranspose",
    "Convolution3DTranspose": "Conv3DTranspose",
    "SeparableConvolution1D": "SeparableConv1D",
    "SeparableConvolution2D": "SeparableConv2D",
}

# Modules Keras imports only when the class is built (keras.src.utils.module_utils' lazy modules),
# beyond Keras and its backend: the tests check them at collection (missing_layer_modules).
LAYER_NEEDS: dict[str, str] = {"STFTSpectrogram": "scipy"}


def missing_layer_modules() -> dict[str, str]:
    """{class: module} of LAYER_NEEDS whose module is not installed here."""
    import importlib.util

    return {cls: mod for cls, mod in LAYER_NEEDS.items() if importlib.util.find_spec(mod) is None}


LAYER_SKIPPED: dict[str, str] = {
    "Layer": "abstract base class (call() not implemented)",
    "Wrapper": "abstract base of Bidirectional/TimeDistributed (call() not implemented)",
    "InputSpec": "not a layer: the shape/dtype spec object layers use to check their inputs",
    "TFSMLayer": "wraps an exported TF SavedModel directory by path; the file would reference an external "
    "artifact, and the layer is not serializable into .h5 weights",
    "JaxLayer": "wraps a JAX function; needs the JAX backend (this Keras runs on TensorFlow)",
    "FlaxLayer": "wraps a Flax module; needs the JAX backend and flax",
    "TorchModuleWrapper": "wraps a torch.nn.Module; needs the torch backend",
    "StringLookup": "string input only: no layer turns an image tensor into strings (short of a Lambda)",
    "TextVectorization": "string input only (text), as StringLookup",
    "MaxNumBoundingBoxes": "operates on bounding-box dicts {'boxes', 'labels'}, not on image tensors",
}


def layer_coverage() -> dict[str, list[str]]:
    """Public classes of keras.layers by status: 'built', 'alias', 'skipped', 'uncovered'
    (a class this module does not know yet: a newer Keras)."""
    import keras

    public = sorted(n for n in dir(keras.layers) if not n.startswith("_") and inspect.isclass(getattr(keras.layers, n)))
    built = {n for n, _ in LAYER_CLASSES}
    out: dict[str, list[str]] = {"built": [], "alias": [], "skipped": [], "uncovered": []}
    for n in public:
        key = (
            "built"
            if n in built
            else "alias"
            if n in LAYER_ALIASES
            else "skipped"
            if n in LAYER_SKIPPED
            else "uncovered"
        )
        out[key].append(n)
    for a, c in LAYER_ALIASES.items():
        if hasattr(keras.layers, a):
            assert getattr(keras.layers, a) is getattr(keras.layers, c), f"{a} is no longer {c}"
    return out


def build_layer_zoo(directory: Path, only: Optional[set[str]] = None) -> Zoo:
    """One Keras 3 model per class of LAYER_CLASSES (+ aliases, sharing the file), saved as
    .h5 (form "h5"), or .keras where legacy .h5 cannot hold it; Zoo {class name: ZooModel}.
    A class whose model Keras cannot build or run here (or which this Keras lacks) is left out,
    with the reason in not_built."""
    with _Silence():
        return _build_layer_zoo(Path(directory), only)


def _build_layer_zoo(directory: Path, only: Optional[set[str]]) -> Zoo:
    import keras

    directory.mkdir(parents=True, exist_ok=True)
    out = Zoo()
    for cls, builder in LAYER_CLASSES:
        if only is not None and cls not in only:
            continue
        if not hasattr(keras.layers, cls):
            out.not_built[cls] = f"keras {keras.__version__} has no keras.layers.{cls}"
            continue
        t0 = time.perf_counter()
        key = f"layer_{cls}"
        notes = []
        try:
            _clear(keras)
            model = builder(keras)
            _set_weights(model, key)
            shape = _input_shape(model)
            x, mnist = make_x(key, shape, takes_raw_pixels(model))
            expected = keras_predict(model, x)
        except Exception as e:  # noqa: BLE001 - recorded; the class's test fails with it
            out.not_built[cls] = f"Keras cannot build or run its model here: {_why(e)}"
            continue
        try:
            path, form = _save(model, "keras3", "h5", directory, key), "h5"
        except Exception as e:  # noqa: BLE001
            notes.append(f"legacy .h5 refused it ({type(e).__name__}: {str(e)[:120]}): saved as .keras")
            for p in (directory / f"{key}.h5",):
                p.unlink(missing_ok=True)
            path, form = _save(model, "keras3", "keras", directory, key), "keras"
        if cls == "Lambda":
            notes.append("Keras loads it only with safe_mode=False; the engine must refuse it")
        if cls == "RandomCrop":
            notes.append("keras 3.15.1 RandomCrop passes its input through at inference (no centre crop)")
        name = f"{key}.{form}"
        out[cls] = ZooModel(
            name,
            cls,
            "keras3",
            form,
            path[0],
            None,
            shape,
            x,
            expected,
            mnist,
            _notes(name, "keras3", form, "; ".join(notes)),
        )
        BUILD_SECONDS[name] = time.perf_counter() - t0
    for alias, canon in LAYER_ALIASES.items():
        if canon in out and (only is None or alias in only or canon in only):
            out[alias] = dataclasses.replace(
                out[canon],
                name=f"layer_{alias}.{out[canon].form}",
                case=alias,
                notes=f"alias of {canon} (the same class and file)",
            )
    return out


# ------------------------------------------------------------------------------ verify


def _k3_load(z: ZooModel, safe_mode: bool = True):
    import keras

    if z.form in ("h5", "keras", "keras_windows"):
        return keras.models.load_model(str(z.path), compile=False, safe_mode=safe_mode)
    if z.form == "weights.h5":
        m = keras.models.model_from_json(z.arch.read_text())
        m.load_weights(str(z.path))
        return m
    raise ValueError(f"Keras 3 has no loader for form {z.form}")


def _k2_load(z: ZooModel, windows: bool = False):
    import tf_keras

    if z.form in ("h5", "keras", "keras_windows"):
        if not windows:
            return tf_keras.models.load_model(str(z.path), compile=False)
        from unittest import mock

        from tf_keras.src.saving import saving_lib

        # tf_keras as it runs on Windows: saving_lib's inner paths joined by ntpath.
        with mock.patch.object(saving_lib.tf.io.gfile, "join", ntpath.join):
            return tf_keras.models.load_model(str(z.path), compile=False)
    if z.form == "weights_h5":
        m = tf_keras.models.model_from_json(z.arch.read_text())
        m.load_weights(str(z.path))
        return m
    raise ValueError(z.form)


def expected_outcome(z: ZooModel, loader: str) -> str:
    """'match', 'refuse' or 'differ': what the loader is known to do with z (see verify)."""
    if loader == "keras3":
        if z.form == "keras_windows" or z.name in KERAS3_REFUSES:
            return "refuse"
        return "differ" if z.name in KERAS3_DIFFERS else "match"
    if loader == "tf_keras" and z.form == "keras_windows":
        return "refuse"
    return "match"


def verify(models: dict[str, ZooModel], tol: float = 1e-6) -> list[dict]:
    """Reload every file with Keras and compare with expected. One row per (model, loader):
    {'name', 'loader', 'expected', 'outcome', 'ok', 'max_diff', 'error'}. loader is 'keras3'
    (load_model, or model_from_json + load_weights), 'keras3_unsafe' (Lambda, safe_mode=False),
    'tf_keras' (tf_keras files), 'tf_keras_windows' (tf_keras with tf.io.gfile.join patched to
    ntpath.join, as on Windows); outcome is 'match' (max_diff <= tol), 'differ' or 'refuse';
    ok = outcome == expected_outcome(...)."""
    rows = []
    with _Silence():
        for z in models.values():
            loaders = []
            if z.framework == "keras3":
                loaders.append(("keras3", lambda z=z: _k3_load(z)))
                if z.case == "Lambda":
                    loaders.append(("keras3_unsafe", lambda z=z: _k3_load(z, safe_mode=False)))
            else:
                if z.form != "weights_h5":
                    loaders.append(("keras3", lambda z=z: _k3_load(z)))
                loaders.append(("tf_keras", lambda z=z: _k2_load(z)))
                if z.form == "keras_windows":
                    loaders.append(("tf_keras_windows", lambda z=z: _k2_load(z, windows=True)))
            for loader, load in loaders:
                row = {
                    "name": z.name,
                    "loader": loader,
                    "expected": expected_outcome(z, loader),
                    "outcome": "refuse",
                    "ok": False,
                    "max_diff": None,
                    "error": "",
                }
                try:
                    m = load()
                    y = keras_predict(m, z.x)
                    row["max_diff"] = float(np.abs(y.astype(np.float64) - z.expected).max())
                    row["outcome"] = "match" if row["max_diff"] <= tol else "differ"
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                row["ok"] = row["outcome"] == row["expected"]
                rows.append(row)
    return rows


# ------------------------------------------------------------------------------- main


def _table(models: dict[str, ZooModel]) -> None:
    print(f"{'name':44s} {'form':14s} {'input':14s} {'output':10s} {'mnist':5s} {'s':>6s}  notes")
    for z in models.values():
        print(
            f"{z.name:44s} {z.form:14s} {str(z.input_shape):14s} {str(z.expected.shape[1:]):10s} "
            f"{str(z.mnist):5s} {BUILD_SECONDS.get(z.name, 0.0):6.2f}  {z.notes[:90]}"
        )


if __name__ == "__main__":  # python tests/models/keras_zoo.py DIR [--layers] [--verify]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    target = Path(args[0]) if args else Path(tempfile.mkdtemp(prefix="lenet-keras-zoo-"))
    t = time.perf_counter()
    zoo = build_zoo(target)
    t_zoo = time.perf_counter() - t
    _table(zoo)
    print(f"{len(zoo)} models of {len(CASES)} cases in {target} ({t_zoo:.1f} s)")
    for key, why in zoo.not_built.items():
        print(f"NOT BUILT {key}: {why}")
    everything = dict(zoo)
    if "--layers" in sys.argv:
        t = time.perf_counter()
        lz = build_layer_zoo(target / "layers")
        t_layers = time.perf_counter() - t
        _table({z.name: z for z in lz.values()})
        cov = layer_coverage()
        print(
            f"{len(lz)} layer classes in {target / 'layers'} ({t_layers:.1f} s); skipped: {cov['skipped']}; "
            f"uncovered: {cov['uncovered']}"
        )
        for key, why in lz.not_built.items():
            print(f"NOT BUILT {key}: {why}")
        everything.update({z.name: z for z in lz.values()})
    if "--verify" in sys.argv:
        t = time.perf_counter()
        rows = verify({k: v for k, v in everything.items() if not v.notes.startswith("alias of")})
        for r in rows:
            diff = "" if r["max_diff"] is None else f"{r['max_diff']:.2e}"
            print(
                f"{'ok ' if r['ok'] else 'NO '} {r['name']:44s} {r['loader']:16s} {r['outcome']:6s} {diff:9s} "
                f"{r['error'][:100]}"
            )
        print(f"verified in {time.perf_counter() - t:.1f} s: {sum(r['ok'] for r in rows)}/{len(rows)} as expected")
