"""lenet's own model file (.lenet, csrc/net/model_file.h): what Python writes, the C++ API
loads. Saved and loaded again, a model gives the same predict_proba to the bit; a damaged,
truncated, foreign or hostile file gives a ModelFileError naming the file and what is
wrong, never a crash or a large allocation. (Fuzzed: tests/models/test_fuzz_model.py.)"""

import struct
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS

import lenet
from lenet._native import _core
from lenet.errors import ModelFileError, ModelFileNotFoundError

ONNX = TESTS / "data" / "onnx"
HEADER = 8 + 4 + 8  # magic, version, input scale


def _inputs(engine, n=7, seed=0):
    return np.random.default_rng(seed).random((n,) + tuple(engine.input_shape[1:]), np.float32)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("lenet-file") / "lenet5.lenet"
    lenet.Engine("lenet5", device="cpu", threads=1).save(path)
    return path


@pytest.mark.parametrize(
    "source",
    ["lenet5", "lenet-keras", "lenet-tf", ONNX / "bn_cnn.onnx", ONNX / "gap_residual.onnx", ONNX / "gelu_mlp.onnx"],
    ids=lambda s: Path(str(s)).name,
)
def test_a_saved_model_predicts_the_same_bits(source, tmp_path):
    if isinstance(source, Path) and not source.exists():
        pytest.skip(f"{source} is not in this checkout")
    engine = lenet.Engine(source, device="cpu", threads=1)
    path = tmp_path / "model.lenet"
    engine.save(path)
    again = lenet.Engine(path, device="cpu", threads=1)
    x = _inputs(engine)
    assert np.array_equal(engine.predict_proba(x), again.predict_proba(x))
    assert np.array_equal(engine.predict(x), again.predict(x))
    assert again.input_scale == engine.input_scale
    assert again.input_shape == engine.input_shape and again.model.image_shape == engine.model.image_shape
    assert again.model.spec.name == engine.model.spec.name
    assert again.model.source == str(path) and again.model.spec.extra["saved_from"] == engine.model.source
    assert again.model.network.steps() == engine.model.network.steps()
    engine.save(tmp_path / "twice.lenet")  # the same model, the same bytes
    assert (tmp_path / "twice.lenet").read_bytes() == path.read_bytes()


def test_engine_input_scale_is_what_is_saved(tmp_path):
    lenet.Engine("lenet5", device="cpu", threads=1, input_scale=0.5).save(tmp_path / "m.lenet")
    assert lenet.Engine(tmp_path / "m.lenet", device="cpu", threads=1).input_scale == 0.5


def test_what_the_file_cannot_record_is_refused_not_dropped(tmp_path):
    """A .lenet file records no image layout: NHWC images into an NCHW graph would be fed
    as NCHW from it; saving it is refused, nothing written."""
    engine = lenet.Engine(ONNX / "tf2onnx_nhwc.onnx", device="cpu", threads=1)
    with pytest.raises(lenet.UnsupportedModelError, match="its images are NHWC") as info:
        engine.save(tmp_path / "m.lenet")
    assert "cannot be saved as a .lenet file" in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "source, options",
    [
        ("lenet5", {"mean": 0.1307, "std": 0.3081}),
        (ONNX / "normalized_half_recorded.onnx", {}),
        (ONNX / "normalized_mnist.onnx", {"mean": 0.1307, "std": 0.3081}),
    ],
    ids=["asked", "recorded", "onnx-asked"],
)
def test_a_normalized_model_keeps_its_normalization(source, options, tmp_path):
    """Pixels scaled, then (x - mean) / std (PyTorch's Normalize): the file records the mean
    and std (format version 2), and the model loaded from it prepares its pixels, and
    answers, to the bit as the model it was saved from."""
    engine = lenet.Engine(source, device="cpu", threads=1, **options)
    path = tmp_path / "m.lenet"
    engine.save(path)
    assert struct.unpack_from("<I", path.read_bytes(), 8) == (2,)
    again = lenet.Engine(path, device="cpu", threads=1)
    assert again.preprocessing == engine.preprocessing and not again.preprocessing.plain
    images = [TESTS.parent / "examples" / f"digit-{d}.png" for d in range(10)]
    saved_from, loaded = engine.infer(images), again.infer(images)
    for a, b in zip(saved_from, loaded):
        assert np.array_equal(a.probabilities, b.probabilities)
    unnormalized = lenet.Engine(source, device="cpu", threads=1, mean=0.0, std=1.0).infer(images)
    assert not all(np.array_equal(a.probabilities, b.probabilities) for a, b in zip(unnormalized, loaded))


