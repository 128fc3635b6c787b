"""lenet's own model file (.lenet, csrc/net/model_file.h): what Python writes, the C++ API
loads. Saved and loaded again, a model gives the same predict_proba to the bit; a damaged,
truncated, foreign or hostile file gives a ModelFileError naming the file and what is
wrong, never a crash, a large allocation or a model that answers otherwise; the writer
writes nothing the reader refuses, and nothing partial. (Fuzzed: tests/models/test_fuzz_model.py.)

Files are edited here as their bytes: an edit that should reach the parser's checks is
sealed with a new checksum (``_seal``: zlib's CRC-32, the format's, computed apart from
the C++ one), as a hostile writer would seal it."""

import os
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import TESTS

import lenet
from lenet._native import _core
from lenet.errors import ModelFileError

ONNX = TESTS / "data" / "onnx"
EARLIER = TESTS / "data" / "lenet"  # files written by lenet 0.1.0 before the checksum (format versions 1 and 2)
HEADER = 8 + 4 + 8  # magic, version, input scale; then the normalization's channel count (version 3: always)
NAME = HEADER + 4  # the model name of a file without a normalization


def _seal(body: bytes) -> bytes:
    """A version-3 file's body (everything before the checksum) with its checksum."""
    return body + struct.pack("<I", zlib.crc32(body))


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
    origin = engine.model.spec.extra.get("saved_from") or Path(engine.model.source).name  # lenet5: its .lenet's
    assert again.model.source == str(path) and again.model.spec.extra["saved_from"] == origin
    assert again.model.spec.extra["file_version"] == 3
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
    and std, and the model loaded from it prepares its pixels, and answers, to the bit as
    the model it was saved from."""
    engine = lenet.Engine(source, device="cpu", threads=1, **options)
    path = tmp_path / "m.lenet"
    engine.save(path)
    assert struct.unpack_from("<I", path.read_bytes(), HEADER)[0] >= 1
    again = lenet.Engine(path, device="cpu", threads=1)
    assert again.preprocessing == engine.preprocessing and not again.preprocessing.plain
    images = [TESTS.parent / "examples" / f"digit-{d}.png" for d in range(10)]
    saved_from, loaded = engine.infer(images), again.infer(images)
    for a, b in zip(saved_from, loaded):
        assert np.array_equal(a.probabilities, b.probabilities)
    unnormalized = lenet.Engine(source, device="cpu", threads=1, mean=0.0, std=1.0).infer(images)
    assert not all(np.array_equal(a.probabilities, b.probabilities) for a, b in zip(unnormalized, loaded))


def _write(tmp_path, scale=1 / 255, mean=(), std=(), name="m", layers=None, name_of="m.lenet"):
    m = lenet.load("lenet5")
    _core.write_model_file(
        str(tmp_path / name_of),
        m.spec.layers if layers is None else layers,
        [28, 28, 1],
        scale,
        name,
        "lenet5.h5",
        list(mean),
        list(std),
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"mean": [0.5], "std": [0.0]}, "std of channel 0 is 0, not a number above 0 that a float32 holds"),
        ({"mean": [float("nan")], "std": [1.0]}, "mean of channel 0 is nan, not a number a float32 holds"),
        ({"mean": [0.5, 0.5], "std": [1.0]}, "a normalization of 2 means and 1 stds"),
        ({"mean": [0.5], "std": [1e-300]}, "std of channel 0 is 1e-300, not a number above 0 that a float32 holds"),
        ({"mean": [1e39], "std": [1.0]}, "mean of channel 0 is 1e\\+39, not a number a float32 holds"),
        ({"mean": [0.0], "std": [1e-41]}, "pixel value 1 of channel 0 would become inf"),
        ({"scale": float("nan")}, "the input scale is nan, not a number above 0 that a float32 holds"),
        ({"scale": 0.0}, "the input scale is 0, not a number above 0"),
        ({"scale": -1 / 255}, "the input scale is -0.00392156862745098, not a number above 0"),
        ({"scale": 1e-50}, "the input scale is 1e-50, not a number above 0 that a float32 holds"),
        ({"scale": 1e38}, "pixel value 4 of channel 0 would become inf"),
        ({"name": "x" * 70_000}, "the model name: 70000 bytes, over the limit of 65536"),
    ],
    ids=[
        "zero-std",
        "nan-mean",
        "unpaired",
        "tiny-std",
        "huge-mean",
        "overflowing-std",
        "nan-scale",
        "zero-scale",
        "negative-scale",
        "tiny-scale",
        "overflowing-scale",
        "long-name",
    ],
)
def test_the_writer_refuses_what_the_reader_refuses(tmp_path, options, message):
    """Before: a NaN scale, a 70,000-character name, a std that is 0 as a float32 were
    written (and refused, or worse accepted, when read). Every value is checked in the type
    the engine uses it in (the float32s that prepare pixels); nothing is written."""
    with pytest.raises(ModelFileError, match=message) as e:
        _write(tmp_path, **options)
    assert str(e.value).startswith(f"{tmp_path / 'm.lenet'}: cannot be written as a .lenet file: ")
    assert list(tmp_path.iterdir()) == []


def test_a_layer_name_the_reader_refuses_is_not_written(tmp_path):
    m = lenet.load("lenet5")
    layers = list(m.spec.layers)
    layers[0].name = "c" * 70_000
    with pytest.raises(ModelFileError, match="layer 0, field 'name': the value: 70000 bytes, over the limit"):
        _write(tmp_path, layers=layers)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "scale, mean, std, message",
    [
        (1 / 255, [0.5], [1e-300], "std of channel 0 is 1e-300, not a number above 0 that a float32 holds"),
        (1 / 255, [1e300], [1.0], "mean of channel 0 is 1e\\+300, not a number a float32 holds"),
        (0.0, [], [], "the input scale is 0, not a number above 0"),
        (-1.0, [], [], "the input scale is -1, not a number above 0"),
        (1e-60, [], [], "the input scale is 1e-60, not a number above 0 that a float32 holds"),
        (3e38, [], [], "pixel value 2 of channel 0 would become inf"),
    ],
    ids=["tiny-std", "huge-mean", "zero-scale", "negative-scale", "tiny-scale", "overflowing-scale"],
)
def test_values_are_checked_in_the_type_they_are_used_in(saved, tmp_path, scale, mean, std, message):
    """Before: a file with std = 1e-300 loaded (0 as the float32 the engine divides by:
    every pixel call then blamed its input), and a scale <= 0 was taken (the Keras reader
    refuses it)."""
    body = saved.read_bytes()[:-4]
    n = len(mean)
    body = body[:12] + struct.pack(f"<dI{2 * n}d", scale, n, *mean, *std) + body[NAME:]
    p = _edit(saved, tmp_path, _seal(body))
    with pytest.raises(ModelFileError, match=message) as e:
        lenet.load(p)
    assert str(e.value).startswith(f"{p}: ")


def test_every_file_is_written_as_version_3_with_its_checksum(saved):
    data = saved.read_bytes()
    assert struct.unpack_from("<I", data, 8) == (3,)
    assert data[-12:-4] == b"LENETEND" and data[-4:] == struct.pack("<I", zlib.crc32(data[:-4]))


def test_no_folder_is_stored(saved, tmp_path):
    """Before: the file held the absolute path it was converted from (a user's folder
    names travelled with the model); now the file's name only."""
    data = saved.read_bytes()
    folder = str(lenet.shipped_weights("lenet5").parent).encode()
    assert folder not in data and b"/" not in data[NAME : NAME + 200]
    assert lenet.load(saved).spec.extra["saved_from"] == "lenet5.h5"
    # A file of this version that holds a path was not written by lenet: refused.
    (n,) = struct.unpack_from("<I", data, NAME)
    at = NAME + 4 + n  # the source
    body = data[:at] + struct.pack("<I", 14) + b"/home/u/m.onnx" + data[at + 4 + 9 : -4]
    p = _edit(saved, tmp_path, _seal(body))
    with pytest.raises(ModelFileError, match="the source '/home/u/m.onnx' names folders"):
        lenet.load(p)


