"""The Python API on the shipped default weights: inputs of every kind, results,
errors, devices, threads."""

import warnings

import cv2
import numpy as np
import pytest
from conftest import REPO, check_concurrent_calls

import lenet


@pytest.fixture(scope="module")
def engine():
    return lenet.Engine(device="cpu")


@pytest.fixture(scope="module")
def digits():
    """64 MNIST-style digits with their labels: the shipped examples, shifted so that
    the copies differ (the API tests need no MNIST test set)."""
    paths = sorted((REPO / "examples").glob("digit-*.png"))
    assert len(paths) == 10
    base = np.stack([cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in paths])
    images = np.concatenate(
        [
            np.roll(base, (dy, dx), axis=(1, 2))
            for dy, dx in [(0, 0), (1, 0), (0, 1), (-1, 0), (0, -1), (1, 1), (-1, -1)]
        ]
    )[:64]
    labels = np.tile(np.arange(10), 7)[:64]
    return images, labels


def png_bytes(img):
    ok, buf = cv2.imencode(".png", img)
    assert ok
    return buf.tobytes()


def test_default_engine_describes_itself(engine):
    assert engine.device == "cpu"
    assert engine.classes == 10
    assert engine.model.input_shape == engine.input_shape == (None, 28, 28, 1)
    printed = []
    assert engine.summary(print_fn=printed.append) is None  # as Keras' model.summary()
    (text,) = printed
    for name in ("conv2d", "max_pooling2d", "dense", "total parameters"):
        assert name in text


def test_precision_is_exact_unless_fast_is_asked_and_says_what_fast_costs(digits):
    # Issue 74: lenet-tf's second layer is a Winograd F(4x4, 5x5) convolution, in double by
    # default; precision="fast" runs it in float32 and summary() says what that costs.
    images = digits[0][:16]
    exact = lenet.Engine("lenet-tf", device="cpu", threads=1)
    fast = lenet.Engine("lenet-tf", device="cpu", threads=1, precision="fast")
    assert exact.describe()["precision"] == "exact" and fast.describe()["precision"] == "fast"
    steps = {
        p: [s for s in e.describe()["steps"] if s["algorithm"] == "winograd"]
        for p, e in [("exact", exact), ("fast", fast)]
    }
    assert [s["precision"] for s in steps["exact"]] == ["exact"] and [s["precision"] for s in steps["fast"]] == ["fast"]
    assert "precision=fast" in fast.summary_text() and "float64" in fast.summary_text()
    assert "precision=exact" in exact.summary_text() and "float64" not in exact.summary_text()
    x = images.astype(np.float32)[..., None] / 255
    p_exact, p_fast = exact.predict_proba(x), fast.predict_proba(x)
    np.testing.assert_allclose(p_fast, p_exact, atol=1e-5)  # the same answers, less exactly
    assert not np.array_equal(p_fast, p_exact)
    with pytest.raises(lenet.InputError, match="precision must be 'exact' or 'fast', not 'half'"):
        lenet.Engine("lenet5", device="cpu", precision="half")
    with pytest.raises(lenet.InputError, match="precision must be a string"):
        lenet.Engine("lenet5", device="cpu", precision=None)


def test_shipped_models_load():
    for name in lenet.SHIPPED_MODELS:
        m = lenet.load(name)
        assert m.classes == 10 and m.input_shape == (None, 28, 28, 1) and m.image_shape == (28, 28, 1)
        assert abs(m.input_scale - 1 / 255) < 1e-9


def test_infer_array_single_and_batch(engine, digits):
    images, labels = digits
    r = engine.infer(images[0])
    assert isinstance(r, lenet.Result)
    assert r.probabilities.dtype == np.float32 and r.probabilities.shape == (10,)
    assert abs(float(r.probabilities.sum()) - 1) < 1e-5
    assert r.digit == int(np.argmax(r.probabilities)) == labels[0]
    batch = engine.infer(images)
    assert isinstance(batch, list) and len(batch) == 64
    assert [b.digit for b in batch][:1] == [r.digit]
    np.testing.assert_allclose(batch[0].probabilities, r.probabilities, atol=1e-6)
    assert np.mean([b.digit == l for b, l in zip(batch, labels)]) > 0.95


