"""Tests of the Keras file loader (lenet.keras): which records each file gives,
the formats and their variants, and every error path: the exception type and that
the message names the file (and the layer, where there is one). What the records
compute is checked against Keras by test_parity_keras.py and test_keras_zoo.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")
keras = pytest.importorskip("keras")

from keras_fixtures import FIXTURES, edit_config, fixture, fixtures  # noqa: E402,F401

import lenet  # noqa: E402
import lenet.keras as lk  # noqa: E402
from lenet._native import _core  # noqa: E402
from lenet.errors import Error, ModelFileError, UnsupportedModelError  # noqa: E402
from lenet.keras import h5_guard, hdf5, read_model  # noqa: E402

FIELDS = [name for name, _, _ in _core.LayerSpec.fields() if name not in ("name", "keras_class")]


# ------------------------------------------------------------------ expected records


def C(name, k, s, same, f, act, w, b):
    return ("conv2d", name, dict(kernel=k, strides=s, same_padding=same, filters=f, activation=act), w, b)


def P(kind, name, k, s, same):
    return (kind, name, dict(kernel=k, strides=s, same_padding=same), None, None)


def D(name, units, act, w, b):
    return ("dense", name, dict(units=units, activation=act), w, b)


def F(name, df):
    return ("flatten", name, dict(data_format=df), None, None)


def A(name, act, kind="activation"):
    return (kind, name, dict(activation=act), None, None)


TESTNET = [
    C("c1", (3, 3), (2, 2), True, 4, "relu", (3, 3, 1, 4), (4,)),
    C("c2", (4, 4), (1, 1), True, 5, "linear", (4, 4, 4, 5), (5,)),
    P("max_pool2d", "p1", (3, 3), (2, 2), True),
    P("avg_pool2d", "p2", (2, 2), (2, 2), True),
    F("fl", "channels_last"),
    D("d1", 7, "tanh", (80, 7), (7,)),
    D("d2", 3, "linear", (7, 3), (3,)),
]


def lenet5_body(flatten_df):
    return [
        ("zero_pad2d", "pad", dict(pad=(2, 2, 2, 2)), None, None),
        C("c1", (5, 5), (1, 1), False, 6, "tanh", (5, 5, 1, 6), (6,)),
        P("avg_pool2d", "s2", (2, 2), (2, 2), False),
        C("c3", (5, 5), (1, 1), False, 16, "tanh", (5, 5, 6, 16), (16,)),
        P("avg_pool2d", "s4", (2, 2), (2, 2), False),
        F("fl", flatten_df),
        D("c5", 120, "tanh", (400, 120), (120,)),
        D("f6", 84, "tanh", (120, 84), (84,)),
        D("out", 10, "softmax", (84, 10), (10,)),
    ]


LENET5 = [("rescaling", "scale", dict(scale=pytest.approx(1 / 255), offset=0.0), None, None)] + lenet5_body(
    "channels_last"
)
ACTIVATIONS = [
    C("c1", (3, 3), (1, 1), False, 3, "linear", (3, 3, 1, 3), None),
    A("a1", "relu"),
    ("zero_pad2d", "pad", dict(pad=(1, 0, 2, 1)), None, None),
    P("max_pool2d", "p1", (2, 2), (2, 2), False),
    A("a2", "sigmoid"),
    C("c2", (3, 3), (1, 2), True, 4, "sigmoid", (3, 3, 3, 4), (4,)),
    A("r1", "relu"),
    P("avg_pool2d", "p2", (3, 2), (2, 1), True),
    F("fl", "channels_last"),
    D("d1", 16, "tanh", (196, 16), None),
    D("d2", 10, "linear", (16, 10), (10,)),
    A("sm", "softmax", "softmax"),
]


def CF(flatten_df):
    return [
        C("c1", (5, 5), (1, 1), False, 4, "relu", (5, 5, 1, 4), (4,)),
        P("max_pool2d", "p1", (2, 2), (2, 2), False),
        ("zero_pad2d", "pad", dict(pad=(1, 1, 1, 1)), None, None),
        C("c2", (3, 3), (2, 2), True, 6, "linear", (3, 3, 4, 6), (6,)),
        P("avg_pool2d", "p2", (2, 2), (2, 2), True),
        F("fl", flatten_df),
        D("out", 10, "softmax", (96, 10), (10,)),
    ]


FUNCTIONAL = [
    C("c1", (5, 5), (1, 1), False, 6, "relu", (5, 5, 1, 6), (6,)),
    P("max_pool2d", "s2", (2, 2), (2, 2), False),
    C("c3", (5, 5), (1, 1), False, 16, "relu", (5, 5, 6, 16), (16,)),
    P("max_pool2d", "s4", (2, 2), (2, 2), False),
    F("fl", "channels_last"),
    D("f5", 32, "relu", (256, 32), (32,)),
    D("f6", 10, "softmax", (32, 10), (10,)),
]
DEEP = (
    [F("fl", "channels_last"), D("h0", 8, "tanh", (64, 8), (8,))]
    + [D(f"h{i}", 8, "tanh", (8, 8), (8,)) for i in range(1, 11)]
    + [D("out", 4, "softmax", (8, 4), (4,))]
)
MLP2D = [
    ("rescaling", "scale", dict(scale=pytest.approx(1 / 255), offset=0.0), None, None),
    F("fl", "channels_last"),
    D("d1", 32, "relu", (784, 32), (32,)),
    D("out", 10, "softmax", (32, 10), (10,)),
]
LOGITS = [
    C("c1", (5, 5), (1, 1), True, 8, "relu", (5, 5, 1, 8), (8,)),
    P("max_pool2d", "p1", (2, 2), (2, 2), False),
    C("c2", (5, 5), (1, 1), True, 16, "relu", (5, 5, 8, 16), (16,)),
    P("max_pool2d", "p2", (2, 2), (2, 2), False),
    F("fl", "channels_last"),
    D("d1", 64, "relu", (784, 64), (64,)),
    D("logits", 10, "linear", (64, 10), (10,)),
]
CF_IN = (1, 28, 28)

# name -> (records, Keras input shape, channels_first, model name, input_scale)
EXPECTED = {
    "k3_testnet": (TESTNET, (28, 28, 1), False, "testnet", None),
    "k2_testnet": (TESTNET, (28, 28, 1), False, "testnet", None),
    "k3_testnet_keras": (TESTNET, (28, 28, 1), False, "testnet", None),
    "k2_testnet_weights": (TESTNET, (28, 28, 1), False, "testnet", None),
    "k3_lenet5": (LENET5, (28, 28, 1), False, "lenet5", None),
    "k2_lenet5": (LENET5, (28, 28, 1), False, "lenet5", None),
    "k3_activations": (ACTIVATIONS, (28, 28, 1), False, "activations", None),
    "k2_activations": (ACTIVATIONS, (28, 28, 1), False, "activations", None),
    "k3_cf": (CF("channels_first"), CF_IN, True, "cfnet", None),
    "k2_cf": (CF("channels_first"), CF_IN, True, "cfnet", None),
    "k3_cf_chw": (CF("channels_last"), CF_IN, True, "cfnet", None),
    "k2_cf_chw": (CF("channels_last"), CF_IN, True, "cfnet", None),
    "k3_functional": (FUNCTIONAL, (28, 28, 1), False, "functional", None),
    "k2_functional": (FUNCTIONAL, (28, 28, 1), False, "functional", None),
    "k3_functional_weights": (FUNCTIONAL, (28, 28, 1), False, "functional", None),
    "k3_deep_dense_weights": (DEEP, (8, 8, 1), False, "deep_dense", None),
    "k2_deep_dense_weights": (DEEP, (8, 8, 1), False, "deep_dense", None),
    "k3_mlp2d": (MLP2D, (28, 28), False, "mlp2d", None),
    "k3_logits": (LOGITS, (28, 28, 1), False, "logits", pytest.approx(1 / 255)),
    "k2_list_json": (lenet5_body(""), (28, 28, 1), False, "", None),
    "k2_list_json_cf": (CF(""), CF_IN, True, "", None),
}
assert set(EXPECTED) == set(FIXTURES)


def check_records(spec, table):
    assert [(l.kind, l.name) for l in spec.layers] == [(k, n) for k, n, _, _, _ in table]
    for i, (l, (kind, name, fields, w, b)) in enumerate(zip(spec.layers, table)):
        assert list(l.inputs) == [i - 1], name
        for key, want in fields.items():
            got = getattr(l, key)
            assert (tuple(got) if isinstance(got, list) else got) == want, (name, key)
        weights = {n: l.weight(n) for n in l.weight_names()}
        if w is not None:
            assert weights["kernel"].shape == w and weights["kernel"].dtype == np.float32, name
        if b is not None:
            assert weights["bias"].shape == b, name
        elif kind in ("conv2d", "dense"):
            assert "bias" not in weights and not l.use_bias, name
        if kind not in ("conv2d", "dense"):
            assert not weights, name


def load(fx):
    return read_model(fx.weights, arch=fx.arch)


# ------------------------------------------------------------------ the fixtures' specs


@pytest.mark.parametrize("name", list(FIXTURES))
def test_spec_of_fixture(fixtures, name):
    fx = fixture(fixtures, name)
    spec = load(fx)
    table, input_shape, channels_first, model_name, input_scale = EXPECTED[name]
    check_records(spec, table)
    assert spec.input_shape == input_shape
    assert lenet.Model(spec).channels_first == channels_first == (fx.data_format == "channels_first")
    assert spec.name == model_name
    assert spec.input_scale == input_scale
    assert spec.source == str(fx.weights)
    major = "3." if fx.framework == "keras3" else "2."
    if name == "k2_list_json":
        assert spec.keras_version == "2.21.0"  # the weights file's version wins over the JSON's
    elif fx.framework == "keras3" and fx.arch is not None:
        assert spec.keras_version == ""  # neither .weights.h5 nor Keras 3 to_json() say
    else:
        assert spec.keras_version.startswith(major)


PAIRS = [
    ("k3_testnet", "k2_testnet"),
    ("k3_lenet5", "k2_lenet5"),
    ("k3_activations", "k2_activations"),
    ("k3_cf", "k2_cf"),
    ("k3_cf_chw", "k2_cf_chw"),
    ("k3_functional", "k2_functional"),
    ("k3_deep_dense_weights", "k2_deep_dense_weights"),
    ("k3_testnet", "k3_testnet_keras"),
    ("k2_testnet", "k2_testnet_weights"),
    ("k3_functional", "k3_functional_weights"),
    ("k2_cf_chw", "k2_list_json_cf"),
]


# Fields that the writer's version may legitimately spell differently for one model.
VARIANT = ("keras_class", "data_format")


def same_spec(a, b, names=True):
    assert a.input_shape == b.input_shape
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers):
        for key in [f for f in FIELDS if f not in VARIANT] + (["name"] if names else []):
            assert getattr(la, key) == getattr(lb, key), (la.name, key)
        assert la.weight_names() == lb.weight_names(), la.name
        for n in la.weight_names():
            np.testing.assert_array_equal(la.weight(n), lb.weight(n))


@pytest.mark.parametrize("a,b", PAIRS)
def test_same_model_same_spec(fixtures, a, b):
    """Keras 2 vs Keras 3 files, and weights-only + JSON vs the full file, of one model."""
    same_spec(load(fixture(fixtures, a)), load(fixture(fixtures, b)))


def test_keras3_weights_keys_are_class_counters_not_names(fixtures):
    fx = fixture(fixtures, "k3_functional_weights")
    with h5py.File(fx.weights) as f:
        assert set(f["layers"]) >= {"conv2d", "conv2d_1", "dense", "dense_1"}
        assert "c1" not in f["layers"]
        c3 = f["layers/conv2d_1/vars/0"][()]
    spec = load(fx)
    np.testing.assert_array_equal(spec.layers[2].weight("kernel"), c3)


def test_keras3_weights_ten_or_more_of_a_class(fixtures):
    fx = fixture(fixtures, "k3_deep_dense_weights")
    with h5py.File(fx.weights) as f:
        dense_10 = f["layers/dense_10/vars/0"][()]
        dense_2 = f["layers/dense_2/vars/0"][()]
    spec = load(fx)
    np.testing.assert_array_equal(spec.layers[1 + 10].weight("kernel"), dense_10)  # h10
    np.testing.assert_array_equal(spec.layers[1 + 2].weight("kernel"), dense_2)  # h2


@pytest.mark.parametrize("how", ["path", "str", "json_string", "dict", "full_h5", "keras_zip"])
def test_arch_forms(fixtures, tmp_path, how):
    full = fixture(fixtures, "k3_testnet")
    w = fixture(fixtures, "k2_testnet_weights")
    text = Path(w.arch).read_text()
    arch = {
        "path": Path(w.arch),
        "str": str(w.arch),
        "json_string": text,
        "dict": json.loads(text),
        "full_h5": full.weights,
        "keras_zip": fixture(fixtures, "k3_testnet_keras").weights,
    }[how]
    same_spec(read_model(w.weights, arch=arch), load(full))


def test_full_model_with_arch_uses_arch(fixtures, tmp_path):
    """arch overrides the file's own architecture; the file's weights are used."""
    fx = fixture(fixtures, "k3_testnet")
    cfg = json.loads(Path(fixture(fixtures, "k2_testnet_weights").arch).read_text())
    for layer in cfg["config"]["layers"]:
        if layer["config"].get("name") == "d1":
            layer["config"]["activation"] = "sigmoid"
    spec = read_model(fx.weights, arch=json.dumps(cfg))
    assert spec.layers[5].activation == "sigmoid"
    np.testing.assert_array_equal(spec.layers[5].weight("kernel"), load(fx).layers[5].weight("kernel"))
    assert spec.extra["architecture"] == "<arch JSON string>"


def test_arch_shipped_name(fixtures, monkeypatch):
    """arch="lenet5" takes the architecture of the shipped full-model file."""
    full = fixture(fixtures, "k3_testnet")
    seen = []
    monkeypatch.setattr(lk, "shipped_weights", lambda name: seen.append(name) or Path(full.weights))
    same_spec(read_model(fixture(fixtures, "k2_testnet_weights").weights, arch="lenet5"), load(full))
    assert seen == ["lenet5"]


def test_keras_zip_with_arch(fixtures):
    fx = fixture(fixtures, "k3_testnet_keras")
    same_spec(read_model(fx.weights, arch=fixture(fixtures, "k2_testnet_weights").arch), load(fx))


@pytest.mark.parametrize(
    "value,want",
    [
        ("tanh", "tanh"),
        (None, "linear"),
        (
            {
                "module": "keras.activations",
                "class_name": "function",
                "config": "sigmoid",
                "registered_name": "function",
            },
            "sigmoid",
        ),
        (
            {
                "module": "keras.layers",
                "class_name": "ReLU",
                "config": {"name": "r", "max_value": None, "negative_slope": 0.0, "threshold": 0.0},
            },
            "relu",
        ),
        ({"module": "keras.layers", "class_name": "Activation", "config": {"name": "a", "activation": "relu"}}, "relu"),
        ({"module": "keras.layers", "class_name": "LeakyReLU", "config": {"name": "l", "negative_slope": 0.1}}, "relu"),
        ("relu6", "relu"),
        ("silu", "swish"),
        ("gelu", "gelu"),
    ],
)
def test_activation_forms(fixtures, tmp_path, value, want):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    edit_config(p, lambda c: layer_cfg(c, "d1")["config"].update(activation=value))
    assert read_model(p).layers[5].activation == want


@pytest.mark.parametrize("padding", [3, [3, 3], [[3, 3], [3, 3]]])
def test_zero_padding_forms(fixtures, tmp_path, padding):
    p = copy(fixture(fixtures, "k3_lenet5").weights, tmp_path)
    edit_config(p, lambda c: layer_cfg(c, "pad")["config"].update(padding=padding))
    assert tuple(read_model(p).layers[1].pad) == (3, 3, 3, 3)  # 34 -> ... -> 5x5x16: Dense shapes unchanged


def test_pool_strides_none_means_pool_size(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    edit_config(p, lambda c: layer_cfg(c, "p2")["config"].update(strides=None))
    assert tuple(read_model(p).layers[3].strides) == (2, 2)


def test_keras1_arch_json(fixtures):
    """A Keras 2 config that says Keras 1 wrote it reads the same (Keras 1 keys are translated, Keras 2 ones kept)."""
    fx = fixture(fixtures, "k2_testnet_weights")
    cfg = json.loads(Path(fx.arch).read_text())
    cfg["keras_version"] = "1.2.2"
    same_spec(read_model(fx.weights, arch=cfg), load(fx))


def test_path_of_wrong_type():
    with pytest.raises(ModelFileError, match="path"):
        read_model(42)


def test_weights_independent_of_extension(fixtures, tmp_path):
    fx = fixture(fixtures, "k3_testnet")
    odd = tmp_path / "weights.hdf"
    shutil.copy(fx.weights, odd)
    same_spec(read_model(odd), load(fx))
    zipped = tmp_path / "model.bin"
    shutil.copy(fixture(fixtures, "k3_testnet_keras").weights, zipped)
    same_spec(read_model(zipped), load(fx))


def test_shipped_names():
    assert lk.SHIPPED_MODELS == ("lenet5", "lenet-keras", "lenet-tf")
    with pytest.raises(ModelFileError, match="lenet5"):
        lk.shipped_weights("nope")


@pytest.mark.parametrize("layout", ["installed", "checkout"])
def test_shipped_weights_are_found_installed_and_in_an_editable_checkout(layout, tmp_path, monkeypatch):
    """A wheel holds lenet/weights/; an editable install runs the checkout's python/lenet/,
    whose shipped files are the checkout's weights/."""
    import lenet.shipped

    package = tmp_path / "python" / "lenet"
    package.mkdir(parents=True)
    folder = package / "weights" if layout == "installed" else tmp_path / "weights"
    folder.mkdir()
    (folder / "lenet5.h5").write_bytes(b"")
    monkeypatch.setattr(lenet.shipped, "__file__", str(package / "shipped.py"))
    assert lk.shipped_weights("lenet5") == folder / "lenet5.h5"
    assert lenet.shipped.shipped_model_file("lenet5") is None
    (folder / "lenet5.lenet").write_bytes(b"")
    assert lenet.shipped.shipped_model_file("lenet5") == folder / "lenet5.lenet"
    (folder / "lenet5.h5").unlink()
    with pytest.raises(ModelFileError, match="missing from the installation"):
        lk.shipped_weights("lenet5")