@pytest.mark.parametrize(
    "name, source, version",
    [("gap_residual-v1.lenet", "gap_residual.onnx", 1), ("grey_rgb_32-v2.lenet", "grey_rgb_32.onnx", 2)],
)
def test_files_of_earlier_releases_still_load(name, source, version):
    """Written by lenet 0.1.0 (format versions 1 and 2, no checksum, the source's full
    path): they load and answer as the model they were made from; what they recorded of
    its path is its file name; file_version says they carry no checksum."""
    path = EARLIER / name
    data = path.read_bytes()
    assert struct.unpack_from("<I", data, 8) == (version,) and b"/tests/data/onnx/" in data
    model = lenet.load(path)
    assert model.spec.extra["file_version"] == version and model.spec.extra["saved_from"] == source
    options = {"mean": (0.5, 0.4, 0.3), "std": (0.2, 0.25, 0.3)} if version == 2 else {}
    engine = lenet.Engine(ONNX / source, device="cpu", threads=1, **options)
    again = lenet.Engine(path, device="cpu", threads=1)
    assert again.preprocessing == engine.preprocessing
    x = _inputs(engine)
    assert np.array_equal(engine.predict(x), again.predict(x))


def test_a_file_of_an_earlier_release_cut_short(tmp_path):
    data = (EARLIER / "gap_residual-v1.lenet").read_bytes()
    p = tmp_path / "cut.lenet"
    p.write_bytes(data[:-100])
    with pytest.raises(ModelFileError, match="truncated"):
        lenet.load(p)


