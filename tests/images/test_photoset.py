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
# The kinds of issue 21 (the first 220 single digits and 40 numbers). Measured at the
# commit that set them (lenet5): 214/220 single digits, 32/40 numbers; before the
# shadow-aware paper, polarity and underlines, 195/220 and 14/40; before the fainter
# stroke contrast, bands at the border and the ink prior of read_number, 210/220 and
# 27/40. With the weights of issue 34 (trained with the handwriting styles): 215/220, 34/40.
MIN_SINGLES, MIN_NUMBERS = 0.96, 30
# The kinds of issue 34 (make.STYLE_KINDS, STYLE_NUMBER_KINDS: 180 single digits, 32
# numbers): the shipped lenet5 of issue 21 read 162/180 (90.0%) and 17/32; the lenet5 of
# issue 34 173/180 (96.1%) and 29/32; distilled from lenet-tf, with the photo path that
# reads defocused digits, 176/180 (97.8%) and 28/32.
MIN_STYLED_SINGLES, MIN_STYLED_NUMBERS = 0.96, 27
# Every kind at 85% or more (MIN_KIND): defocus was 15/20 with the lenet5 of issue 34 (the
# photo path lost the faint parts of blurred strokes: a 9 without its loop is a 1) and
# is 18/20 since page._defocused.
MIN_KIND = 0.85
# Issue 45 (make.ROUND3_KINDS, ROUND3_NUMBER_KINDS: closed 4s with a rounded top, closed
# 4s gone over twice, 4s slanted hard; 60 single digits, 16 numbers): the lenet5 of
# issue 34 read 57/60 (rounded tops 17/20, read as 9) and 14/16 numbers; fine-tuned with
# rounded and retraced 4s among the styles (tools/train/styles.py), 60/60 and 16/16.
MIN_ROUND3_KIND, MIN_ROUND3_NUMBERS = 19, 15
# Issue 45's goals on the whole set: single digits 98.5% (455/460 at the end of the issue:
# 453 before page.FAINT_FLOOR and the second closing beside a shadow's edge), touching
# numbers 75% (6/8: 5 before number.CROSSING 0.4). Slack for another machine's rounding.
MIN_ALL_SINGLES, MIN_TOUCHING = 453, 5


@pytest.fixture(scope="module")
def scored():
    return score.score(lenet.Engine("lenet5", device="cpu"), SET)


def test_single_digits_and_numbers(scored):
    print("\n" + score.report("lenet5", scored, 0.6))
    singles = [s for s in scored["singles"] if s[0] in make.KINDS]
    numbers = [s for s in scored["numbers"] if s[0] in make.NUMBER_KINDS]
    right = sum(label == read for _, label, read, *_ in singles)
    whole = sum(label == read for _, label, read, *_ in numbers)
    assert len(singles) == 220 and len(numbers) == 40
    assert right / len(singles) >= MIN_SINGLES
    assert whole >= MIN_NUMBERS


def test_handwriting_styles_and_conditions(scored):
    """Issue 34: closed- and open-top 4s, European 1s, 7s with a bar, straight 9s, 2s
    with a loop, defocus, faint pencil on a webcam frame, a faint thin pen."""
    singles = [s for s in scored["singles"] if s[0] in make.STYLE_KINDS]
    numbers = [s for s in scored["numbers"] if s[0] in make.STYLE_NUMBER_KINDS]
    right = sum(label == read for _, label, read, *_ in singles)
    whole = sum(label == read for _, label, read, *_ in numbers)
    assert len(singles) == 180 and len(numbers) == 32
    assert right / len(singles) >= MIN_STYLED_SINGLES, f"{right}/{len(singles)}"
    assert whole >= MIN_STYLED_NUMBERS, f"{whole}/{len(numbers)}"


def test_single_digits_of_every_kind(scored):
    right = sum(label == read for _, label, read, *_ in scored["singles"])
    assert len(scored["singles"]) == 460 and right >= MIN_ALL_SINGLES, f"{right}/460"


def test_a_4_in_every_way_people_write_it(scored):
    """Issue 45: a closed 4 with a rounded top was read as 9 in real photos, and one gone
    over twice as "69"."""
    singles = score.by_kind([s for s in scored["singles"] if s[0] in make.ROUND3_KINDS])
    numbers = [s for s in scored["numbers"] if s[0] in make.ROUND3_NUMBER_KINDS]
    assert sorted(singles) == sorted(make.ROUND3_KINDS) and len(numbers) == 16
    for kind, (ok, n) in singles.items():
        assert n == 20 and ok >= MIN_ROUND3_KIND, f"{kind}: {ok}/{n}"
    whole = sum(label == read for _, label, read, *_ in numbers)
    assert whole >= MIN_ROUND3_NUMBERS, f"{whole}/{len(numbers)}"


