"""What users of Keras, OpenCV, Pillow, scikit-learn and multiprocessing expect (issue 16):
Keras' names mean what Keras means, Pillow images and array-likes are inputs, BGR arrays
are said to be BGR, a missing file is a FileNotFoundError, an Engine pickles, and
``import lenet`` is light and changes nothing global."""

from __future__ import annotations

import concurrent.futures
import errno
import io
import json
import multiprocessing
import os
import pathlib
import pickle
import shutil
import subprocess
import sys
import typing

import cv2
import numpy as np
import pytest
from conftest import REPO

import lenet

EXAMPLES = sorted((REPO / "examples").glob("digit-*.png"))


@pytest.fixture(scope="module")
def engine():
    return lenet.Engine("lenet5", device="cpu", threads=2)


@pytest.fixture(scope="module")
def digit():
    return cv2.imread(str(EXAMPLES[7]), cv2.IMREAD_GRAYSCALE)


# ----------------------------------------------------------------- Keras' names


@pytest.mark.keras_reference
def test_predict_is_keras_predict(engine):
    from keras_fixtures import keras_model

    model = keras_model(lenet.shipped_weights("lenet5"))
    rng = np.random.default_rng(3)
    x = rng.random((37, 28, 28, 1), dtype=np.float32)
    want = np.asarray(model.predict(x, verbose=0))
    np.testing.assert_allclose(engine.predict(x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(engine.predict(x, batch_size=8, verbose=0), want, rtol=1e-5, atol=1e-6)
    # Keras converts other dtypes to float32 as they are (no scaling): so does predict.
    u8 = (x * 3).astype(np.uint8)
    np.testing.assert_allclose(engine.predict(u8), np.asarray(model.predict(u8, verbose=0)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(engine.predict(x.astype(np.float64)), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(engine.predict(x[:2].tolist()), want[:2], rtol=1e-5, atol=1e-6)
    assert engine.input_shape == tuple(model.input_shape) == (None, 28, 28, 1)
    assert engine.output_shape == tuple(model.output_shape) == (None, 10)


def test_predict_refuses_what_keras_refuses(engine):
    with pytest.raises(lenet.InputError, match=r"expected an array of shape \(n, 28, 28, 1\)"):
        engine.predict(np.zeros((28, 28, 1), np.float32))  # Keras wants the batch axis too
    with pytest.raises(lenet.InputError, match="not an array of numbers"):
        engine.predict([[1, 2], [3]])
    with pytest.raises(lenet.InputError, match="takes a NumPy array"):
        engine.predict("digit.png")


def test_call_is_infer_and_predict_proba_is_the_sklearn_name(engine, digit):
    assert engine(str(EXAMPLES[7])) == engine.infer(str(EXAMPLES[7]))
    assert engine([digit, digit], mode="mnist") == engine.infer([digit, digit], mode="mnist")
    x = digit[None, :, :, None].astype(np.float32) * np.float32(engine.input_scale)  # as infer scales
    np.testing.assert_array_equal(engine.predict_proba(x)[0], engine.infer(digit, mode="mnist").probabilities)


@pytest.mark.skipif(not hasattr(typing, "get_overloads"), reason="typing.get_overloads needs Python 3.11")
def test_infer_says_what_comes_back():
    for fn in (lenet.Engine.infer, lenet.infer):
        returns = [typing.get_type_hints(o, globalns=vars(lenet.engine))["return"] for o in typing.get_overloads(fn)]
        assert returns[:2] == [lenet.Result, list[lenet.Result]], fn


def test_results_are_values_in_sets_and_dicts(engine):
    a, b = engine.infer([str(EXAMPLES[1]), str(EXAMPLES[1])])
    c = engine.infer(str(EXAMPLES[2]))
    assert a == b and hash(a) == hash(b) and a != c
    assert len({a, b, c}) == 2 and {a: "one"}[b] == "one"
    assert pickle.loads(pickle.dumps(a)) == a


def test_a_number_asked_for_as_one_digit_says_several_were_seen(engine):
    """Issue 55: lenet.infer on a photo of the number 0224353 answered 0 at 100% and
    nothing else. Its Result says several digits were seen, in its place in a list and
    through a pickle; an image of one digit, a number's digits and an MNIST array do not."""
    number, photo = str(REPO / "examples" / "number.jpg"), str(REPO / "examples" / "photo-4.jpg")
    five = cv2.imread(str(EXAMPLES[5]), cv2.IMREAD_GRAYSCALE)
    got = engine.infer([photo, number, str(EXAMPLES[3]), np.stack([five] * 2), number])  # on 2 threads
    assert [r.several_digits for r in got] == [False, True, False, False, False, True]
    several = got[1]
    assert several.digit == 0 and "several_digits=True" in repr(several)
    assert pickle.loads(pickle.dumps(several)).several_digits and pickle.loads(pickle.dumps(got[0])) == got[0]
    alike = lenet.Result(several.digit, several.probabilities, several.source, several.mode)
    assert alike != several and lenet.Result(*alike.__reduce__()[1][:4], several_digits=True) == several
    assert not any(r.several_digits for r in engine.read_number(number).digits)
    assert not engine.infer(EXAMPLES[3]).several_digits


# ----------------------------------------------------------------- inputs people have


@pytest.mark.parametrize("mode", ["L", "RGB", "RGBA", "P", "1", "LA", "CMYK", "I;16", "I", "F"])
def test_pillow_images_in_every_mode(engine, digit, mode):
    from PIL import Image

    img = Image.fromarray(digit)
    if mode == "I;16":
        img = Image.fromarray(digit.astype(np.uint16) * 257)  # 16 bits: scaled as a 16-bit PNG is
    elif mode == "F":
        img = Image.fromarray(digit.astype(np.float32) / 255)
    else:
        img = img.convert(mode)
    assert img.mode == mode
    got = engine.infer(img)
    assert got.digit == 7
    if mode in ("L", "RGB", "RGBA", "P", "LA", "I;16", "I", "F"):  # the same pixels: the same numbers
        np.testing.assert_allclose(got.probabilities, engine.infer(digit).probabilities, atol=1e-6)


def test_pillow_transparency_and_orientation(engine, digit):
    from PIL import Image

    rgba = np.zeros((28, 28, 4), np.uint8)
    rgba[..., :3] = 0
    rgba[..., 3] = digit  # a black digit drawn on a transparent page: white where transparent
    page = engine.infer(Image.fromarray(rgba, "RGBA"))
    assert page.digit == 7 and page.mode == "photo"
    # An EXIF orientation is applied as for a file: orientation 6 says the stored pixels are
    # to be turned 90 degrees clockwise for display; stored turned the other way, they read 7.
    stored = Image.fromarray(np.rot90(digit, 1).copy())
    exif = stored.getexif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    stored.save(buf, "PNG", exif=exif)
    buf.seek(0)
    reopened = Image.open(buf)
    assert reopened.getexif().get(0x0112) == 6
    assert engine.infer(reopened).digit == 7 and engine.infer(np.asarray(reopened)).digit != 7


class _ArrayLike:
    """What a CPU torch tensor or a JAX array looks like to lenet: only __array__."""

    def __init__(self, a):
        self.a = a

    def __array__(self, dtype=None, copy=None):
        return self.a if dtype is None else self.a.astype(dtype)


class _DeviceTensor:
    def __array__(self, dtype=None, copy=None):
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


class _GradTensor:  # what torch raises for a tensor that requires grad (issue 76)
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")


def test_array_likes_bytes_like_and_paths(engine, digit):
    want = engine.infer(digit)
    assert engine.infer(_ArrayLike(digit)) == want
    batch = engine.infer(_ArrayLike(np.stack([digit, digit])))
    assert [r.digit for r in batch] == [7, 7]
    assert engine.predict(_ArrayLike(digit[None, :, :, None] / 255.0)).shape == (1, 10)
    with pytest.raises(lenet.InputError, match="copy it to the host"):
        engine.infer(_DeviceTensor())
    with pytest.raises(lenet.InputError, match=r"detach it from autograd first \(tensor.detach\(\)"):
        engine.infer(_GradTensor())
    data = EXAMPLES[7].read_bytes()
    assert engine.infer(bytearray(data)).probabilities.tobytes() == engine.infer(data).probabilities.tobytes()
    assert engine.infer(memoryview(data)).digit == 7
    assert engine.infer(pathlib.Path(EXAMPLES[7])).digit == 7


def test_a_pytorch_checkpoint_is_named_and_the_way_to_onnx_given(tmp_path):
    """Issue 76: a .pt file (torch.save's zip of pickles) got "a zip file but not a Keras .keras
    file"; it is named for what it is, with the export that lenet reads."""
    import zipfile

    for member in ("model/data.pkl", "archive/constants.pkl"):
        path = tmp_path / "model.pt"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(member, b"\x80\x04N.")
            z.writestr(member.split("/")[0] + "/version", b"3\n")
        with pytest.raises(lenet.ModelFileError, match=r"a PyTorch checkpoint .*torch\.onnx\.export"):
            lenet.Engine(path)
    plain = tmp_path / "other.keras"
    with zipfile.ZipFile(plain, "w") as z:
        z.writestr("readme.txt", b"hello")
    with pytest.raises(lenet.ModelFileError, match="a zip file but not a Keras .keras file"):
        lenet.Engine(plain)


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    img = cv2.imread(str(EXAMPLES[4]), cv2.IMREAD_GRAYSCALE)
    assert lenet.infer(torch.from_numpy(img), device="cpu").digit == 4


def test_bgr_arrays_said_to_be_bgr(engine, digit):
    # A red digit: gray is 0.299 R under RGB, 0.114 R read as BGR: the order matters.
    rgb = np.zeros((28, 28, 3), np.uint8)
    rgb[..., 0] = digit
    bgr = rgb[..., ::-1].copy()
    as_rgb = engine.infer(rgb)
    assert engine.infer(bgr, channel_order="bgr") == as_rgb
    assert engine.infer(bgr).probabilities.tobytes() != as_rgb.probabilities.tobytes()
    bgra = np.dstack([bgr, np.full((28, 28), 255, np.uint8)])
    assert engine.infer(bgra, channel_order="bgr").probabilities.tobytes() == as_rgb.probabilities.tobytes()
    got = list(engine.infer_iter([bgr, np.stack([bgr, bgr])], channel_order="bgr"))
    assert all(r.probabilities.tobytes() == as_rgb.probabilities.tobytes() for r in got) and len(got) == 3
    # Files are decoded as RGB whatever channel_order says.
    assert engine.infer(str(EXAMPLES[7]), channel_order="bgr") == engine.infer(str(EXAMPLES[7]))
    with pytest.raises(lenet.InputError, match="channel_order"):
        engine.infer(bgr, channel_order="BGR ")


def test_a_missing_file_is_a_file_not_found_error(engine, tmp_path):
    missing = str(tmp_path / "missing.png")
    with pytest.raises(FileNotFoundError) as got:
        engine.infer(missing)
    e = got.value
    assert isinstance(e, lenet.InputError) and isinstance(e, lenet.InputFileNotFoundError)
    assert str(e) == f"{missing}: no such file" and e.errno == errno.ENOENT and e.filename == missing
    streamed = list(engine.infer_iter([str(EXAMPLES[0]), missing]))
    assert isinstance(streamed[1], FileNotFoundError) and streamed[1].source == missing
    back = pickle.loads(pickle.dumps(streamed[1]))
    assert type(back) is lenet.InputFileNotFoundError and str(back) == str(e) and back.source == missing
    with pytest.raises(FileNotFoundError) as got:
        lenet.Engine(str(tmp_path / "missing.h5"))
    assert isinstance(got.value, lenet.ModelFileError) and str(got.value).endswith("missing.h5: no such file")
    with pytest.raises(lenet.InputError, match="a directory with no image files"):  # walked (issue 64)
        engine.infer(str(tmp_path))
    with pytest.raises(lenet.ModelFileError, match="is a directory"):
        lenet.Engine(str(tmp_path))


# ----------------------------------------------------------------- the tools around it


def _classify(engine, path):
    r = engine.infer(path)
    return r.digit, r.probabilities.tobytes(), os.getpid()


def test_an_engine_pickles_with_its_weights_and_options(tmp_path):
    own = tmp_path / "mine.h5"
    shutil.copy(lenet.shipped_weights("lenet5"), own)
    engine = lenet.Engine(str(own), device="cpu", threads=1, input_scale=1 / 255, cpu_kernels="blas")
    blob = pickle.dumps(engine)
    own.unlink()  # the weights travel in the pickle, not as a path
    copy = pickle.loads(blob)
    assert copy.threads == 1 and copy.input_scale == engine.input_scale and copy.device == "cpu"
    assert copy.describe()["description"] == engine.describe()["description"]
    x = np.random.default_rng(0).random((4, 28, 28, 1), dtype=np.float32)
    np.testing.assert_array_equal(copy.predict(x), engine.predict(x))


def test_an_engine_goes_to_a_process_pool():
    engine = lenet.Engine("lenet5", device="cpu", threads=1)
    paths = [str(p) for p in EXAMPLES]
    ctx = multiprocessing.get_context("spawn")  # what macOS and Windows do, and the strictest
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        got = list(pool.map(_classify, [engine] * len(paths), paths))
    assert [d for d, _, _ in got] == list(range(10))
    assert all(p == engine.infer(path).probabilities.tobytes() for (_, p, _), path in zip(got, paths))
    assert len({pid for _, _, pid in got} - {os.getpid()}) >= 1


_PROBE = r"""
import json, os, sys
import numpy as np, cv2
before = {"cv2_threads": cv2.getNumThreads(), "dlopen": sys.getdlopenflags(),
          "env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")},
          "np_err": np.geterr(), "np_print": np.get_printoptions()["precision"]}
import lenet
lenet.infer(np.zeros((28, 28), np.uint8), mode="mnist", device="cpu")
after = {"cv2_threads": cv2.getNumThreads(), "dlopen": sys.getdlopenflags(),
         "env": {k: os.environ.get(k) for k in before["env"]},
         "np_err": np.geterr(), "np_print": np.get_printoptions()["precision"]}
heavy = sorted(m for m in ("tensorflow", "keras", "tf_keras", "matplotlib", "torch", "jax", "PIL", "rich", "h5py",
                           "scipy")
               if m in sys.modules)
print(json.dumps({"before": before, "after": after, "heavy": heavy}))
"""


def test_import_is_light_and_changes_nothing_global():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == got["after"]
    # The default model loads from its .lenet copy (lenet.shipped): not even h5py comes in.
    assert got["heavy"] == [], got["heavy"]
    # Nothing heavy at import time either (python -X importtime names every module imported).
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import lenet"], capture_output=True, text=True, timeout=120
    )
    names = {line.split("|")[-1].strip() for line in out.stderr.splitlines() if "|" in line}
    modules = {name.split(".")[0] for name in names}
    assert not modules & {"tensorflow", "keras", "matplotlib", "torch", "jax", "PIL", "rich", "scipy"}, modules
    # Nor what only some calls need (issue 54: lenet-cli's start): OpenCV (decoding, the photo
    # path), ONNX (its files), the thread pools' concurrent.futures, and importlib.metadata
    # (which scipy_openblas32's own import reads; lenet loads its library without it).
    later = {"cv2", "onnx", "lenet.onnx.graph", "lenet.images.page", "concurrent.futures", "importlib.metadata"}
    assert not names & later, sorted(names & later)


# ----------------------------------------------------------------- a package


def test_the_package_says_what_it_is():
    import importlib.metadata

    md = importlib.metadata.metadata("lenet")
    assert md["License-Expression"] == "MIT" and "LICENSE" in (md.get_all("License-File") or [])
    assert md["Requires-Python"] == ">=3.10"
    assert "mnist" in md["Keywords"] and "Typing :: Typed" in md.get_all("Classifier")
    assert not (pathlib.Path(lenet.__file__).parent / "train.py").exists()  # a tool, not the package


def test_the_build_says_whether_the_gpu_backend_is_there():
    info = lenet.info()
    assert info["cuda_build"].startswith("CUDA backend ON" if lenet.cuda_built() else "CUDA backend OFF")
    if not lenet.cuda_built():
        assert 'LENET_CUDA=ON pip install ".[cuda]"' in info["cuda_error"]
        with pytest.raises(lenet.CudaError, match="built without the GPU backend"):
            lenet.Engine(device="cuda")
