"""The streaming pipeline (lenet.stream): Engine.infer_iter / lenet.infer_iter and infer
on any iterable. Order, errors in place, the same answers as a batch, bounded memory."""

import itertools
import json
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import REPO

import lenet

EXAMPLES = sorted((REPO / "examples").glob("digit-*.png"))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Good, missing, corrupt and blank inputs, with what each should give (a digit or
    the text of its error)."""
    d = tmp_path_factory.mktemp("mixed")
    corrupt = d / "corrupt.png"
    corrupt.write_bytes(EXAMPLES[3].read_bytes()[:60])
    blank = d / "blank.png"
    cv2.imwrite(str(blank), np.full((300, 400), 235, np.uint8))
    inputs, want = [], []
    for k in range(40):
        ex = EXAMPLES[k % 10]
        inputs.append(str(ex))
        want.append(int(ex.stem[-1]))
        if k % 9 == 4:
            inputs.append(str(d / f"missing-{k}.png"))
            want.append("no such file")
        if k % 13 == 6:
            inputs.append(str(corrupt))
            want.append("corrupt.png")
        if k % 17 == 8:
            inputs.append(str(blank))
            want.append("no digit found")
    return inputs, want


def _check(got, inputs, want):
    assert len(got) == len(inputs)
    for r, path, w in zip(got, inputs, want):
        if isinstance(w, int):
            assert isinstance(r, lenet.Result), (path, r)
            assert r.digit == w and r.source == path
        else:
            assert isinstance(r, lenet.InputError), (path, r)
            assert w in str(r) and r.source == path


@pytest.mark.parametrize("batch_size", [1, 3, None])
def test_order_and_errors_in_place(engine, mixed, batch_size):
    inputs, want = mixed
    _check(list(engine.infer_iter(iter(inputs), batch_size=batch_size)), inputs, want)


def test_the_same_answers_as_one_batch(engine, mnist_test):
    images = mnist_test[0][:600]
    batch = engine.infer(images, mode="mnist")
    streamed = list(engine.infer_iter((im for im in images), mode="mnist", batch_size=64))
    assert [r.digit for r in streamed] == [r.digit for r in batch]
    np.testing.assert_array_equal(
        np.stack([r.probabilities for r in streamed]), np.stack([r.probabilities for r in batch])
    )
    # A batch array streams too, image by image.
    again = list(engine.infer_iter(images, mode="mnist"))
    assert [r.source for r in again[:2]] == ["<input 0>", "<input 1>"]
    np.testing.assert_array_equal(again[-1].probabilities, batch[-1].probabilities)


def test_errors_raise_in_place(engine, mixed):
    inputs, want = mixed
    first_bad = next(i for i, w in enumerate(want) if not isinstance(w, int))
    got = []
    with pytest.raises(lenet.InputError, match="no such file") as info:
        for r in engine.infer_iter(inputs, errors="raise", batch_size=2):
            got.append(r)
    assert len(got) == first_bad and info.value.source == inputs[first_bad]
    assert all(isinstance(r, lenet.Result) for r in got)


def test_infer_takes_any_iterable(engine, mixed):
    inputs, want = mixed
    good = [p for p, w in zip(inputs, want) if isinstance(w, int)]
    results = engine.infer(p for p in good)
    assert [r.digit for r in results] == [w for w in want if isinstance(w, int)]
    errors = []
    results = engine.infer(iter(inputs), on_error=errors.append)
    assert len(results) == len(good)
    assert [e.source for e in errors] == [p for p, w in zip(inputs, want) if not isinstance(w, int)]
    with pytest.raises(lenet.InputError, match="no such file"):
        engine.infer(iter(inputs))
    assert engine.infer(iter([])) == []
    # Module-level forms, on the shared default engine.
    assert [r.digit for r in lenet.infer_iter(map(str, EXAMPLES), device="cpu")] == list(range(10))
    assert [r.digit for r in lenet.infer(map(str, EXAMPLES), device="cpu")] == list(range(10))


def test_bytes_arrays_and_paths_mixed(engine):
    img = cv2.imread(str(EXAMPLES[6]), cv2.IMREAD_GRAYSCALE)
    items = [EXAMPLES[6], EXAMPLES[6].read_bytes(), img, img.astype(np.float32) / 255]
    got = list(engine.infer_iter(items))
    assert [r.digit for r in got] == [6, 6, 6, 6]
    assert [r.source for r in got] == [str(EXAMPLES[6]), "<input 1>", "<input 2>", "<input 3>"]


def test_bad_options_are_refused_at_the_call(engine):
    with pytest.raises(lenet.InputError, match="errors"):
        engine.infer_iter([], errors="ignore")
    with pytest.raises(lenet.InputError, match="batch_size"):
        engine.infer_iter([], batch_size=0)
    with pytest.raises(lenet.InputError, match="mode"):
        engine.infer_iter([], mode="fast")
    with pytest.raises(lenet.InputError, match="cannot classify"):
        engine.infer_iter(42)


def test_stopping_early_leaves_the_engine_usable(engine):
    endless = itertools.cycle(map(str, EXAMPLES))
    stream = engine.infer_iter(endless, batch_size=16)
    first = list(itertools.islice(stream, 25))
    stream.close()
    assert [r.digit for r in first] == [k % 10 for k in range(25)]
    assert [r.digit for r in engine.infer_iter(map(str, EXAMPLES))] == list(range(10))


def test_a_failing_generator_raises_its_own_error(engine):
    def inputs():
        yield str(EXAMPLES[1])
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        list(engine.infer_iter(inputs()))


MEMORY_SCRIPT = r"""
import json, sys
import lenet
path, n = sys.argv[1], int(sys.argv[2])
eng = lenet.Engine("lenet5", device="cpu", threads=2)
digits = set()
for r in eng.infer_iter(path for _ in range(n)):
    digits.add(r.digit)
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, from pytest's process.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"peak_mib": hwm / 1024, "digits": sorted(digits)}))
"""


@pytest.fixture(scope="module")
def big_photo(tmp_path_factory):
    """A 12-megapixel JPEG photo of a digit on paper."""
    page = np.full((3000, 4000, 3), 215, np.uint8)
    page += np.random.default_rng(0).integers(0, 20, page.shape, dtype=np.uint8)
    digit = cv2.imread(str(EXAMPLES[4]), cv2.IMREAD_GRAYSCALE)
    ink = cv2.resize(digit, (1200, 1200), interpolation=cv2.INTER_CUBIC)
    page[900:2100, 1400:2600][ink > 100] = 30
    path = tmp_path_factory.mktemp("photo") / "photo.jpg"
    cv2.imwrite(str(path), page, [cv2.IMWRITE_JPEG_QUALITY, 90])
    return path


def _peak(path, n):
    out = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT, str(path), str(n)], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_memory_does_not_grow_with_the_number_of_inputs(big_photo):
    """Before the pipeline every decoded photo was kept until the end (+2.25 MB per photo
    decoded at a quarter of its size: +135 MB from 20 to 80 photos)."""
    few, many = _peak(big_photo, 20), _peak(big_photo, 80)
    assert few["digits"] == many["digits"] == [4]
    assert many["peak_mib"] - few["peak_mib"] < 40, (few, many)


def test_results_are_values(engine):
    """Equal when digit, probabilities (bit for bit), source and mode are; hashable;
    immutable; pickled and back equal."""
    import pickle

    a = engine.infer(str(EXAMPLES[5]))
    b = next(engine.infer_iter([str(EXAMPLES[5])]))
    c = engine.infer(str(EXAMPLES[6]))
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c}) == 2 and {a: 1}[b] == 1
    assert pickle.loads(pickle.dumps(a)) == a
    with pytest.raises(AttributeError):
        a.digit = 3
    with pytest.raises(ValueError):
        a.probabilities[0] = 1.0  # read-only: a value's contents do not change
    hand = lenet.Result(1, np.array([0.25, 0.75], np.float32))
    assert hand == lenet.Result(1, np.array([0.25, 0.75], np.float32)) and hand.confidence == 0.75
    assert hand != lenet.Result(1, np.array([0.25, 0.75], np.float32), source="x.png")


def test_images_of_the_model_size_in_mixed_forms(engine):
    """(28, 28) uint8 and (28, 28, 1) float32 images in one call: one array is made of them
    (np.asarray of the two forms raised a bare ValueError)."""
    img = cv2.imread(str(EXAMPLES[7]), cv2.IMREAD_GRAYSCALE)
    dark = 255 - img if np.median(img[0]) > 128 else img
    got = engine.infer([dark, dark[:, :, None].astype(np.float32) / 255, str(EXAMPLES[7])])
    assert [r.digit for r in got] == [7, 7, 7]
    np.testing.assert_allclose(got[0].probabilities, got[1].probabilities, atol=1e-6)
