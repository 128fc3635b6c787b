"""The core's PNG fast lane (csrc/io/gray_png.cpp, _core.read_gray_images for files,
_core.decode_gray_pngs for bytes): plain 8-bit grayscale PNGs of the model's size are
decoded by the core (files with their read), anything else is left to OpenCV. It must
give OpenCV's pixels exactly, refuse every other form, and change nothing that
prepare() answers: the same rows, sources, modes and errors, in item order, as when
each item is prepared on its own (one file never takes the lane)."""

import errno
import os
import struct
import zlib

import cv2
import numpy as np
import pytest
from conftest import REPO

import lenet
from lenet import images
from lenet._native import _core

needs_decoder = pytest.mark.skipif(not _core.png_decoder, reason="built without libpng: no PNG fast lane")


@needs_decoder  # .ci/run installs libpng-dev: in lenet's CI this skip fails (conftest.CI_MAY_SKIP)
def test_the_build_has_the_fast_lane():
    assert lenet.info()["png_decoder"] == _core.png_decoder


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(pixels: np.ndarray, extra: tuple = (), depth: int = 8, color: int = 0, interlace: int = 0) -> bytes:
    """A PNG written by hand (filter 0 on every row), with extra chunks before IDAT."""
    h, w = pixels.shape[:2]
    raw = b"".join(b"\0" + pixels[y].tobytes() for y in range(h))
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, interlace))
        + b"".join(_chunk(k, d) for k, d in extra)
        + _chunk(b"IDAT", zlib.compress(raw))
        + _chunk(b"IEND", b"")
    )


@pytest.fixture(scope="module")
def digits():
    rng = np.random.default_rng(7)
    out = [cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in sorted((REPO / "examples").glob("digit-*.png"))]
    out += [rng.integers(0, 256, (28, 28), dtype=np.uint8) for _ in range(6)]
    return out


def _write(d, name: str, data: bytes) -> str:
    path = d / name
    path.write_bytes(data)
    return str(path)


@needs_decoder
def test_the_lane_gives_opencvs_pixels(tmp_path, digits):
    paths = []
    for k, img in enumerate(digits):  # OpenCV's own encoder at several levels, and a hand-made file
        for level in (0, 1, 9):
            ok, enc = cv2.imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, level])
            paths.append(_write(tmp_path, f"{k}-{level}.png", enc.tobytes()))
        paths.append(_write(tmp_path, f"{k}-hand.png", _png(img, ((b"tEXt", b"Comment\0hi"), (b"pHYs", bytes(9))))))
    files, pixels, rows = _core.read_gray_images([os.fsencode(p) for p in paths], 1 << 30, 28, 28)
    assert (rows >= 0).all() and all(f is None for f in files)
    assert pixels.shape == (len(paths), 28, 28) and pixels.dtype == np.uint8
    for p, row in zip(paths, rows):
        np.testing.assert_array_equal(pixels[row], cv2.imread(p, cv2.IMREAD_UNCHANGED), err_msg=p)


def _refused(digit: np.ndarray) -> dict:
    """Files the lane must leave to OpenCV, each with why."""
    gray = _png(digit)
    bad_crc = bytearray(gray)
    bad_crc[-20] ^= 0xFF  # inside IDAT's data: its CRC fails
    rgb = cv2.imencode(".png", cv2.cvtColor(digit, cv2.COLOR_GRAY2BGR))[1].tobytes()
    return {
        "rgb": rgb,
        "gray-alpha": _png(np.dstack([digit, digit]), color=4),
        "16-bit": cv2.imencode(".png", digit.astype(np.uint16) * 257)[1].tobytes(),
        "palette": _png(digit, ((b"PLTE", bytes(range(256)) * 3),), color=3),
        "interlaced": _png(digit, interlace=1),
        "gamma": _png(digit, ((b"gAMA", struct.pack(">I", 100000)),)),
        "icc": _png(digit, ((b"iCCP", b"x\0\0" + zlib.compress(b"profile")),)),
        "exif": _png(digit, ((b"eXIf", b"MM\0*\0\0\0\x08\0\0"),)),
        "other-size": _png(digit[:27]),
        "truncated": gray[:-30],
        "no-iend": gray[:-12],
        "bad-crc": bytes(bad_crc),
        "chunk-past-end": gray[:33] + struct.pack(">I", 1 << 30) + b"IDAT" + gray[41:],
        "jpeg": cv2.imencode(".jpg", digit)[1].tobytes(),
        "empty": b"",
    }


@needs_decoder
def test_every_other_form_is_left_to_opencv(tmp_path, digits):
    cases = _refused(digits[0])
    paths = [_write(tmp_path, f"{name}.png", data) for name, data in cases.items()]
    files, pixels, rows = _core.read_gray_images([os.fsencode(p) for p in paths], 1 << 30, 28, 28)
    assert len(pixels) == 0
    for name, data, got, row in zip(cases, cases.values(), files, rows):
        assert row == -1 and got == data, name  # the file's bytes, as read_files gives them


def test_read_errors_come_back_as_errno(tmp_path, digits):
    good = _write(tmp_path, "good.png", _png(digits[0]))
    files, pixels, rows = _core.read_gray_images(
        [os.fsencode(str(tmp_path / "missing.png")), os.fsencode(str(tmp_path)), os.fsencode(good)], 1 << 30, 28, 28
    )
    assert files[:2] == [errno.ENOENT, errno.EISDIR] and list(rows[:2]) == [-1, -1]
    assert (files[2] is None and rows[2] == 0) if _core.png_decoder else (files[2] == _png(digits[0]))
    with pytest.raises(ValueError, match="positive"):
        _core.read_gray_images([], 1 << 30, 0, 28)