def test_200_single_bit_flips_are_200_refusals_by_name(saved, tmp_path):
    """Issue 53's experiment: 200 copies of a saved lenet5.lenet, each with one bit flipped
    at random. Before: 200 of 200 loaded, 13 answering otherwise. Now each is refused
    before anything is built, as damage."""
    data = saved.read_bytes()
    rng = random.Random(53)
    p = tmp_path / "flipped.lenet"
    refused = 0
    for _ in range(200):
        bit = rng.randrange(len(data) * 8)
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        p.write_bytes(flipped)
        with pytest.raises(ModelFileError) as e:
            lenet.load(p)
        assert str(e.value).startswith(f"{p}: damaged: "), (bit, str(e.value))
        refused += 1
    assert refused == 200
    # Every bit of the header and the checksum too, where a flip could pass for another version or a foreign file.
    for bit in [*range(12 * 8), *range((len(data) - 4) * 8, len(data) * 8)]:
        flipped = bytearray(data)
        flipped[bit // 8] ^= 1 << (bit % 8)
        p.write_bytes(flipped)
        with pytest.raises(ModelFileError, match=r": damaged: "):
            lenet.load(p)


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
        assert "truncated" in str(e.value) or "damaged" in str(e.value), (cut, str(e.value))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: _seal(b"LENETMDX" + d[8:]), "does not start with"),
        (lambda d: b"LENETMDX" + d[8:] + struct.pack("<I", zlib.crc32(d)), "damaged: its header was changed"),
        (lambda d: _seal(d[:8] + struct.pack("<I", 4) + d[12:]), "format version 4; this lenet reads versions 1 to 3"),
        (lambda d: _seal(d[:8] + struct.pack("<I", 0) + d[12:]), "format version 0"),
        (lambda d: _seal(d[:12] + struct.pack("<d", float("nan")) + d[20:]), "input scale is nan"),
        (lambda d: _seal(d[:NAME] + struct.pack("<I", 0xFFFFFFFF) + d[NAME + 4 :]), "over the limit"),
        (lambda d: _seal(d + b"x"), "1 bytes after the end marker"),
        (lambda d: _seal(d[:-8] + b"LENETXXX"), 'no end marker "LENETEND"'),
        (lambda d: d + b"x" + struct.pack("<I", zlib.crc32(d)), "damaged: its checksum does not match its bytes"),
    ],
    ids=[
        "magic",
        "magic-damaged",
        "future-version",
        "version-0",
        "nan-scale",
        "absurd-name-length",
        "trailing",
        "end-marker",
        "trailing-unsealed",
    ],
)
def test_damaged_headers(saved, tmp_path, edit, message):
    p = _edit(saved, tmp_path, edit(saved.read_bytes()[:-4]))
    with pytest.raises(ModelFileError, match=message) as e:
        lenet.load(p)
    assert str(e.value).startswith(f"{p}: ")


def _layer_offset(data: bytes) -> int:
    """Where the layer count is: after the header, the name, the source and the input shape."""
    pos = NAME
    for _ in range(2):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4 + n
    (rank,) = struct.unpack_from("<I", data, pos)
    return pos + 4 + 8 * rank


def test_absurd_counts_are_refused_before_allocating(saved, tmp_path):
    data = saved.read_bytes()[:-4]
    at = _layer_offset(data)
    for count, message in [
        (10**6, "the layer count: 1000000 is over the limit of 1000"),
        (0xFFFFFFFF, "over the limit"),
    ]:
        p = _edit(saved, tmp_path, _seal(data[:at] + struct.pack("<I", count) + data[at + 4 :]))
        with pytest.raises(ModelFileError, match=message):
            lenet.load(p)
    # The first layer's field count, then a field name's length.
    p = _edit(saved, tmp_path, _seal(data[: at + 4] + struct.pack("<I", 10**6) + data[at + 8 :]))
    with pytest.raises(ModelFileError, match=r"layer 0: the field count: 1000000 is over the limit of \d+"):
        lenet.load(p)
    p = _edit(saved, tmp_path, _seal(data[: at + 8] + struct.pack("<I", 2**31) + data[at + 12 :]))
    with pytest.raises(ModelFileError, match="a field name: 2147483648 bytes, over the limit"):
        lenet.load(p)


