"""infer's short ways (issue 54) give the general path's answer to the bit: one uint8 digit of
the model's size goes straight to the core (Engine._pixel_array), and one PNG file takes
the core's PNG lane as a folder of them does."""

from __future__ import annotations

import sys

import cv2
import numpy as np
import pytest

import lenet
from lenet.images import prepare

MODELS = ("lenet5", "lenet-keras")


@pytest.fixture(scope="module")
def digits(mnist_test):
    return mnist_test[0][:200]


def _general(engine, image, mode="auto"):
    """The answer of the general path: prepare, row_probabilities, results, as for a list."""
    got = prepare([image], ["<array>"], engine.image_shape, mode, 1)
    assert not got.errors and got.single
    (r,) = lenet.results.results(got.rows, engine.row_probabilities(got.rows.x))
    return r


def _same(a, b):
    assert (a.digit, a.source, a.mode) == (b.digit, b.source, b.mode)
    assert a.probabilities.tobytes() == b.probabilities.tobytes()
    assert not a.probabilities.flags.writeable
    assert np.array_equal(a.image, b.image)


@pytest.mark.parametrize("name", MODELS)
def test_one_uint8_digit_gets_the_general_paths_answer(digits, name):
    engine = lenet.Engine(name, device="cpu", threads=1)
    for image in digits:
        _same(engine.infer(image), _general(engine, image))
    views = [
        digits[0][:, :, None],  # (h, w, 1)
        np.asfortranarray(digits[1]),  # not C-contiguous
        np.ascontiguousarray(digits[2][::-1, :])[::-1, :],  # a negative-stride view
        255 - digits[3],  # dark on white paper: a clean drawing, read as its negative
        np.minimum(255 - digits[3], 200),  # dark on gray paper: the photo path
    ]
    for image in views:
        _same(engine.infer(image), _general(engine, image))
    light = 255 - digits[4]
    _same(engine.infer(light, mode="mnist"), _general(engine, light, "mnist"))
    assert engine.infer(light, mode="mnist").mode == "mnist"
    assert engine.infer(light, mode="photo").mode == "photo"
    # Issue 64: a clean drawing dark on light is read as the digit light on dark is (it took the
    # photo path at 50-100x the time).
    drawn, negative = engine.infer(light), engine.infer(digits[4])
    assert drawn.mode == "mnist" and drawn.probabilities.tobytes() == negative.probabilities.tobytes()
    assert np.array_equal(drawn.image, digits[4])
    assert engine.infer(np.minimum(light, 200)).mode == "photo"


def test_one_uint8_digit_does_not_go_through_prepare(digits, monkeypatch):
    engine = lenet.Engine("lenet5", device="cpu", threads=1)

    def general(*args, **kwargs):
        raise AssertionError("the general path")

    monkeypatch.setattr(lenet.engine, "prepare", general)
    assert engine.infer(digits[0]).mode == "mnist"
    assert engine.infer(255 - digits[0]).mode == "mnist"  # a clean drawing dark on light
    assert [r.mode for r in engine.infer(digits[:64])] == ["mnist"] * 64  # a batch
    with pytest.raises(AssertionError, match="the general path"):
        engine.infer(np.minimum(255 - digits[0], 200))  # dark on gray: a photo
    with pytest.raises(AssertionError, match="the general path"):
        engine.infer(np.stack([digits[0], 255 - digits[1]]))  # a batch not all MNIST-like


@pytest.mark.parametrize("name", MODELS)
def test_a_uint8_batch_gets_the_general_paths_answers(digits, name):
    """Issue 64: infer on a (64, 28, 28) uint8 batch went through prepare and built 64 Results
    of their own (1.9x / 2.3x predict_proba); it now gives the same answers from one core
    call and one batch of Results over its probabilities."""
    engine = lenet.Engine(name, device="cpu", threads=1)
    batch = digits[:64]
    for x in (batch, batch[..., None], np.asfortranarray(batch), digits[64:128:1], batch[:1]):
        got = prepare([x], ["<array>"], engine.image_shape, "auto", 1)
        general = lenet.results.results(got.rows, engine.row_probabilities(got.rows.x))
        fast = engine.infer(x)
        assert isinstance(fast, list) and len(fast) == len(general) == len(x)
        for a, b in zip(fast, general):
            _same(a, b)
    r = engine.infer(batch)[5]
    assert r.source == "<array>[5]" and not r.several_digits and isinstance(r, lenet.Result)
    plain = lenet.Result(r.digit, r.probabilities, r.source, r.mode)
    assert r == plain and hash(r) == hash(plain) and {r, plain} == {r}
    import pickle

    back = pickle.loads(pickle.dumps(r))
    assert back == r and np.array_equal(back.image, r.image) and type(back) is lenet.Result
    with pytest.raises(AttributeError, match="immutable"):
        r.digit = 3
    assert repr(r) == repr(plain) and r.top(2) == plain.top(2) and r.confidence == plain.confidence


def test_the_short_way_refuses_what_the_general_path_refuses(digits):
    engine = lenet.Engine("lenet5", device="cpu", threads=1)
    with pytest.raises(lenet.InputError, match="unknown mode"):
        engine.infer(digits[0], mode="fast")
    with pytest.raises(lenet.InputError, match="channel_order"):
        engine.infer(digits[0], channel_order="grb")
    engine.close()
    with pytest.raises(lenet.Error, match="closed"):
        engine.infer(digits[0])


def test_a_model_that_normalizes_its_pixels_takes_the_general_path(digits):
    engine = lenet.Engine("lenet5", device="cpu", threads=1, mean=0.1307, std=0.3081)
    assert engine._pixel_shapes == ()
    _same(engine.infer(digits[0]), _general(engine, digits[0]))


def test_one_png_file_takes_the_cores_lane_with_the_same_answer(digits, tmp_path, monkeypatch):
    engine = lenet.Engine("lenet5", device="cpu", threads=1)
    if not lenet._core.png_decoder:
        pytest.skip("libpng's headers were not there when lenet was built (libpng-dev): no PNG lane")
    paths = []
    for i, image in enumerate(digits[:20]):
        paths.append(tmp_path / f"{i}.png")
        cv2.imwrite(str(paths[-1]), image)
    for path, image in zip(paths, digits):
        got = engine.infer(str(path))
        want = engine.infer(image)  # the same pixels, decoded by OpenCV
        assert got.source == str(path) and got.mode == want.mode == "mnist"
        assert got.probabilities.tobytes() == want.probabilities.tobytes()
    prepare_module = sys.modules["lenet.images.prepare"]  # lenet.images.prepare is also the function

    def opencv(*args, **kwargs):
        raise AssertionError("decoded by OpenCV")

    monkeypatch.setattr(prepare_module, "images_of", opencv)
    assert engine.infer(str(paths[0])).probabilities.tobytes() == engine.infer(digits[0]).probabilities.tobytes()
    many = engine.infer([str(p) for p in paths])
    assert [r.probabilities.tobytes() for r in many] == [engine.infer(str(p)).probabilities.tobytes() for p in paths]
    with pytest.raises(lenet.InputFileNotFoundError, match="no such file"):
        engine.infer(str(tmp_path / "missing.png"))