def test_every_kind_mostly_read(scored):
    # Single digits: no kind of image may fall back to the failures the issue names
    # (pencil under a shadow read 3 of 20 before).
    for kind, (ok, n) in score.by_kind(scored["singles"]).items():
        assert ok >= MIN_KIND * n, f"{kind}: {ok}/{n}"


@pytest.mark.parametrize("kind", ["number-pencil-shadow", "number-marks"])
def test_numbers_under_a_shadow_and_underlined(scored, kind):
    ok, n = score.by_kind(scored["numbers"])[kind]  # both 0 of 8 before
    assert ok >= n // 2, f"{kind}: {ok}/{n}"


def test_touching_digits(scored):
    # 0 of 8 before the ink prior and the digit bonus of read_number (4 of 8 after).
    ok, n = score.by_kind(scored["numbers"])["number-touching"]
    assert ok >= MIN_TOUCHING, f"number-touching: {ok}/{n}"


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


# ------------------------------------------------------------------ issue 34: read_number on the new styles


def styled_number(seed, names, spec):
    """A number of 4-6 glyphs drawn at random from ``names`` (make.py's skeletons),
    photographed as ``spec`` says: (JPEG bytes, the number). Seeds 3400+: not the set's."""
    rng = np.random.default_rng([3400, seed])
    chosen = [names[k] for k in rng.integers(len(names), size=int(rng.integers(4, 7)))]
    height = rng.uniform(45, 70)
    width = rng.uniform(*spec["width"])
    patches = [make.glyph_alpha(n, height * rng.uniform(0.92, 1.08), width, rng) for n in chosen]
    gaps = [round(rng.uniform(0.2, 0.45) * height) for _ in patches[1:]] + [0]
    row = np.zeros(
        (max(p.shape[0] for p in patches) + round(0.3 * height), sum(p.shape[1] for p in patches) + sum(gaps) + 4),
        np.float32,
    )
    x = 0
    for p, g in zip(patches, gaps):
        row[: p.shape[0], x : x + p.shape[1]] = np.maximum(row[: p.shape[0], x : x + p.shape[1]], p)
        x += p.shape[1] + g
    size = (row.shape[1] + int(rng.integers(40, 120)), row.shape[0] + int(rng.integers(60, 160)))
    data = make.encode(make.photograph(row, rng, spec, size, height), rng, spec)
    return data, "".join(n.split("-")[0] for n in chosen)


CLEAN = make.NUMBER_KINDS["number-clean"]
NUMBER_STYLES = {
    # open-top 4s beside 9s: read as 9, or split into "96", by the shipped lenet5 of issue 21
    "open-four": (["4-open", "4-open-flush", "4-open-apart", "4-parallel", "9", "9-curved"], CLEAN),
    "closed-four": (["4-closed-flush", "4-triangle-flush", "4-closed", "9", "9-straight-long"], CLEAN),
    # faint pencil on a webcam frame: a 2 read as 1
    "faint-pencil": (["2", "2-loop", "1", "1-european"], make.STYLE_NUMBER_KINDS["number-faint-pencil"]),
    "european": (["1-european", "1-european-long", "1-european-based", "7", "7-bar"], CLEAN),
    # issue 45: closed 4s with a rounded top beside 9s ("8374787080" read "8379787080")
    "round-four": (["4-round", "4-round-high", "4-round-flush", "9", "9-straight-long"], CLEAN),
}


def read_styled_numbers(engine, kind, n=12):
    names, spec = NUMBER_STYLES[kind]
    right = []
    for seed in range(n):
        data, label = styled_number(seed, names, spec)
        try:
            read = engine.read_number(data).number
        except lenet.InputError:
            read = ""
        right.append((label, read))
    return right


# Of 20 numbers each (seeds 3400+), read whole by the lenet5 of issue 21 -> issue 34:
# open-top 4s beside 9s 20 -> 20; closed-top 4s (bars stopping at the stem) beside 9s
# 8 -> 20 (read as 9: "4944" -> "9949"); faint pencil 2s and 1s 9 -> 19 (European 1s
# read as 7, "2111" -> "2717"); European 1s and 7s 2 -> 20.
# Issue 45, closed 4s with a rounded top beside 9s: 8 -> 20 (the lenet5 of issue 34 ->
# fine-tuned with rounded and retraced 4s).
MIN_STYLED = {"open-four": 18, "closed-four": 18, "faint-pencil": 17, "european": 18, "round-four": 18}


@pytest.mark.parametrize("kind", list(NUMBER_STYLES))
def test_read_number_on_handwriting_styles(kind):
    read = read_styled_numbers(lenet.Engine("lenet5", device="cpu"), kind, 20)
    wrong = [f"{label} -> {number}" for label, number in read if label != number]
    print(f"\n{kind}: {20 - len(wrong)}/20 read whole; wrong: {wrong}")
    assert 20 - len(wrong) >= MIN_STYLED[kind], wrong