def test_a_weight_declaring_a_billion_values_is_refused(saved, tmp_path):
    data = bytearray(saved.read_bytes()[:-4])
    name = b"\x06\x00\x00\x00kernel"  # the first conv's kernel weight, (5, 5, 1, 6), not its field
    at = data.index(name) + len(name)
    while struct.unpack_from("<I", data, at)[0] != 4:
        at = data.index(name, at) + len(name)
    struct.pack_into("<q", data, at + 4, 10**9)
    p = _edit(saved, tmp_path, _seal(bytes(data)))
    with pytest.raises(ModelFileError, match="parameters|out of range"):
        lenet.load(p)
    struct.pack_into("<q", data, at + 4, -5)
    p = _edit(saved, tmp_path, _seal(bytes(data)))
    with pytest.raises(ModelFileError, match="weight 'kernel': dimension -5 out of range"):
        lenet.load(p)


def test_an_unknown_field_a_field_of_the_wrong_type_and_a_field_twice(saved, tmp_path):
    data = saved.read_bytes()[:-4]
    p = _edit(saved, tmp_path, _seal(data.replace(b"\x04\x00\x00\x00kind", b"\x04\x00\x00\x00kinx", 1)))
    with pytest.raises(ModelFileError, match="unknown field 'kinx' \\(a file of a newer lenet\\?\\)"):
        lenet.load(p)
    at = data.index(b"\x04\x00\x00\x00kind") + 8
    p = _edit(saved, tmp_path, _seal(data[:at] + b"\x01" + data[at + 1 :]))
    with pytest.raises(ModelFileError, match="layer 0, field 'kind': type 1, expected 0"):
        lenet.load(p)
    # The first field written twice (its count one more): the file of no writer.
    at = _layer_offset(data) + 4
    (fields,) = struct.unpack_from("<I", data, at)
    (n,) = struct.unpack_from("<I", data, at + 4)
    first = data[at + 4 : at + 4 + 4 + n + 1 + 4 + struct.unpack_from("<I", data, at + 4 + 4 + n + 1)[0]]
    p = _edit(saved, tmp_path, _seal(data[:at] + struct.pack("<I", fields + 1) + first + data[at + 4 :]))
    with pytest.raises(ModelFileError, match="layer 0, field 'kind': appears twice"):
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
    data = saved.read_bytes()[:-4]
    at = NAME + 4  # the model name's first byte
    p = _edit(saved, tmp_path, _seal(data[:at] + b"\x9e" + data[at + 1 :]))
    with pytest.raises(ModelFileError, match="the model name is not UTF-8 text"):
        lenet.load(p)


def test_the_network_checks_what_the_file_holds(saved, tmp_path):
    """A well-formed file of a wrong model: the Network's own checks, naming the file."""
    data, field = saved.read_bytes()[:-4], b"\x07\x00\x00\x00filters\x01"
    at = data.index(field) + len(field)  # the field's value, after its type
    while struct.unpack_from("<i", data, at)[0] == 0:  # the first convolution's
        at = data.index(field, at) + len(field)
    bad = data[:at] + struct.pack("<i", 7) + data[at + 4 :]
    p = _edit(saved, tmp_path, _seal(bad))
    with pytest.raises(ModelFileError, match=str(p).replace(".", r"\.")):
        lenet.load(p)


def _crafted_at_the_limits() -> bytes:
    """1,000 layers (the limit), each with a 2,000-character name, fields of every type and 64
    weights (the limit) of rank 8 (the limit), then a wrong end marker: 8 MB that the
    reader reads to its last byte, with a valid checksum (as anyone can seal a file)."""

    def s(b: bytes) -> bytes:
        return struct.pack("<I", len(b)) + b

    fields = {
        "name": b"\x00" + s(b"n" * 2000),
        "kind": b"\x00" + s(b"dense"),
        "units": b"\x01" + struct.pack("<i", 3),
        "kernel": b"\x04" + struct.pack("<I2i", 2, 3, 3),
        "pad": b"\x04" + struct.pack("<I4i", 4, 0, 0, 0, 0),
        "inputs": b"\x04" + struct.pack("<I64i", 64, *[-1] * 64),
        "epsilon": b"\x02" + struct.pack("<f", 0.5),
        "use_bias": b"\x03\x00",
    }
    record = struct.pack("<I", len(fields)) + b"".join(s(k.encode()) + v for k, v in fields.items())
    weight = struct.pack("<I8q", 8, *[1] * 8) + struct.pack("<f", 1.0)
    record += struct.pack("<I", 64) + b"".join(s(b"w%02d" % i) + weight for i in range(64))
    body = b"LENETMDL" + struct.pack("<IdI", 3, 1 / 255, 0) + s(b"crafted") + s(b"x.onnx")
    body += struct.pack("<I3q", 3, 28, 28, 1) + struct.pack("<I", 1000) + record * 1000 + b"LENETXXX"
    return _seal(body)


