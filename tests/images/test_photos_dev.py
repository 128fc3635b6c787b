"""Real photos, scans and drawings of handwritten digits (../shared/photos-dev: 216
images from 20 public repositories, read where they lie; never copied here, their
licences unchecked): the default model through the photo path must keep issue 55's
figures. Scored by tools/photoset/real.py, which splits the set into a tuning half and a
confirming half by repository; the per-half table is printed (-s)."""

import sys
from pathlib import Path

import pytest

import lenet

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "photoset"))
import real  # noqa: E402

# Issue 55 asked for 99% of the 185 single digits, every one of the 31 numbers whole, and
# "no digit found" on none. Before it (main e1baa3a): 181 and 29, frozen599/0.png "no
# digit found"; after it, 182 (three 7s and 6s of one writer the network misreads) and
# 30 (harkib/image2.JPG's cursive 3 and 6 missed); since read_number's second reader
# (lenet-tf for the candidate digits lenet5 is unsure of), 31. Held with one of slack
# for another machine's rounding. The same photo path with lenet-tf reads 184 and 31.
MIN_SINGLES, MIN_NUMBERS = 181, 30


@pytest.fixture(scope="module")
def scored():
    if not (real.DEFAULT_SET / "LABELS.csv").is_file():
        pytest.skip(f"photos-dev is not in {real.DEFAULT_SET} (../shared beside the checkout, or LENET_PHOTOS_DEV)")
    return real.score(lenet.Engine("lenet5", device="cpu", threads=2), real.DEFAULT_SET, numbers=NUMBERS)


NUMBERS: dict = {}  # path -> the Number read, filled by the fixture


def test_single_digits_and_numbers(scored):
    print("\n" + real.report("lenet5", scored))
    singles = [s for s in scored if len(s[3]) == 1]
    numbers = [s for s in scored if len(s[3]) > 1]
    assert len(singles) == 185 and len(numbers) == 31
    missed = [f"{path}: {read}" for _, _, path, label, read, *_ in scored if label != read]
    assert sum(s[3] == s[4] for s in singles) >= MIN_SINGLES, missed
    assert sum(s[3] == s[4] for s in numbers) >= MIN_NUMBERS, missed


def test_every_image_holds_a_digit_found(scored):
    """frozen599/0.png, a brush 0 that fills its canvas, was 'no digit found' (the edge of
    something) before issue 55."""
    assert [path for _, _, path, _, read, *_ in scored if read in ("none", "")] == []


def test_several_digits_are_said_where_a_number_is_read_as_one_digit(scored):
    """Issue 55: each number, asked for as one digit, says that several were seen; no
    photo of one digit does."""
    assert [path for _, _, path, label, *_, several in scored if several != (len(label) > 1)] == []


def test_every_number_is_read_whole_with_no_mark_skipped_and_no_digit_in_doubt(scored):
    """Issue 63: every photos-dev number read whole (31 of 31, its goal), none of them
    naming a mark left out or a digit under 0.6: where one is named on a hidden photo, it is
    news, not habit."""
    assert len(NUMBERS) == 31
    labels = {path: label for _, _, path, label, *_ in scored}
    assert [p for p, n in NUMBERS.items() if n.number != labels[p]] == []
    assert [(p, n.skipped, n.in_doubt()) for p, n in NUMBERS.items() if n.skipped or n.in_doubt()] == []
