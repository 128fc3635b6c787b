"""Parity of the lenet engine with Keras: every fixture of tests/models/keras_fixtures.py
and the three shipped models (MNIST digits from conftest's ``mnist_test``; those
tests skip visibly when the test set is absent).

The engine's ``predict`` must give Keras' outputs within 1e-5 (max abs) and the
same class; ``predict_proba`` (which turns logits into probabilities) is compared
with softmax(Keras output) for the models that end in logits.
"""

from __future__ import annotations

import numpy as np
import pytest

keras = pytest.importorskip("keras")
pytestmark = pytest.mark.keras_reference  # CI runs these with TensorFlow's oneDNN off and on

import keras_fixtures as kf  # noqa: E402
from keras_fixtures import FIXTURES, decisive_rows, fixture, fixtures, keras_predict, softmax  # noqa: E402, F401 (fixtures: a pytest fixture)

import lenet  # noqa: E402
from lenet.keras import SHIPPED_MODELS, shipped_weights  # noqa: E402

TOL = 1e-5
N_MNIST_FIXTURE = 200
N_MNIST_SHIPPED = 1000


def engine(weights, arch=None, kernels="auto"):
    return lenet.Engine(
        weights=str(weights), device="cpu", arch=None if arch is None else str(arch), cpu_kernels=kernels
    )


# The default CPU kernels, and the CUDA backend's layout and decisions run on the CPU.
KERNELS = ["auto", "nchw"]


def assert_parity(p, want, what):
    p = np.asarray(p)
    assert p.dtype == np.float32, f"{what}: dtype {p.dtype}"
    assert p.shape == want.shape, f"{what}: shape {p.shape}, Keras {want.shape}"
    diff = np.abs(p.astype(np.float64) - want)
    worst = int(diff.max(axis=1).argmax())
    assert diff.max() <= TOL, f"{what}: max abs difference {diff.max():.3g} (sample {worst})"
    mismatch = np.flatnonzero(decisive_rows(want, TOL) & (p.argmax(1) != want.argmax(1)))
    assert mismatch.size == 0, f"{what}: argmax differs from Keras on samples {mismatch[:10].tolist()}"


def keras_probabilities(y, logits):
    return softmax(y) if logits else np.asarray(y, dtype=np.float32)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", list(FIXTURES))
def test_parity_random_inputs(fixtures, name, kernels):
    fx = fixture(fixtures, name)
    eng = engine(fx.weights, fx.arch, kernels)
    assert_parity(eng.predict(fx.x), fx.expected, f"{name} ({len(fx.x)} random inputs, predict)")
    assert_parity(
        eng.predict_proba(fx.x),
        keras_probabilities(fx.expected, fx.logits),
        f"{name} ({len(fx.x)} random inputs, predict_proba)",
    )


def _mnist_input(fx, images):
    """Digits in the fixture's input shape, scaled as the model expects."""
    x = images.astype(np.float32) * np.float32(fx.pixel_scale)
    return np.ascontiguousarray(x.reshape((len(x),) + fx.x.shape[1:]))


@pytest.mark.parametrize("name", [n for n in FIXTURES if n not in ("k3_deep_dense_weights", "k2_deep_dense_weights")])
@pytest.mark.parametrize("kernels", KERNELS)
def test_parity_mnist_digits(fixtures, mnist_test, name, kernels):
    fx = fixture(fixtures, name)
    assert fx.x[0].size == 28 * 28
    x = _mnist_input(fx, mnist_test[0][:N_MNIST_FIXTURE])
    want = keras_probabilities(fx.reference(x), fx.logits)
    p = engine(fx.weights, fx.arch, kernels).predict_proba(x)
    assert_parity(p, want, f"{name} ({len(x)} MNIST digits)")


def test_parity_batch_of_one(fixtures):
    """A single image gives the same answer as inside a batch."""
    fx = fixture(fixtures, "k3_testnet")
    eng = engine(fx.weights, fx.arch)
    want = keras_probabilities(fx.expected[:3], fx.logits)
    for i in range(3):
        assert_parity(eng.predict_proba(fx.x[i : i + 1]), want[i : i + 1], f"k3_testnet image {i} alone")


_shipped_cache: dict = {}


def shipped_reference(name, images):
    """(engine input, Keras probabilities) of a shipped model on MNIST test digits
    scaled by 1/255. Keras loads each file once (load_model, compile=False)."""
    if name not in _shipped_cache:
        path = shipped_weights(name)
        model = kf.keras_model(path)
        keras_shape = (len(images),) + tuple(int(d) for d in model.inputs[0].shape[1:])  # (N, 28, 28, 1), ...
        x = np.ascontiguousarray((images.astype(np.float32) / np.float32(255)).reshape(keras_shape))
        y = keras_predict(model, x)
        logits = lenet.load(path)._network.output_kind != "softmax"
        _shipped_cache[name] = (x, keras_probabilities(y, logits=logits))
    return _shipped_cache[name]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_parity_shipped_model(mnist_test, name, kernels):
    x, want = shipped_reference(name, mnist_test[0][:N_MNIST_SHIPPED])
    p = engine(shipped_weights(name), kernels=kernels).predict_proba(x)
    assert_parity(p, want, f"shipped {name} ({len(x)} MNIST test digits)")