def test_float64_and_float16_weights_are_cast(fixtures, tmp_path):
    fx = fixture(fixtures, "k2_testnet")
    p = copy(fx.weights, tmp_path)
    with h5py.File(p, "a") as f:
        g = f["model_weights/c1"]
        for wn, dt in (("c1/kernel:0", np.float64), ("c1/bias:0", np.float16)):
            v = g[wn][()]
            del g[wn]
            g.create_dataset(wn, data=v.astype(dt))
    got = read_model(p).layers[0]
    ref = load(fx).layers[0]
    assert got.weight("kernel").dtype == np.float32 and got.weight("bias").dtype == np.float32
    np.testing.assert_array_equal(got.weight("kernel"), ref.weight("kernel"))
    np.testing.assert_allclose(got.weight("bias"), ref.weight("bias"), atol=1e-3)


def test_input_scale_attribute(fixtures):
    assert load(fixture(fixtures, "k3_logits")).input_scale == pytest.approx(1 / 255)
    assert load(fixture(fixtures, "k3_testnet")).input_scale is None


# ------------------------------------------------------------------ string attributes


def _rewrite_str_attr(obj, name, values, fixed=False, chunks=1):
    del obj.attrs[name]
    parts = np.array_split(np.array(values, dtype=object), chunks) if chunks > 1 else [values]
    for i, part in enumerate(parts):
        key = f"{name}{i}" if chunks > 1 else name
        data = [v.encode() for v in part]
        if fixed:
            width = max([len(d) for d in data] + [1]) + 3  # NULL padded
            obj.attrs.create(key, np.array(data, dtype=f"S{width}"))
        else:
            obj.attrs.create(key, [v for v in part], dtype=h5py.string_dtype())


