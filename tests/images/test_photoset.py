"""The photo-like test set (tests/data/photoset, made by tools/photoset/make.py from
held-out MNIST *training* digits and stroke glyphs): the default model through the
photo path must keep what the issue-21 changes gained on it. Scored by the same code
as tools/photoset/score.py; the per-kind table is printed (-s)."""

import sys
from pathlib import Path

import numpy as np
import pytest

import lenet

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "photoset"))
import make  # noqa: E402
import score  # noqa: E402

SET = Path(__file__).resolve().parents[1] / "data" / "photoset"
# Measured at the commit that set them (lenet5): 214/220 single digits, 32/40 numbers;
# before the shadow-aware paper, polarity and underlines, 195/220 and 14/40; before the
# fainter stroke contrast, bands at the border and the ink prior of read_number,
# 210/220 and 27/40.
MIN_SINGLES, MIN_NUMBERS = 0.96, 30


@pytest.fixture(scope="module")
def scored():
    return score.score(lenet.Engine("lenet5", device="cpu"), SET)


def test_single_digits_and_numbers(scored):
    print("\n" + score.report("lenet5", scored, 0.6))
    singles = scored["singles"]
    right = sum(label == read for _, label, read, *_ in singles)
    numbers = sum(label == read for _, label, read, *_ in scored["numbers"])
    assert len(singles) == 220 and len(scored["numbers"]) == 40
    assert right / len(singles) >= MIN_SINGLES
    assert numbers >= MIN_NUMBERS


def test_every_kind_mostly_read(scored):
    # Single digits: no kind of image may fall back to the failures the issue names
    # (pencil under a shadow read 3 of 20 before).
    for kind, (ok, n) in score.by_kind(scored["singles"]).items():
        assert ok >= 0.85 * n, f"{kind}: {ok}/{n}"


@pytest.mark.parametrize("kind", ["number-pencil-shadow", "number-marks"])
def test_numbers_under_a_shadow_and_underlined(scored, kind):
    ok, n = score.by_kind(scored["numbers"])[kind]  # both 0 of 8 before
    assert ok >= n // 2, f"{kind}: {ok}/{n}"


def test_touching_digits(scored):
    # 0 of 8 before the ink prior and the digit bonus of read_number (4 of 8 after).
    ok, n = score.by_kind(scored["numbers"])["number-touching"]
    assert ok >= 3, f"number-touching: {ok}/{n}"


def test_blank_photo_like_pages_are_mostly_no_digit():
    """Pages of every kind with nothing written on them (make.photograph of an empty row,
    10 per kind, seed 99: not the test set's): a page under a shadow was read as a 1 at
    99.99% (its edge), 10 of 110 before bands at the border were set apart, 5 after."""
    engine = lenet.Engine("lenet5", device="cpu")
    read = []
    for k, (kind, spec) in enumerate(make.KINDS.items()):
        for i in range(10):
            rng = np.random.default_rng([99, 10 * k + i])
            side = int(rng.integers(220, 300))
            page = make.photograph(np.zeros((60, 40), np.float32), rng, spec, (side, side), 80.0)
            if engine.infer([make.encode(page, rng, spec)], on_error=lambda e: None):
                read.append(kind)
    print(f"\nblank photo-like pages read as a digit: {len(read)} of 110 {read}")
    assert len(read) <= 6, read