def test_every_input_kind_gives_the_same_answer(engine, digits, tmp_path):
    img = digits[0][3]
    path = tmp_path / "d.png"
    cv2.imwrite(str(path), img)
    want = engine.infer(img).probabilities
    variants = [
        str(path),
        path,
        png_bytes(img),
        bytearray(png_bytes(img)),
        img.astype(np.float32) / 255,
        img.astype(np.float64),  # [0, 1] floats, and 0..255 floats
        img[:, :, None],
        np.repeat(img[:, :, None], 3, axis=2),  # (H, W, 1), RGB
        np.dstack([np.repeat(img[:, :, None], 3, axis=2), np.full((28, 28), 255, np.uint8)]),  # opaque RGBA
        (img.astype(np.uint16) * 257),  # 16-bit
    ]
    for v in variants:
        got = engine.infer(v)
        assert isinstance(got, lenet.Result)
        np.testing.assert_allclose(got.probabilities, want, atol=2e-5, err_msg=f"{type(v)}")


def test_lists_and_batches(engine, digits, tmp_path):
    images = digits[0][:5]
    path = tmp_path / "x.png"
    cv2.imwrite(str(path), images[0])
    out = engine.infer([str(path), png_bytes(images[1]), images[2], images[3:5]])
    assert [r.source for r in out] == [str(path), "<input 1>", "<input 2>", "<input 3>[0]", "<input 3>[1]"]
    want = engine.infer(images)
    assert [r.digit for r in out] == [r.digit for r in want]
    assert engine.infer([]) == []
    four_d = engine.infer(images[:, :, :, None])
    assert [r.digit for r in four_d] == [r.digit for r in want]


def test_resizes_other_sizes(engine, digits):
    img = digits[0][0]
    big = cv2.resize(img, (112, 112), interpolation=cv2.INTER_CUBIC)
    assert engine.infer(big).digit == engine.infer(img).digit


def test_predict_proba_matches_infer(engine, digits):
    images = digits[0][:10]
    x = images.astype(np.float32)[..., None] / 255
    p = engine.predict_proba(x)
    assert p.shape == (10, 10) and p.dtype == np.float32
    np.testing.assert_allclose(p, np.stack([r.probabilities for r in engine.infer(images)]), atol=1e-6)
    np.testing.assert_allclose(engine.predict_proba(x[0]), p[:1], atol=1e-7)  # one image without batch axis
    assert engine.predict_proba(np.zeros((0, 28, 28, 1), np.float32)).shape == (0, 10)
    # Non-contiguous views and read-only arrays are fine.
    ro = np.array(x)
    ro.setflags(write=False)
    np.testing.assert_allclose(engine.predict_proba(ro), p, atol=1e-7)
    np.testing.assert_allclose(engine.predict_proba(np.asfortranarray(x)), p, atol=1e-7)


def test_module_level_infer_reuses_engine(digits):
    # The default model's engine (other tests of the process may have made engines of other
    # weights or options, or this one already): at most one, made by the first call, and the
    # very one the second call uses.
    before = dict(lenet.default_engine._default_engines)
    r1 = lenet.infer(digits[0][0], device="cpu")
    after_first = dict(lenet.default_engine._default_engines)
    assert len(after_first) - len(before) <= 1
    assert all(after_first[k] is e for k, e in before.items())
    r2 = lenet.infer(digits[0][0], device="cpu")
    assert lenet.default_engine._default_engines == after_first  # no new engine, not even an equal one
    assert all(lenet.default_engine._default_engines[k] is e for k, e in after_first.items())
    assert r1.digit == r2.digit


@pytest.mark.parametrize(
    "bad,match",
    [
        (np.zeros((2, 28, 28, 1), np.float32), "shape"),
        (np.zeros((5, 28, 28), np.float32), "shape"),
        (np.zeros((5, 28, 29, 1), np.float32), "shape"),
        ([[1.0]], "shape"),  # a list is an array to Keras too: of the wrong shape here
        ("digit.png", "NumPy array"),
        (np.zeros((1, 28, 28, 1), np.complex64), "dtype"),
    ],
)
def test_predict_proba_rejects_wrong_arrays(engine, bad, match):
    if isinstance(bad, np.ndarray) and bad.shape == (2, 28, 28, 1):
        bad = bad.transpose(0, 3, 1, 2)  # NCHW given to an NHWC model
    with pytest.raises(lenet.InputError, match=match):
        engine.predict_proba(bad)


@pytest.mark.parametrize(
    "bad,match",
    [
        (np.full((28, 28), np.nan, np.float32), "NaN"),
        (np.full((28, 28), -1.0, np.float32), "negative"),
        (np.full((28, 28), 300.0, np.float32), "up to"),
        (np.zeros((28, 28), bool), "dtype"),
        (np.zeros((28, 28), np.complex64), "dtype"),
        (np.array([object()] * 4).reshape(2, 2), "object"),
        (np.zeros((2, 2, 2, 2, 2)), "shape"),
        (np.zeros(28), "shape"),
        (12345, "int"),
        (b"", "empty"),
        (b"not an image at all", "decode"),
    ],
)
def test_infer_rejects_bad_images(engine, bad, match):
    with pytest.raises(lenet.InputError, match=match):
        engine.infer(bad)