@pytest.mark.parametrize("fixed,chunks", [(True, 1), (False, 2), (True, 3)])
@pytest.mark.parametrize("name", ["k2_testnet", "k3_functional", "k2_testnet_weights"])
def test_fixed_length_and_chunked_string_attributes(fixtures, tmp_path, name, fixed, chunks):
    fx = fixture(fixtures, name)
    p = copy(fx.weights, tmp_path)
    with h5py.File(p, "a") as f:
        root = f["model_weights"] if "model_weights" in f else f
        names = [n.decode() if isinstance(n, bytes) else n for n in root.attrs["layer_names"]]
        _rewrite_str_attr(root, "layer_names", names, fixed, chunks)
        for n in names:
            wn = [w.decode() if isinstance(w, bytes) else w for w in root[n].attrs["weight_names"]]
            if wn:
                _rewrite_str_attr(root[n], "weight_names", wn, fixed, min(chunks, len(wn)))
        if fixed:
            for key in ("keras_version", "backend"):
                v = f.attrs[key]
                del f.attrs[key]
                f.attrs.create(key, np.array(v.encode(), dtype=f"S{len(v) + 2}"))
        assert ("layer_names0" in root.attrs) == (chunks > 1)
    same_spec(read_model(p, arch=fx.arch), load(fx))