def test_a_normalization_the_reader_would_refuse_is_not_written(tmp_path):
    m = lenet.load("lenet5")
    for mean, std in (([0.5], [0.0]), ([float("nan")], [1.0]), ([0.5, 0.5], [1.0])):
        with pytest.raises(ModelFileError, match="cannot be written"):
            _core.write_model_file(str(tmp_path / "m.lenet"), m.spec.layers, [28, 28, 1], 1 / 255, "x", "x", mean, std)
    assert list(tmp_path.iterdir()) == []


def test_a_model_without_normalization_is_written_as_version_1(saved):
    """So that a lenet from before version 2 still reads it."""
    assert struct.unpack_from("<I", saved.read_bytes(), 8) == (1,)


@pytest.mark.parametrize(
    "n, mean, std, message",
    [
        (0, [], [], "a normalization for 0 channels"),
        (5, [0.0] * 5, [1.0] * 5, "a normalization for 5 channels"),
        (1, [float("nan")], [1.0], "mean of channel 0 is nan, not a finite number"),
        (1, [0.5], [0.0], "std of channel 0 is 0, not a finite number above 0"),
        (3, [0.5] * 3, [-1.0, 1.0, 1.0], "std of channel 0 is -1"),
    ],
    ids=["none", "five", "nan-mean", "zero-std", "negative-std"],
)
def test_a_damaged_normalization(saved, tmp_path, n, mean, std, message):
    data = saved.read_bytes()
    p = _edit(
        saved,
        tmp_path,
        data[:8] + struct.pack("<I", 2) + data[12:HEADER] + struct.pack(f"<I{2 * n}d", n, *mean, *std) + data[HEADER:],
    )
    with pytest.raises(ModelFileError, match=message) as e:
        lenet.load(p)
    assert str(e.value).startswith(f"{p}: ")


def test_infer_on_a_saved_model(saved):
    digit = TESTS.parent / "examples" / "digit-7.png"
    assert lenet.Engine(saved, device="cpu", threads=1).infer(digit).digit == 7


def _edit(saved, tmp_path, data: bytes, name="case.lenet") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def test_truncated_anywhere(saved, tmp_path):
    data = saved.read_bytes()
    cuts = sorted({0, 1, 7, 8, 11, 12, 19, 20, 40, 100, 300, 1000, len(data) // 2, len(data) - 9, len(data) - 1})
    for cut in cuts:
        p = _edit(saved, tmp_path, data[:cut])
        with pytest.raises(ModelFileError, match=str(p).replace(".", r"\.")) as e:
            lenet.load(p)
        assert "truncated" in str(e.value) or "end marker" in str(e.value), (cut, str(e.value))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: b"LENETMDX" + d[8:], "does not start with"),
        (lambda d: d[:8] + struct.pack("<I", 3) + d[12:], "format version 3; this lenet reads version 2"),
        (lambda d: d[:8] + struct.pack("<I", 0) + d[12:], "format version 0"),
        (lambda d: d[:12] + struct.pack("<d", float("nan")) + d[20:], "input scale is not a finite number"),
        (lambda d: d[:HEADER] + struct.pack("<I", 0xFFFFFFFF) + d[HEADER + 4 :], "over the limit"),
        (lambda d: d + b"x", "1 bytes after the end marker"),
        (lambda d: d[:-8] + b"LENETXXX", 'no end marker "LENETEND"'),
    ],
    ids=["magic", "future-version", "version-0", "nan-scale", "absurd-name-length", "trailing", "end-marker"],
)
def test_damaged_headers(saved, tmp_path, edit, message):
    p = _edit(saved, tmp_path, edit(saved.read_bytes()))
    with pytest.raises(ModelFileError, match=message) as e:
        lenet.load(p)
    assert str(e.value).startswith(f"{p}: ")


def _layer_offset(data: bytes) -> int:
    """Where the layer count is: after the header, the name, the source and the input shape."""
    pos = HEADER
    for _ in range(2):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4 + n
    (rank,) = struct.unpack_from("<I", data, pos)
    return pos + 4 + 8 * rank


