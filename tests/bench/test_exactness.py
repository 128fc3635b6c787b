"""lenet-bench's float64 column (lenet.bench.exactness, issue 74): its float64 evaluation of a
model's layer records is Keras' own float64 twin of the file (tests/models/float64_reference.py),
its rounding scale the same, and a distance says what it measures."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.keras_reference
import keras_zoo as kz  # noqa: E402
from float64_reference import float32_rounding  # noqa: E402
from keras_fixtures import keras_model, load_mnist_test  # noqa: E402

import lenet  # noqa: E402
from lenet.bench import exactness  # noqa: E402
from lenet.bench.netgraph import NotRebuilt  # noqa: E402

ZOO_CASES = ("bn_trained", "bn_branch", "residual", "act_tanh", "gap", "lenet5_classic")


def _same(spec, model, x):
    exact, sigma = exactness.float64_reference(spec, x)
    twin_exact, twin_sigma = float32_rounding(model, x, lenet.Model(spec).network.output_kind)
    np.testing.assert_allclose(exact, twin_exact, rtol=0, atol=1e-10)  # float64 orders: ~1e-12 apart
    np.testing.assert_allclose(sigma, twin_sigma, rtol=1e-3)  # the same terms (LeNet-5 classic: 5e-4 apart)


@pytest.mark.parametrize("name", ["lenet5", "lenet-keras", "lenet-tf"])
def test_the_float64_evaluation_is_keras_own_twin_on_the_shipped_models(name):
    path = lenet.shipped_weights(name).with_suffix(".h5")
    x = (load_mnist_test(64)[0].astype(np.float32) / np.float32(255))[..., None]
    _same(lenet.load(path).spec, keras_model(path), x)


def test_the_float64_evaluation_is_keras_own_twin_on_the_zoo():
    # Batch norms of trained statistics, a residual Add, tanh, a global average pool, LeNet-5's
    # tanh and average pools: the records walked in float64 give Keras' numbers and the same
    # scale. (Keras' twin of a channels_first model cannot run on a CPU: test_exactness_contract.py
    # holds those to Keras' recorded answers.)
    zoo = kz.get_zoo(only=ZOO_CASES)
    models = [z for z in zoo.values() if z.case in ZOO_CASES and z.form == "h5" and z.framework == "keras3"]
    assert {z.case for z in models} == set(ZOO_CASES)
    for z in models:
        _same(lenet.load(z.path).spec, keras_model(z.path), z.x)


def test_a_distance_is_in_units_of_the_rounding_scale():
    exact = np.array([[0.25, 0.75], [0.5, 0.5]])
    sigma = np.full_like(exact, 1e-7)
    d = exactness.distance(exact + [[2e-7, -2e-7], [0, 0]], exact, sigma)
    assert d["f64_max_abs"] == pytest.approx(2e-7) and d["f64_max_units"] == pytest.approx(2)
    assert d["f64_rms_units"] == pytest.approx(np.sqrt(2))  # sqrt((4 + 4 + 0 + 0) / 4)
    assert exactness.distance(exact[:1], exact, sigma)["f64_rms_units"] is None  # another shape
    assert exactness.distance(exact, None, None)["f64_max_abs"] is None


def test_the_contract_has_a_floor_where_the_reference_is_nearer_than_one_rounding():
    ref = {"f64_rms_units": 0.2, "f64_max_units": 0.8}
    assert exactness.within_contract({"f64_rms_units": 0.9, "f64_max_units": 7.9}, ref)  # within 1 / 8
    assert not exactness.within_contract({"f64_rms_units": 1.1, "f64_max_units": 3.0}, ref)
    far = {"f64_rms_units": 2.0, "f64_max_units": 9.0}
    assert exactness.within_contract({"f64_rms_units": 2.9, "f64_max_units": 17.9}, far)
    assert not exactness.within_contract({"f64_rms_units": 3.1, "f64_max_units": 10}, far)


def test_a_layer_it_does_not_evaluate_is_named():
    zoo = kz.get_zoo(only={"prelu"})
    z = next(z for z in zoo.values() if z.case == "prelu" and z.form == "h5")
    with pytest.raises(NotRebuilt, match="no float64 evaluation of layer .*prelu"):
        exactness.float64_reference(lenet.load(z.path).spec, z.x)


def test_float32_probabilities_make_logits_a_float32_softmax():
    y = np.array([[1.0, 2.0, 3.0]], np.float32)
    p = exactness.float32_probabilities(y, "scores")
    assert p.dtype == np.float32 and abs(float(p.sum()) - 1) < 1e-6
    np.testing.assert_array_equal(exactness.float32_probabilities(np.log(p), "log_softmax"), np.exp(np.log(p)))
