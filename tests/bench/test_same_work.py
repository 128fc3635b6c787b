"""lenet-bench times every contender doing the same work as lenet's row (issue 75): the timed
call goes from the same input array to probabilities made inside the engine, as lenet's
predict_proba makes them inside its own. Before, on a model ending in logits (or log-softmax,
or sigmoids), Keras', TensorFlow Lite's and ONNX Runtime's timed calls ended in a NumPy softmax
(16-20 us a call on a Zen 3) that lenet's did not pay: the table flattered lenet by as much."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow")
pytestmark = pytest.mark.keras_reference

import lenet  # noqa: E402
from lenet.bench import contenders as cs  # noqa: E402

ONNX = Path(__file__).resolve().parents[1] / "data" / "onnx"
# In-process CPU contenders that run here on a Keras file and on an ONNX file.
KERAS_ROWS = ["keras-predict", "keras-call", "tf-eager", "tf-function", "tflite", "onnxruntime", "torch-eager"]
ONNX_ROWS = ["onnxruntime"]


def _keras_file(tmp_path: Path, ending: str) -> Path:
    import keras

    layers = [keras.Input((28, 28, 1)), keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.Flatten()]
    if ending == "logits":
        layers.append(keras.layers.Dense(10))
    elif ending == "sigmoid":
        layers.append(keras.layers.Dense(10, activation="sigmoid"))
    model = keras.Sequential(layers)
    rng = np.random.default_rng(75)
    model.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.1 for w in model.get_weights()])
    path = tmp_path / f"{ending}.h5"
    model.save(path)
    return path


# What a NumPy softmax or a division by the sum calls: the bench's own code calling any of these
# on NumPy arrays during a timed call is post-processing lenet's row does not do (the same names
# called on a framework's tensors, torch.sum in a rebuilt network, are the engine's own work).
ARITHMETIC = {"exp", "log", "sum", "max", "divide", "true_divide", "softmax", "_over_sum"}


def _python_arithmetic(run, x) -> list:
    """Calls of ARITHMETIC made by lenet.bench's own code while run(x) runs: its Python functions
    of those names, and NumPy's functions and array methods (sys.setprofile sees the C functions
    and methods Python code calls: ndarray.sum, ndarray.max; not ufuncs such as np.exp, which a
    softmax calls beside max and sum)."""
    import sys

    seen = []

    def profile(frame, event, arg):
        here = "lenet/bench/" in frame.f_code.co_filename.replace("\\", "/")
        numpy = str(getattr(arg, "__module__", "")).startswith("numpy") or isinstance(
            getattr(arg, "__self__", None), np.ndarray
        )
        if event == "c_call" and here and numpy and getattr(arg, "__name__", "") in ARITHMETIC:
            seen.append(f"{arg.__name__} ({frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno})")
        elif event == "call" and here and frame.f_code.co_name in ARITHMETIC:
            seen.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        out = run(x)
    finally:
        sys.setprofile(None)
    return out, seen


def _timed_calls_make_their_own_probabilities(path: Path, names: list) -> int:
    """Builds each contender that runs here and checks its timed call: probabilities (lenet's,
    within 1e-5), and no arithmetic of the bench's own Python on the way. Returns how many ran."""
    x = (np.random.default_rng(1).integers(0, 256, (16, *lenet.load(path).input_shape[1:])) / 255).astype(np.float32)
    want = lenet.Engine(path, device="cpu", threads=1).predict_proba(x)
    cant = cs.setup(names)
    ran = 0
    for name in names:
        if name in cant:
            continue
        run = cs.CONTENDERS[name].build(cs.Ctx(path, 1))
        run(x)  # built and warm
        got, seen = _python_arithmetic(run, x)
        assert seen == [], f"{name}: the bench's own Python computes in the timed call: {seen}"
        got = np.asarray(got, np.float32).reshape(len(x), -1)
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=name)
        ran += 1
    return ran


def test_the_check_sees_a_numpy_softmax():
    # The check can fail: a run ending in the NumPy softmax every logits row had before is seen.
    def softmax(z):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    softmax.__code__ = softmax.__code__.replace(co_filename="/x/lenet/bench/registry.py")
    _, seen = _python_arithmetic(lambda x: softmax(x), np.ones((2, 3), np.float32))
    assert "softmax" in seen and any(s.startswith("sum") for s in seen), seen


@pytest.mark.parametrize("ending", ["logits", "sigmoid"])
def test_every_keras_file_row_makes_its_probabilities_inside_the_engine(tmp_path, ending):
    assert _timed_calls_make_their_own_probabilities(_keras_file(tmp_path, ending), KERAS_ROWS) >= 5


@pytest.mark.parametrize("name", ["mlp.onnx", "example_net.onnx", "sigmoid_head.onnx", "dynamo_no_batch.onnx"])
def test_onnx_runtime_on_a_file_makes_its_probabilities_inside_the_graph(name):
    # logits, log_softmax, sigmoids; a file with no batch axis
    pytest.importorskip("onnxruntime")
    assert _timed_calls_make_their_own_probabilities(ONNX / name, ONNX_ROWS) == 1