def _each_alone(items, labels, hwc, mode):
    """prepare() one item at a time (one file never takes the lane), merged as one chunk would be."""
    xs, sources, modes, owner, errors = [], [], [], [], []
    for i, (item, label) in enumerate(zip(items, labels)):
        got = images.prepare([item], [label], hwc, mode)
        xs.append(got.x)
        sources += got.sources
        modes += got.modes
        owner += [i] * len(got.x)
        errors += [(i, str(e), e.source) for _, e in got.errors]
    return np.concatenate(xs), sources, modes, owner, errors


@pytest.mark.parametrize("mode", ["auto", "mnist", "photo"])
def test_a_chunk_answers_as_its_items_one_by_one(tmp_path, digits, mode):
    light = 255 - digits[3]  # a dark digit on white: the photo path in auto mode
    specials = _refused(digits[1])
    items = []
    for k, img in enumerate(digits):
        items.append(_write(tmp_path, f"d{k}.png", _png(img)))
        if k == 2:
            items.append(_write(tmp_path, "light.png", _png(light)))
            items.append(_write(tmp_path, "rgb.png", specials["rgb"]))
            items.append(str(tmp_path / "missing.png"))
        if k == 4:
            items.append(np.stack([digits[5], digits[6]]))  # a batch array: two rows of one item
            items.append(_write(tmp_path, "trunc.png", specials["truncated"]))
            items.append(_write(tmp_path, "gamma.png", specials["gamma"]))
        if k == 6:
            items.append(cv2.imencode(".png", digits[7])[1].tobytes())
    items.append(_write(tmp_path, "last.png", _png(digits[8])))
    labels = [images.label_of(item, i) for i, item in enumerate(items)]
    got = images.prepare(list(items), labels, (28, 28, 1), mode)
    x, sources, modes, owner, errors = _each_alone(items, labels, (28, 28, 1), mode)
    np.testing.assert_array_equal(got.x, x)
    assert got.sources == sources and got.modes == modes and got.owner == owner
    assert [(i, str(e), e.source) for i, e in got.errors] == errors
    assert got.single  # the last item, a file, was one image
    if mode == "auto":
        assert "photo" in modes and "mnist" in modes


@needs_decoder
def test_bytes_take_the_lane_with_opencvs_pixels(digits):
    blobs = [
        cv2.imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, level])[1].tobytes()
        for img in digits
        for level in (0, 9)
    ] + [_png(digits[0], ((b"tEXt", b"Comment\0hi"),))]
    refused = _refused(digits[0])
    others = [bytearray(blobs[0]), memoryview(blobs[0]), "a/path.png", None, 3]  # only bytes objects
    pixels, rows = _core.decode_gray_pngs(blobs + list(refused.values()) + others, 28, 28)
    assert pixels.shape == (len(blobs), 28, 28) and pixels.dtype == np.uint8
    assert rows.tolist() == list(range(len(blobs))) + [-1] * (len(refused) + len(others))
    for data, row in zip(blobs, rows):
        np.testing.assert_array_equal(pixels[row], cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED))
    assert _core.decode_gray_pngs([], 28, 28)[0].shape == (0, 28, 28)
    with pytest.raises(ValueError, match="positive"):
        _core.decode_gray_pngs(blobs, 28, -1)


@needs_decoder
@pytest.mark.parametrize("mode", ["auto", "mnist", "photo"])
def test_bytes_answer_as_they_do_without_the_lane(monkeypatch, digits, mode):
    """prepare() on bytes (a server's bodies, infer(png_bytes)): the lane changes nothing
    it answers, for one item (the lane's shortcut) and for a mixed list."""
    refused = _refused(digits[1])
    dark = [_png(img) for img in digits[:3]]
    mixed = [
        dark[0],
        _png(np.minimum(255 - digits[3], 200)),  # dark on gray paper: the photo path
        refused["rgb"],
        refused["truncated"],
        images.Named(dark[1], "<stdin>"),
        np.array(digits[4]),
        dark[2],
    ]
    cases = [[dark[0]], dark, mixed]
    got = [
        images.prepare(list(items), [images.label_of(it, i) for i, it in enumerate(items)], (28, 28, 1), mode)
        for items in cases
    ]
    monkeypatch.setattr(_core, "png_decoder", "")  # no lane: OpenCV decodes every item
    for items, g in zip(cases, got):
        want = images.prepare(list(items), [images.label_of(it, i) for i, it in enumerate(items)], (28, 28, 1), mode)
        np.testing.assert_array_equal(g.x, want.x)
        assert (g.sources, g.modes, g.owner, g.single) == (want.sources, want.modes, want.owner, want.single)
        assert [(i, str(e), e.source) for i, e in g.errors] == [(i, str(e), e.source) for i, e in want.errors]
    if mode == "auto":
        assert set(got[2].modes) == {"mnist", "photo"}


def test_a_three_channel_model_never_takes_the_lane(tmp_path, digits):
    paths = [_write(tmp_path, f"{k}.png", _png(img)) for k, img in enumerate(digits[:4])]
    got = images.prepare(paths, paths, (28, 28, 3), "mnist")
    want = np.stack([np.repeat(img[:, :, None], 3, axis=2) for img in digits[:4]]).astype(np.float32)
    np.testing.assert_array_equal(got.x, want)


def test_the_pixel_limit_still_applies(tmp_path, digits):
    paths = [_write(tmp_path, f"{k}.png", _png(img)) for k, img in enumerate(digits[:3])]
    images.set_max_image_pixels(100)
    try:
        got = images.prepare(paths, paths, (28, 28, 1), "mnist")
    finally:
        images.set_max_image_pixels(None)
    assert len(got.x) == 0 and all("exceeds the limit" in str(e) for _, e in got.errors)