def test_absurd_counts_are_refused_before_allocating(saved, tmp_path):
    data = saved.read_bytes()
    at = _layer_offset(data)
    for count, message in [
        (10**6, "the layer count: 1000000 is over the limit of 1000"),
        (0xFFFFFFFF, "over the limit"),
    ]:
        p = _edit(saved, tmp_path, data[:at] + struct.pack("<I", count) + data[at + 4 :])
        with pytest.raises(ModelFileError, match=message):
            lenet.load(p)
    # The first layer's field count, then a field name's length.
    p = _edit(saved, tmp_path, data[: at + 4] + struct.pack("<I", 10**6) + data[at + 8 :])
    with pytest.raises(ModelFileError, match="layer 0: the field count: 1000000 is over the limit of 256"):
        lenet.load(p)
    p = _edit(saved, tmp_path, data[: at + 8] + struct.pack("<I", 2**31) + data[at + 12 :])
    with pytest.raises(ModelFileError, match="a field name length: 2147483648 is over the limit"):
        lenet.load(p)


def test_a_weight_declaring_a_billion_values_is_refused(saved, tmp_path):
    data = bytearray(saved.read_bytes())
    name = b"\x06\x00\x00\x00kernel"  # the first conv's kernel weight, (5, 5, 1, 6), not its field
    at = data.index(name) + len(name)
    while struct.unpack_from("<I", data, at)[0] != 4:
        at = data.index(name, at) + len(name)
    struct.pack_into("<q", data, at + 4, 10**9)
    p = _edit(saved, tmp_path, bytes(data))
    with pytest.raises(ModelFileError, match="parameters|out of range"):
        lenet.load(p)
    struct.pack_into("<q", data, at + 4, -5)
    p = _edit(saved, tmp_path, bytes(data))
    with pytest.raises(ModelFileError, match="dimension -5 out of range"):
        lenet.load(p)


def test_an_unknown_field_and_a_field_of_the_wrong_type(saved, tmp_path):
    data = saved.read_bytes()
    p = _edit(saved, tmp_path, data.replace(b"\x04\x00\x00\x00kind", b"\x04\x00\x00\x00kinx", 1))
    with pytest.raises(ModelFileError, match="unknown field 'kinx' \\(a file of a newer lenet\\?\\)"):
        lenet.load(p)
    at = data.index(b"\x04\x00\x00\x00kind") + 8
    p = _edit(saved, tmp_path, data[:at] + b"\x01" + data[at + 1 :])
    with pytest.raises(ModelFileError, match="layer 0 \\(''\\): field 'kind' has type 1, expected 0"):
        lenet.load(p)


def test_fields_at_their_default_are_not_written(saved):
    """So that a model using no field added since a release reads in that release: the
    quantization fields (issue 43) are absent from a float model's file."""
    data = saved.read_bytes()
    for field in (b"quant_scale", b"zero_point", b"quant_range", b"integers", b"interpolation"):
        assert field not in data
    assert b"\x04\x00\x00\x00kind" in data and b"\x07\x00\x00\x00filters" in data


def test_names_that_are_not_utf8(saved, tmp_path):
    """Found by the lenet-bytes fuzzer: a name Python cannot read as text."""
    data = saved.read_bytes()
    at = HEADER + 4  # the model name's first byte
    p = _edit(saved, tmp_path, data[:at] + b"\x9e" + data[at + 1 :])
    with pytest.raises(ModelFileError, match="the model name is not UTF-8 text"):
        lenet.load(p)


def test_the_network_checks_what_the_file_holds(saved, tmp_path):
    """A well-formed file of a wrong model: the Network's own checks, naming the file."""
    data, field = saved.read_bytes(), b"\x07\x00\x00\x00filters\x01"
    at = data.index(field) + len(field)  # the field's value, after its type
    while struct.unpack_from("<i", data, at)[0] == 0:  # the first convolution's
        at = data.index(field, at) + len(field)
    bad = data[:at] + struct.pack("<i", 7) + data[at + 4 :]
    p = _edit(saved, tmp_path, bad)
    with pytest.raises(ModelFileError, match=str(p).replace(".", r"\.")):
        lenet.load(p)


def test_missing_empty_and_foreign_files(saved, tmp_path):
    with pytest.raises(ModelFileNotFoundError, match="no such file"):
        lenet.Engine(tmp_path / "absent.lenet")
    p = _edit(saved, tmp_path, b"")
    with pytest.raises(ModelFileError, match="shorter than the header"):
        lenet.load(p)
    p = _edit(saved, tmp_path, b"\x89HDF\r\n\x1a\n" + bytes(100), "not-ours.lenet")
    with pytest.raises(ModelFileError):
        lenet.load(p)


def test_save_into_a_missing_folder_says_so(tmp_path):
    with pytest.raises(lenet.Error, match="cannot write the model file"):
        lenet.Engine("lenet5", device="cpu", threads=1).save(tmp_path / "no" / "such" / "m.lenet")