# ------------------------------------------------------------------ error paths


def copy(src, tmp_path, name=None):
    dst = tmp_path / (name or Path(src).name)
    shutil.copy(src, dst)
    return dst


def raises(exc, path, *fragments, arch=None):
    with pytest.raises(exc) as info:
        lenet.load(path, arch=arch)
    msg = str(info.value)
    assert type(info.value) is exc, f"{type(info.value).__name__}: {msg}"
    assert str(path) in msg, msg
    for frag in fragments:
        assert frag in msg, msg
    return msg


def layer_cfg(cfg, name):
    return next(l for l in cfg["config"]["layers"] if l["config"].get("name") == name)


def test_missing_file(tmp_path):
    raises(lenet.ModelFileNotFoundError, tmp_path / "nope.h5", "no such file")  # a ModelFileError too


def test_directory(tmp_path):
    raises(ModelFileError, tmp_path, "directory")


def test_empty_file(tmp_path):
    p = tmp_path / "empty.h5"
    p.write_bytes(b"")
    raises(ModelFileError, p, "empty")


def test_text_file(tmp_path):
    p = tmp_path / "model.h5"
    p.write_text("hello, I am not a model\n" * 10)
    raises(ModelFileError, p, "not a Keras model file")


def test_json_given_as_weights(fixtures, tmp_path):
    raises(ModelFileError, fixture(fixtures, "k2_testnet_weights").arch, "arch=")