def test_a_crafted_file_at_the_limits_is_refused_in_under_50_ms(tmp_path):
    """Before: messages were built as the reader went, for every field and weight (a layer's
    name copied into each): a crafted 6.9 MB file took 0.53 s to refuse, ~5 s at the layer
    limit. Now a message is made only on failure."""
    p = tmp_path / "crafted.lenet"
    p.write_bytes(_crafted_at_the_limits())
    best = float("inf")
    for _ in range(3):  # the reader's own thread's time: the same on a busy machine
        t = time.thread_time()
        with pytest.raises(ModelFileError, match='no end marker "LENETEND"'):
            _core.read_model_file(str(p))
        best = min(best, time.thread_time() - t)
    assert best < 0.05, f"{p.stat().st_size:,} bytes refused in {best * 1e3:.1f} ms"


def test_a_link_planted_at_the_old_temporary_name_is_not_followed(saved, tmp_path):
    """Before: save wrote through a fixed path + ".tmp", following a link planted there
    (another user's file overwritten). Now a new file of an unguessable name, made with O_EXCL."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / "m.lenet"
    (tmp_path / "m.lenet.tmp").symlink_to(victim)
    lenet.Engine("lenet5", device="cpu", threads=1).save(target)
    assert victim.read_text() == "precious"
    assert target.read_bytes() == saved.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.lenet", "m.lenet.tmp", "victim.txt"]


def test_saves_at_once_do_not_race(saved, tmp_path):
    """Before: every save of a path wrote the same path + ".tmp": two at once wrote into one
    file and one rename failed. Now each save has its own file; the last rename wins, whole."""
    models = [lenet.load("lenet5"), lenet.load(ONNX / "gap_residual.onnx")]
    target = tmp_path / "m.lenet"
    errors = []

    def save(k):
        try:
            for _ in range(15):
                models[k % 2].save(target)
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            errors.append(e)

    threads = [threading.Thread(target=save, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["m.lenet"]
    assert lenet.load(target).spec.name in (models[0].spec.name, models[1].spec.name)


@pytest.fixture(scope="module")
def io_faults(tmp_path_factory):
    """tests/cpp/io_faults.c built as a library to preload."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    lib = tmp_path_factory.mktemp("io-faults") / "io_faults.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(TESTS / "cpp" / "io_faults.c"), "-ldl"], check=True
    )
    return lib


def _python(code: str, env: dict, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, timeout=timeout
    )


@pytest.mark.parametrize("call", ["fsync", "close"])
def test_a_save_the_disk_did_not_take_fails_naming_the_call(io_faults, tmp_path, call):
    """Before: save never flushed the file to the disk before the rename, and did not check
    what fclose said (a write failing late, as on NFS): the rename then put a file that may
    not be on the disk in the model's place. Now a failing fsync or close fails the save,
    naming the call, and leaves nothing behind."""
    target = tmp_path / "m.lenet"
    proc = _python(
        f"import lenet\ntry:\n    lenet.load('lenet5').save({str(target)!r})\nexcept lenet.Error as e:\n    print(e)",
        {"LD_PRELOAD": str(io_faults), f"LENET_FAULT_{call.upper()}": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"{target}: cannot write the model file ({call}: Input/output error)"
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_swapped_in_after_a_check_does_not_block_the_reader(io_faults, saved, tmp_path):
    """Before: the reader stat()ed the path, then opened it: a FIFO renamed over the file in
    between blocked the open forever (a reader waiting for a writer). Now the path is opened
    (without waiting) and the open file checked, once."""
    path = tmp_path / "m.lenet"
    shutil.copy(saved, path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = f"from lenet._native import _core\n_core.read_model_file({str(path)!r})\nprint('read')"
    proc = _python(code, {"LD_PRELOAD": str(io_faults), "LENET_FAULT_FIFO": f"{path}:{fifo}"}, timeout=20)
    assert proc.returncode == 0 and proc.stdout.strip() == "read", proc.stderr[-2000:]
    # A FIFO in the file's place is refused at once, in both languages' readers.
    os.replace(fifo, path)
    with pytest.raises(ModelFileError, match="not a regular file"):
        _core.read_model_file(str(path))
    with pytest.raises(ModelFileError):
        lenet.load(path)
