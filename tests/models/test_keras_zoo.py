"""The engine against Keras on the models real MNIST code writes (issue 13).

* The zoo (tests/models/keras_zoo.py): MLPs on (784,) and (28, 28) inputs, Reshape,
  BatchNormalization in every position, output heads other than softmax,
  preprocessing layers, global pooling, every activation, depthwise, separable,
  dilated and grouped convolutions, cropping, channels_first models, residual and
  two-branch functional models, nested models, written by Keras 3 and tf_keras in
  every file form (.h5, .keras, weights + JSON, and tf.keras' Windows .keras).
  ``predict`` must give Keras' outputs within 1e-5 with the same argmax, on the
  CPU's own kernels and on the BLAS reference path; ``predict_proba`` the
  documented distribution; ``infer`` on MNIST digits what ``predict_proba`` gives.
* Keras 1 files (tests/models/keras1_files.py): the same, or a precise refusal.
* Every layer class of Keras 3 (the walker): parity, or an UnsupportedModelError
  naming the layer and the file; the classes lenet supports must give parity.

Without Keras this module skips. With it, a model the zoo cannot build fails its test with the
reason (Zoo.require), and a module that a layer class needs and that is missing stops the
collection, naming it: the tests' dependencies are pyproject.toml's test extra, so no case
here skips or vanishes for want of one (issue 32). A class this Keras does not have skips.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytestmark = pytest.mark.keras_reference  # CI runs these with TensorFlow's oneDNN off and on

import keras1_files as k1  # noqa: E402
import keras_zoo as kz  # noqa: E402
from keras_fixtures import MNIST_DIR, decisive_rows, distribution  # noqa: E402

import lenet  # noqa: E402
from lenet.keras import layers as keras_layers  # noqa: E402

_missing = kz.missing_layer_modules()
if _missing:
    raise RuntimeError(
        "the Keras layer walker cannot build "
        + ", ".join(f"{cls} without {mod}" for cls, mod in _missing.items())
        + ", which is not installed: the tests' "
        "dependencies are pyproject.toml's test extra (pip install '.[test]')"
    )

TOL = 1e-5
# "nchw": the CUDA backend's layout and decisions on the CPU (issue 14): the GPU path, checked here.
KERNELS = ["auto", "blas", "nchw"]


def assert_parity(got, want, what):
    got = np.asarray(got)
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, Keras {want.shape}"
    diff = np.abs(got.astype(np.float64) - want)
    worst = np.unravel_index(int(diff.argmax()), diff.shape)
    assert diff.max() <= TOL, f"{what}: max abs difference {diff.max():.3g} at {worst}"
    if want.ndim == 2:
        decisive = decisive_rows(want, TOL)
        wrong = np.flatnonzero(decisive & (got.argmax(1) != want.argmax(1)))
        assert wrong.size == 0, f"{what}: argmax differs from Keras on rows {wrong[:10].tolist()}"


@pytest.fixture(scope="session")
def zoo():
    return kz.get_zoo()


@pytest.mark.parametrize("case", list(kz.CASES))
def test_zoo_parity(zoo, case):
    zoo.require(f"k3_{case}", f"k2_{case}")
    models = [z for z in zoo.values() if z.case == case]
    assert models, f"no model built for {case}"
    for z in models:
        for kernels in KERNELS:
            what = f"{z.name} ({kernels})"
            eng = lenet.Engine(z.path, device="cpu", arch=z.arch, cpu_kernels=kernels)
            assert eng.input_shape == (None,) + tuple(z.input_shape), what
            assert_parity(eng.predict(z.x), z.expected, what)
            if z.expected.ndim == 2:
                kind = eng.model._network.output_kind
                p = eng.predict_proba(z.x)
                np.testing.assert_allclose(p, distribution(z.expected, kind), atol=TOL, err_msg=what)
                np.testing.assert_allclose(p.sum(axis=1), 1, atol=1e-5, err_msg=what)


@pytest.mark.parametrize(
    "case", ["mlp784", "mlp2d", "reshape_cnn", "cf_cnn", "rescale_cnn", "norm_const", "head_sigmoid", "mlp784_logits"]
)
def test_infer_feeds_each_model_its_own_input_form(zoo, case):
    """infer on 28x28 MNIST digits (uint8, MNIST-like): each model gets its own input form and scale."""
    z = next((z for z in zoo.values() if z.case == case and z.mnist), None)
    if z is None:
        pytest.skip(f"MNIST test set not found in {MNIST_DIR}")
    eng = lenet.Engine(z.path, device="cpu", arch=z.arch)
    digits = np.rint(z.x[:64].reshape(64, 28, 28) / (1.0 if eng.input_scale == 1.0 else eng.input_scale))
    results = eng.infer(digits.astype(np.uint8), mode="mnist")
    got = np.stack([r.probabilities for r in results])
    np.testing.assert_allclose(got, eng.predict_proba(z.x[:64]), atol=1e-6)
    assert [r.digit for r in results] == list(got.argmax(1))


# ------------------------------------------------------------------ Keras 1

REFUSED_K1 = {"k1_th_theano_same_s2": ("Theano", "'convolution2d_1'"), "k1_merge": ("Merge", "'merge_1'")}


@pytest.fixture(scope="session")
def keras1(tmp_path_factory):
    return k1.build_keras1(tmp_path_factory.mktemp("keras1"))


@pytest.mark.parametrize("case", list(k1.CASES))
def test_keras1_files(keras1, case):
    f = keras1[case]
    if case in REFUSED_K1:
        with pytest.raises(lenet.UnsupportedModelError) as info:
            lenet.Engine(f.path, device="cpu", arch=f.arch)
        for frag in REFUSED_K1[case] + (str(f.path),):
            assert frag in str(info.value)
        return
    eng = lenet.Engine(f.path, device="cpu", arch=f.arch)
    assert eng.input_shape == (None,) + tuple(f.input_shape)
    assert_parity(eng.predict(f.x), f.expected, case)


def test_keras1_th_kernels_for_a_channels_last_layer_are_refused_with_the_reason(keras1, tmp_path):
    """Keras 2 transposes a Keras 1 'th' kernel only into a channels_first layer (and fails
    on a channels_last one): the refusal says so, not just that the shapes differ."""
    f = keras1["k1_th_tf_weights_k2arch"]
    arch = tmp_path / "channels_last.json"
    arch.write_text(
        f.arch.read_text()
        .replace('"channels_first"', '"channels_last"')
        .replace("[null, 1, 28, 28]", "[null, 28, 28, 1]")
    )
    with pytest.raises(lenet.ModelFileError) as info:
        lenet.Engine(f.path, device="cpu", arch=arch)
    for frag in ("'conv2d'", "(32, 1, 3, 3)", "'th' layout", "channels_last", "data_format='channels_first'"):
        assert frag in str(info.value)


# ------------------------------------------------------------------ every Keras layer class

# Classes lenet runs (its converters, the identities at inference, their aliases).
SUPPORTED = set(keras_layers.CONVERTERS) | set(keras_layers.IDENTITIES) | set(keras_layers.ALIASES) | {"InputLayer"}


@pytest.fixture(scope="session")
def layer_zoo():
    return kz.get_layer_zoo()


def _layer_class(cls):
    if hasattr(keras.layers, cls):
        return cls
    return pytest.param(cls, marks=pytest.mark.skip(reason=f"keras {keras.__version__} has no keras.layers.{cls}"))


@pytest.mark.parametrize("cls", [_layer_class(c) for c, _ in kz.LAYER_CLASSES])
def test_every_keras_layer_class(layer_zoo, cls):
    layer_zoo.require(cls)
    z = layer_zoo[cls]
    try:
        eng = lenet.Engine(z.path, device="cpu", arch=z.arch)
    except lenet.UnsupportedModelError as e:
        msg = str(e)
        assert str(z.path) in msg, msg
        refused = re.search(r"layer '[^']*' \((\w+)\)", msg)
        assert refused, f"the refusal does not name the layer: {msg}"
        assert refused[1] not in SUPPORTED, f"{refused[1]} is supported but refused: {msg}"
        return
    assert_parity(eng.predict(z.x), z.expected, cls)


def test_the_layer_walker_covers_keras():
    assert kz.layer_coverage()["uncovered"] == []


def test_a_layer_class_the_zoo_cannot_build_fails_with_the_reason(tmp_path, monkeypatch):
    """Not a KeyError at use (issue 32): the builder's exception is the failure's message."""

    def needs_scipy(K):
        raise ImportError("This requires the scipy module. You can install it via `pip install scipy`")

    monkeypatch.setattr(kz, "LAYER_CLASSES", [("Dense", needs_scipy)])
    built = kz.build_layer_zoo(tmp_path, only={"Dense"})
    assert "Dense" not in built
    with pytest.raises(
        pytest.fail.Exception,
        match=r"Dense: .*ImportError: This requires the scipy module.*"
        r"pip install '\.\[test\]'",
    ):
        built.require("Dense")


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", list(kz.CASES))
def test_zoo_parity_on_the_gpu(zoo, case):
    """The same models on the CUDA backend (NCHW, cuDNN, cuBLAS and the small kernels)."""
    zoo.require(f"k3_{case}", f"k2_{case}")
    models = [z for z in zoo.values() if z.case == case]
    assert models, f"no model built for {case}"
    for z in models:
        eng = lenet.Engine(z.path, device="cuda", arch=z.arch)
        assert_parity(eng.predict(z.x), z.expected, f"{z.name} (cuda)")