def test_random_bytes(tmp_path):
    p = tmp_path / "random.h5"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    raises(ModelFileError, p)


def test_hdf5_magic_then_garbage(tmp_path):
    p = tmp_path / "fake.h5"
    p.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 8)
    raises(ModelFileError, p, "HDF5")


@pytest.mark.parametrize("name", ["k2_testnet", "k3_testnet", "k3_functional_weights", "k3_testnet_keras"])
@pytest.mark.parametrize("frac", [0.0, 0.01, 0.1, 0.5, 0.9, 0.999])
def test_truncated_copies(fixtures, tmp_path, name, frac):
    fx = fixture(fixtures, name)
    data = Path(fx.weights).read_bytes()
    p = tmp_path / Path(fx.weights).name
    p.write_bytes(data[: max(9, int(len(data) * frac))])
    raises(ModelFileError, p, arch=fx.arch)


@pytest.mark.parametrize("name", ["k2_testnet", "k3_functional", "k3_functional_weights", "k3_testnet_keras"])
def test_corrupted_copies_never_leak_raw_errors(fixtures, tmp_path, name):
    """Seeded byte corruptions anywhere in the file: the loader either reads a spec or
    raises a lenet error (ModelFileError, or UnsupportedModelError when the corruption
    lands in a class or activation name) - never OSError, KeyError, ..."""
    fx = fixture(fixtures, name)
    data = bytearray(Path(fx.weights).read_bytes())
    rng = np.random.default_rng(123)
    p = tmp_path / Path(fx.weights).name
    outcomes = {"ok": 0, "ModelFileError": 0, "UnsupportedModelError": 0}
    for trial in range(60):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=1 + trial % 4):
            bad[pos] ^= 1 << int(rng.integers(0, 8))
        p.write_bytes(bytes(bad))
        try:
            read_model(p, arch=fx.arch)
            outcomes["ok"] += 1
        except Error as e:
            assert isinstance(e, (ModelFileError, UnsupportedModelError))
            assert str(p) in str(e)
            outcomes[type(e).__name__] += 1
    assert sum(outcomes.values()) == 60


def test_corrupt_superblock(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    data = bytearray(p.read_bytes())
    data[8:40] = b"\xff" * 32
    p.write_bytes(bytes(data))
    raises(ModelFileError, p, "HDF5")


def test_corrupt_global_heap_does_not_hang(fixtures, tmp_path):
    """libhdf5 1.14 loops forever reading a variable-length string attribute when the
    free-space object of its global heap collection has size 0 (found by the fuzzing
    above with other seeds); the loader refuses such a file first."""
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    data = bytearray(p.read_bytes())
    start = data.find(b"GCOL")
    q, end = start + 16, start + int.from_bytes(data[start + 8 : start + 16], "little")
    while int.from_bytes(data[q : q + 2], "little") != 0:  # walk to the free-space object
        q += 16 + (int.from_bytes(data[q + 8 : q + 16], "little") + 7) // 8 * 8
        assert q < end
    data[q + 8 : q + 16] = bytes(8)
    p.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="global heap"):
        h5_guard.check(
            bytes(data), p, hdf5.MAX_ATTR_ELEMENTS
        )  # the guard alone first: if it missed, libhdf5 would hang
    raises(ModelFileError, p, "global heap")


def test_hdf5_without_keras_content(tmp_path):
    p = tmp_path / "plain.h5"
    with h5py.File(p, "w") as f:
        f["x"] = np.zeros(3)
    raises(ModelFileError, p, "without Keras content")


def test_weights_only_without_arch(fixtures):
    for name in ("k2_testnet_weights", "k3_functional_weights"):
        raises(ModelFileError, fixture(fixtures, name).weights, "arch")