def test_infer_file_errors_name_the_file(engine, tmp_path):
    with pytest.raises(lenet.InputError, match="no such file"):
        engine.infer(str(tmp_path / "missing.png"))
    with pytest.raises(lenet.InputError, match="directory"):
        engine.infer(str(tmp_path))
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(lenet.InputError, match="junk.png"):
        engine.infer(str(junk))


def test_engine_argument_errors():
    with pytest.raises(lenet.InputError, match="device"):
        lenet.Engine(device="tpu")
    with pytest.raises(lenet.InputError, match="threads"):
        lenet.Engine(device="cpu", threads=0)
    with pytest.raises(lenet.ModelFileError):
        lenet.Engine("/nonexistent/model.h5", device="cpu")


def test_errors_are_typed():
    assert issubclass(lenet.ModelFileError, lenet.ModelError)
    assert issubclass(lenet.UnsupportedModelError, lenet.Error)
    assert issubclass(lenet.InputError, ValueError)
    assert issubclass(lenet.CudaError, lenet.Error)


def test_cuda_status_with_or_without_a_gpu():
    """What a user sees of the GPU, either way: with one, the engines run there and info()
    names it; without one, a typed error for device='cuda' and the CPU for 'auto'."""
    assert isinstance(lenet.cuda_built(), bool)
    assert isinstance(lenet.cuda_available(), bool)
    info = lenet.info()
    assert info["version"] == lenet.__version__ and "cpu" in info["backends_built"]
    if lenet.cuda_available():
        assert lenet.cuda_built() and "cuda" in info["backends_built"]
        assert info["gpu"] and info.get("gpu_error") is None, info
        assert lenet.Engine(device="cuda").device == "cuda"
        assert lenet.Engine(device="auto").device == "cuda"
        return
    if lenet.cuda_built():  # the backend is there: info says why it cannot run
        assert info["gpu"] is None and info["gpu_error"], info
    with pytest.raises(lenet.CudaError, match="CUDA"):
        lenet.Engine(device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's one warning: tests/cuda/test_cuda.py checks it
        assert lenet.Engine(device="auto").device == "cpu"


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_thread_counts_agree(digits, threads):
    x = digits[0].astype(np.float32)[..., None] / 255
    ref = lenet.Engine(device="cpu", threads=1).predict_proba(x)
    eng = lenet.Engine(device="cpu", threads=threads)
    assert eng.threads == threads
    np.testing.assert_allclose(eng.predict_proba(x), ref, atol=1e-6)


def test_concurrent_callers_get_their_own_answers(engine, digits):
    x = digits[0].astype(np.float32)[..., None] / 255
    check_concurrent_calls(
        engine.predict_proba,
        x,
        [1, 3, 64, 17, 2, 40, 1, 9],
        30,
        lambda got, want: np.testing.assert_allclose(got, want, atol=1e-6),
    )


def test_a_closed_engine_says_so_when_used():
    x = np.zeros((3, 28, 28, 1), np.float32)
    with lenet.Engine("lenet5", device="cpu", threads=2) as eng:
        assert not eng.closed
        assert eng.predict_proba(x).shape == (3, 10)
    assert eng.closed and eng.threads == 2 and "lenet5" in repr(eng)
    for use in (lambda: eng.predict_proba(x), lambda: eng.predict(x), lambda: eng.infer(x[0, :, :, 0]), eng.describe):
        with pytest.raises(lenet.Error, match="is closed"):
            use()
    eng.close()  # idempotent


def test_engines_open_at_exit_are_closed_before_the_interpreter_tears_down():
    """atexit closes every open engine (on CUDA: handles, streams, graphs and memory
    released in order while the runtime is up). A handler registered before lenet's
    runs after it (atexit is last in, first out) and sees them closed."""
    import subprocess
    import sys

    code = (
        "import atexit\n"
        "seen = {}\n"
        "atexit.register(lambda: print('closed at exit:', [e.closed for e in seen['engines']]))\n"
        "import numpy as np, lenet\n"
        "seen['engines'] = [lenet.Engine(n, device='cpu') for n in ('lenet5', 'lenet-keras')]\n"
        "seen['engines'][0].predict_proba(np.zeros((3, 28, 28, 1), np.float32))\n"
        "lenet.infer(np.zeros((28, 28), np.uint8), device='cpu')\n"  # the default engine too
        "print('open:', [e.closed for e in seen['engines']])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "open: [False, False]" in out.stdout and "closed at exit: [True, True]" in out.stdout, out.stdout
    assert not out.stderr.strip(), out.stderr[-2000:]