def test_full_model_without_model_config(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f.attrs["model_config"]
    raises(ModelFileError, p, "model_config")


def test_missing_weight_dataset(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/c2/c2/kernel:0"]
    raises(ModelFileError, p, "c2", "kernel:0")


def test_missing_layer_group(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/d1"]
    raises(ModelFileError, p, "d1")


def test_missing_model_weights_layer_names(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights"].attrs["layer_names"]
    raises(ModelFileError, p, "layer_names")


def test_missing_keras3_weights_group(fixtures, tmp_path):
    fx = fixture(fixtures, "k3_functional_weights")
    p = copy(fx.weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["layers/conv2d_1"]
    raises(ModelFileError, p, "layers/conv2d_1", "c3", arch=fx.arch)


def test_wrong_weight_shape(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/d1/d1/kernel:0"]
        f["model_weights/d1/d1/kernel:0"] = np.zeros((81, 7), np.float32)
    raises(ModelFileError, p, "'d1'", "(81, 7)", "(80, 7)")


def test_wrong_conv_input_channels(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/c2/testnet/c2/kernel"]
        f["model_weights/c2/testnet/c2/kernel"] = np.zeros((4, 4, 3, 5), np.float32)
    raises(ModelFileError, p, "'c2'", "(4, 4, 3, 5)", "(4, 4, 4, 5)")


def test_wrong_bias_shape_keras3_weights(fixtures, tmp_path):
    fx = fixture(fixtures, "k3_functional_weights")
    p = copy(fx.weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["layers/dense/vars/1"]
        f["layers/dense/vars/1"] = np.zeros((33,), np.float32)
    raises(ModelFileError, p, "f5", "(33,)", "32", arch=fx.arch)


def test_missing_bias_in_weight_names(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        f["model_weights/d2"].attrs["weight_names"] = [b"d2/kernel:0"]
    raises(ModelFileError, p, "'d2'", "expected 2 weights")


def test_integer_weights(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/c1/c1/bias:0"]
        f["model_weights/c1/c1/bias:0"] = np.zeros((4,), np.int32)
    raises(ModelFileError, p, "c1", "int32")


def test_nan_weights(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        f["model_weights/c1/c1/bias:0"][0] = np.nan
    raises(ModelFileError, p, "'c1'", "NaN")


def test_arch_with_other_layer_count(fixtures):
    w = fixture(fixtures, "k2_testnet_weights")
    other = fixture(fixtures, "k3_deep_dense_weights").arch
    raises(ModelFileError, w.weights, "12 layers with weights", "(h0, h1,", "has 4 (c1, c2, d1, d2)", arch=other)


def test_arch_with_other_shapes(fixtures):
    """The same number of weighted layers (4) but other shapes: caught by the shape check."""
    w = fixture(fixtures, "k2_testnet_weights")
    raises(ModelFileError, w.weights, "c1", "(3, 3, 1, 4)", "(5, 5, 1, 8)", arch=fixture(fixtures, "k3_logits").weights)


@pytest.mark.parametrize(
    "arch,frag",
    [
        ("{not json", "bad JSON"),
        ('{"class_name": "Sequential", "config": 5}', "Sequential"),
        ('{"config": {}}', "class_name"),
        ("[1, 2]", "class_name"),
        ('{"class_name": "MyModel", "config": {}}', "MyModel"),
    ],
)
def test_bad_arch_json(fixtures, arch, frag):
    exc = UnsupportedModelError if "MyModel" in arch else ModelFileError
    raises(exc, fixture(fixtures, "k2_testnet_weights").weights, frag, arch=arch)


def test_arch_missing_path(fixtures, tmp_path):
    with pytest.raises(ModelFileError, match="no such file") as got:
        read_model(fixture(fixtures, "k2_testnet_weights").weights, arch=tmp_path / "nope.json")
    assert isinstance(got.value, FileNotFoundError) and got.value.filename == str(tmp_path / "nope.json")


def test_arch_hdf5_without_config(fixtures):
    w = fixture(fixtures, "k2_testnet_weights")
    with pytest.raises(ModelFileError, match="model_config"):
        read_model(w.weights, arch=w.weights)


def test_arch_wrong_type(fixtures):
    with pytest.raises(ModelFileError, match="arch must be"):
        read_model(fixture(fixtures, "k2_testnet_weights").weights, arch=42)


def test_bad_model_config_json(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        f.attrs["model_config"] = '{"class_name": "Sequential", "config": {"layers": ['
    raises(ModelFileError, p, "bad JSON")


@pytest.mark.parametrize(
    "mutate,frag",
    [
        (lambda c: c["config"].update(layers="oops"), "list of layers"),
        (lambda c: c["config"]["layers"].insert(3, 7), "#3"),
        (lambda c: layer_cfg(c, "c1")["config"].update(filters="four"), "filters"),
        (lambda c: layer_cfg(c, "c1")["config"].update(kernel_size=[3, 3, 3]), "kernel_size"),
        (lambda c: layer_cfg(c, "c1")["config"].update(filters=10**7), "out of range"),
        (lambda c: layer_cfg(c, "c1")["config"].update(kernel_size=[1000, 1000]), "out of range"),
        (lambda c: layer_cfg(c, "d1")["config"].update(units=10**9), "out of range"),
        (lambda c: layer_cfg(c, "d1")["config"].update(units=0), "out of range"),
        (lambda c: layer_cfg(c, "c1")["config"].update(strides=[-1, 1]), "out of range"),
        (lambda c: c["config"]["layers"][0]["config"].update(batch_shape=[None, 10**5, 28, 1]), "input"),
        (
            lambda c: (
                c["config"]["layers"][0]["config"].update(batch_shape=[None, 2, 2, 1]),
                layer_cfg(c, "c1")["config"].update(padding="valid"),
            ),
            "larger than its input",
        ),
        (lambda c: c["config"]["layers"][0]["config"].update(batch_shape="28x28"), "input shape"),
        (
            lambda c: c["config"]["layers"].extend(
                [{"class_name": "Dropout", "config": {"name": f"x{i}"}} for i in range(1001)]
            ),
            "at most 1000",
        ),
        (
            lambda c: (
                layer_cfg(c, "c2")["config"].update(filters=100),
                layer_cfg(c, "d1")["config"].update(units=10**5),
            ),
            "more than 100000000 parameters",
        ),
    ],
)
def test_config_of_wrong_shape(fixtures, tmp_path, mutate, frag):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    edit_config(p, mutate)
    raises(ModelFileError, p, frag)


def test_theano_backend_kernels_are_flipped(fixtures, tmp_path):
    """Theano convolved: its kernels are TensorFlow's turned 180 degrees, as Keras' loader converted them."""
    fx = fixture(fixtures, "k2_lenet5")  # no 'same' padding: Theano's differs from TensorFlow's
    p = copy(fx.weights, tmp_path)
    with h5py.File(p, "a") as f:
        f.attrs["backend"] = "theano"
        f["model_weights"].attrs["backend"] = "theano"
    got, want = read_model(p).layers[2].weight("kernel"), load(fx).layers[2].weight("kernel")
    np.testing.assert_array_equal(got, want[::-1, ::-1])


def test_theano_same_padding_that_differs_is_refused(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        f.attrs["backend"] = "theano"
    raises(UnsupportedModelError, p, "'c1'", "Theano", "stride 2x2")


def test_file_without_keras_version_is_keras1(fixtures, tmp_path):
    """As Keras reads it: no keras_version means Keras 1 (whose configs differ only in names)."""
    fx = fixture(fixtures, "k2_testnet")
    p = copy(fx.weights, tmp_path)
    with h5py.File(p, "a") as f:
        del f.attrs["keras_version"]
        del f["model_weights"].attrs["keras_version"]
    spec = read_model(p)
    assert spec.extra["keras_major"] == 1 and spec.extra["backend"] == "tensorflow"
    same_spec(spec, load(fx))


# ------------------------------------------------------------------ unsupported models (real Keras files)


def keras_file(tmp_path, model, name="m.h5"):
    p = tmp_path / name
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.save(str(p))
    return p


L = keras.layers


def seq(*layers, shape=(28, 28, 1)):
    return keras.Sequential([keras.Input(shape=shape), *layers], name="m")


@pytest.mark.parametrize(
    "make,layer,cls",
    [
        (
            lambda: seq(L.Conv1D(2, 3, padding="causal", name="c1d"), L.Flatten(), L.Dense(2), shape=(28, 1)),
            "c1d",
            "causal",
        ),
        (lambda: seq(L.Reshape((28, 28)), L.LSTM(4, name="lstm"), L.Dense(2)), "lstm", "LSTM"),
        (
            lambda: seq(L.Flatten(), L.Dense(3, name="d"), L.Activation("sparsemax", name="act")),
            "act",
            "'sparsemax'",
        ),
        (lambda: seq(L.Flatten(), L.Dense(3, name="d"), L.Softmax(axis=0, name="sm")), "sm", "batch axis"),
        (lambda: seq(L.Conv2D(2, 3, name="c"), L.Softmax(axis=1, name="sm")), "sm", "channel axis"),
        (
            lambda: seq(
                L.Rescaling([0.5, 0.25, 1.0], name="rsc"), L.Conv2D(2, 3), L.Flatten(), L.Dense(2), shape=(28, 28, 3)
            ),
            "rsc",
            "per-channel",
        ),
        (lambda: seq(L.Flatten(), L.Dense(3, activation=L.PReLU(), name="dl")), "dl", "PReLU"),
        (lambda: seq(L.Flatten(), L.Lambda(lambda x: x * 2, name="lam"), L.Dense(2)), "lam", "Python code"),
        (
            lambda: seq(
                L.Conv2D(2, 3, name="c"), L.LayerNormalization(axis=[1, 2, 3], name="ln"), L.Flatten(), L.Dense(2)
            ),
            "ln",
            "several axes",
        ),
        (
            lambda: seq(L.Conv2D(2, 3, name="c"), L.GroupNormalization(1, name="gn"), L.Flatten(), L.Dense(2)),
            "gn",
            "GroupNormalization",
        ),
        (lambda: seq(L.Resizing(14, 14, interpolation="bicubic", name="rz"), L.Flatten(), L.Dense(2)), "rz", "bicubic"),
        (
            lambda: seq(L.Normalization(mean=0.5, variance=0.25, invert=True, name="inv"), L.Flatten(), L.Dense(2)),
            "inv",
            "invert",
        ),
    ],
)
def test_unsupported_keras3_models(tmp_path, make, layer, cls):
    p = keras_file(tmp_path, make())
    msg = raises(UnsupportedModelError, p, cls)
    assert f"'{layer}'" in msg


def test_variable_input_size(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    edit_config(p, lambda c: c["config"]["layers"][0]["config"].update(batch_shape=[None, None, None, 1]))
    raises(UnsupportedModelError, p, "variable input size")


def test_dead_end_branch(fixtures, tmp_path):
    """A layer that feeds two layers, one of them going nowhere (hand-edited Keras 2 config)."""
    p = copy(fixture(fixtures, "k2_functional").weights, tmp_path)

    def add_branch(cfg):
        fl = next(l for l in cfg["config"]["layers"] if l["name"] == "fl")
        extra = json.loads(json.dumps(fl))
        extra["name"] = extra["config"]["name"] = "extra"
        cfg["config"]["layers"].append(extra)

    edit_config(p, add_branch)
    raises(UnsupportedModelError, p, "one output")


def test_mixed_data_formats(tmp_path):
    p = keras_file(tmp_path, seq(L.Conv2D(2, 3, name="a"), L.MaxPooling2D(2, name="b"), L.Flatten(), L.Dense(2)))
    edit_config(p, lambda c: layer_cfg(c, "b")["config"].update(data_format="channels_first"))
    raises(UnsupportedModelError, p, "'b'", "mixed data formats")


def test_rescaling_list_of_equal_values(tmp_path):
    p = keras_file(
        tmp_path, seq(L.Rescaling([0.5, 0.5, 0.5], offset=[1.0], name="r"), L.Flatten(), L.Dense(2), shape=(4, 4, 3))
    )
    spec = read_model(p)
    assert (spec.layers[0].scale, spec.layers[0].offset) == (0.5, 1.0)


def test_identities_make_no_records(tmp_path):
    p = keras_file(
        tmp_path,
        seq(
            L.Conv2D(2, 3),
            L.SpatialDropout2D(0.1),
            L.Flatten(name="f1"),
            L.Dropout(0.5),
            L.GaussianNoise(0.1),
            L.Dense(3),
            L.Flatten(name="f2"),
            L.Activation("linear"),
            L.Dense(2),
        ),
    )
    spec = read_model(p)
    assert [l.kind for l in spec.layers] == ["conv2d", "flatten", "dense", "flatten", "dense"]
    assert [list(l.inputs) for l in spec.layers] == [[-1], [0], [1], [2], [3]]


def _functional(inputs, outputs):
    return keras.Model(inputs, outputs, name="fm")


def _two_outputs():
    i = keras.Input((8, 8, 1), name="i")
    f = L.Flatten(name="f")(i)
    return _functional(i, [L.Dense(2, name="o1")(f), L.Dense(3, name="o2")(f)])


def _two_inputs():
    i, j = keras.Input((8, 8, 1), name="i"), keras.Input((8, 8, 1), name="j")
    return _functional([i, j], L.Dense(2)(L.Flatten()(L.Add(name="add")([i, j]))))


def _shared():
    i = keras.Input((8,), name="i")
    d = L.Dense(8, name="shared")
    return keras.Model(i, d(d(i)))


def _broadcast_add():
    i = keras.Input((8, 8, 1), name="i")
    a = L.Conv2D(3, 3, padding="same", name="a")(i)
    return _functional(i, L.Dense(2)(L.Flatten()(L.Add(name="add")([a, i]))))


@pytest.mark.parametrize(
    "make,frag",
    [(_two_outputs, "2 outputs"), (_two_inputs, "2 inputs"), (_shared, "shared"), (_broadcast_add, "broadcasting")],
)
def test_unsupported_functional_graphs(tmp_path, make, frag):
    raises(UnsupportedModelError, keras_file(tmp_path, make()), frag)


def test_functional_graph_records(tmp_path):
    """A residual block: records in an order where each reads earlier ones, inputs by index."""
    i = keras.Input((8, 8, 1), name="i")
    a = L.Conv2D(1, 3, padding="same", name="a")(i)
    b = L.Conv2D(1, 3, padding="same", name="b")(a)
    out = L.Dense(2, name="d")(L.Flatten(name="f")(L.Add(name="add")([b, i])))
    spec = read_model(keras_file(tmp_path, _functional(i, out)))
    assert [(l.name, list(l.inputs)) for l in spec.layers] == [
        ("a", [-1]),
        ("b", [0]),
        ("add", [1, -1]),
        ("f", [2]),
        ("d", [3]),
    ]


def test_nested_model_is_flattened(tmp_path):
    inner = keras.Sequential(
        [keras.Input((8, 8, 1)), L.Conv2D(2, 3, name="ic"), L.BatchNormalization(name="ibn")], name="inner"
    )
    i = keras.Input((8, 8, 1), name="i")
    spec = read_model(keras_file(tmp_path, _functional(i, L.Dense(2, name="d")(L.Flatten(name="f")(inner(i))))))
    assert [l.name for l in spec.layers] == ["ic", "ibn", "f", "d"]


def test_unsupported_layer_in_keras2_weights_only_arch(fixtures, tmp_path):
    fx = fixture(fixtures, "k2_testnet_weights")
    cfg = json.loads(Path(fx.arch).read_text())
    cfg["config"]["layers"].insert(2, {"class_name": "LSTM", "config": {"name": "rnn"}})
    msg = raises(UnsupportedModelError, fx.weights, "'rnn'", "LSTM", arch=json.dumps(cfg))
    assert "<arch JSON string>" in msg


# ------------------------------------------------------------------ .keras zip


def test_keras_zip_corrupt(fixtures, tmp_path):
    src = fixture(fixtures, "k3_testnet_keras").weights
    p = tmp_path / "m.keras"
    p.write_bytes(Path(src).read_bytes()[:200])
    raises(ModelFileError, p)


def test_zip_without_config(tmp_path):
    import zipfile

    p = tmp_path / "m.keras"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("hello.txt", "hi")
    raises(ModelFileError, p, "config.json")


# ------------------------------------------------------------------ strings are data


@pytest.mark.parametrize(
    "name,frag", [("max_poo\udce9ing2d_2", "not valid UTF-8"), ("a\0b", "NUL"), ("x" * 5000, "5,000 characters")]
)
def test_strange_layer_names_in_a_config(fixtures, tmp_path, name, frag):
    """Found by an independent mutation fuzz: a name with an invalid UTF-8 byte (as h5py
    and JSON escapes give it) escaped as a pybind TypeError."""
    p = copy(fixture(fixtures, "k3_testnet").weights, tmp_path)
    edit_config(p, lambda c: layer_cfg(c, "d1")["config"].update(name=name))
    raises(ModelFileError, p, frag)


def test_invalid_utf8_in_layer_names_attribute(fixtures, tmp_path):
    p = copy(fixture(fixtures, "k2_testnet").weights, tmp_path)
    with h5py.File(p, "a") as f:
        names = [n.decode() if isinstance(n, bytes) else n for n in f["model_weights"].attrs["layer_names"]]
        f["model_weights"].attrs["layer_names"] = np.array([n.encode() for n in names[:-1]] + [b"max_poo\xe9ing"])
    raises(ModelFileError, p, "not UTF-8")


def test_empty_and_duplicate_names(fixtures, tmp_path):
    """Empty names are named by position; duplicates in a Sequential model load by order (as Keras)."""
    fx = fixture(fixtures, "k3_testnet")
    p = copy(fx.weights, tmp_path)
    edit_config(
        p, lambda c: (layer_cfg(c, "d1")["config"].update(name=""), layer_cfg(c, "p1")["config"].update(name="c1"))
    )
    spec = lenet.load(p).spec
    assert [l.name for l in spec.layers][2:6] == ["c1", "p2", "fl", "#6"]
