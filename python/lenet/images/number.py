"""A number written left to right, read digit by digit: the third stage of reading
real images (see ``page``'s docstring for all of them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from ..errors import InputError
from .digit import Part, frame, whole
from .page import Page

# ------------------------------------------------------------------ a number
#
# A number is read in three steps. ``_pieces``: the components of its ink, each wide
# one also cut where touching digits could meet (``_cut_paths``), ordered left to
# right. ``_runs``: every run of adjacent pieces that could be one digit, drawn as
# MNIST and read by the network in one batch. ``_choose``: the most probable reading
# of all the pieces (dynamic programming): each piece in one digit or a stray mark.
# Sizes are relative to the digits' height (the median height of the tall components).

# Width over height of MNIST digits per class (the 5,000 training digits the shipped
# models learnt from): mean and standard deviation.
ASPECT = np.array(
    [
        [0.93, 0.49, 0.97, 0.84, 0.82, 0.99, 0.74, 0.81, 0.79, 0.71],
        [0.16, 0.20, 0.21, 0.15, 0.16, 0.23, 0.16, 0.17, 0.17, 0.14],
    ]
)
# Handwriting is more slanted and rotated than MNIST: its spread of widths is wider by
# SLANT (1.3 before issue 45; see TOUCHING).
SLANT = 2.0
# Ink per class: the sum of a digit's frame (``frame``: strokes at MNIST's median width,
# in the 20-px box) over 255, mean and standard deviation, measured on 4,000 MNIST
# training digits drawn by ``to_mnist``. Two touching digits read as one have about
# twice a digit's stroke length in one box (the network, which never saw a pair, may
# still be sure of them); a fragment of a digit has too little. Handwriting's spread is
# wider than MNIST's by INK_SPREAD.
INK = np.array(
    [
        [118.9, 55.0, 104.8, 105.3, 90.1, 101.3, 98.8, 83.7, 110.1, 93.4],
        [14.3, 8.3, 17.2, 16.7, 14.0, 20.1, 17.4, 13.8, 17.3, 15.2],
    ]
)
INK_SPREAD = 1.6  # 1.3 before issue 45 (see TOUCHING)
# Each digit's width, height and ink are scored as -z²/2, which costs a perfectly usual
# digit 1/2 per term on average: a reading of more digits would pay it more often (two
# touching digits read as one, a wide one, pay once). DIGIT_BONUS gives it back.
DIGIT_BONUS = 1.5
# A digit less tall than SHORT is suspect (a fragment), one taller than TALL too (a
# digit with a stray mark): beyond them its odds fall as a normal of sd 0.1.
SHORT, TALL = 0.9, 1.15
# Prior odds of the accidents of handwriting: two digits that touch (a component cut in
# two; each further stroke the cut crosses, as through the middle of a 0, CROSSING
# more), and a digit whose strokes do not meet (each further component in it).
# Issue 45 set SLANT 1.3 -> 2.0, INK_SPREAD 1.3 -> 1.6, TOUCHING 0.1 -> 0.2 and OVERLAP
# 0 -> 4, chosen on numbers none of the tests use (make.py at seed 8, 80 of each kind,
# and the photo-like set at seed 7, 16 of each), the network's readings held fixed:
# read whole 904 -> 913 of 1,056 (touching 61 -> 64 of 96), no kind fewer. At seed 45,
# not chosen on: 152 -> 156 of 176. With five cuts and ARC (below), TOUCHING 0.2 -> 0.3
# on the same sets: touching 61 -> 62 of 80 at seed 8, the rest as before (0.25-0.35
# read the same; 0.4 loses a number with marks at seed 7). CROSSING 0.2 -> 0.4: touching
# digits often meet where the cut crosses two strokes (a 0's side and its neighbour's),
# not only through a 0's middle; on make.py's numbers at seeds 8 and 9 (80 touching
# each, 880 of every kind at seed 8) and the set at seed 7: touching 62 -> 63 and
# 61 -> 63 of 80, no kind fewer (0.35 read the same, 0.45 loses a number in 3 kinds).
TOUCHING, CROSSING, BROKEN = 0.3, 0.4, 0.1
# Strokes of different components that lie over one another (the overlap of the
# narrower one's columns, ``_overlap``) belong to one digit unless the network reads
# them better apart: a digit boundary between them costs OVERLAP times that share.
OVERLAP = 4.0
# A digit that does not need its first or last piece (the rest alone reads as the same
# class, at SURE or more) while that piece alone reads as a digit (at ALONE or more) and
# is a digit's height (SHORT) is more likely two digits: a 1 that overlaps its neighbour
# ("41" read as 4 at 99.8%, the 4 alone as 4 at 99.8%, the 1 alone as 1 at 93%). Such a
# reading of one digit costs REDUNDANT. Chosen on make.py's numbers at seed 8 (80 of
# each kind) and the photo-like set at seed 7: touching 52 -> 54 of 80 and 12 -> 12 of
# 16, no kind fewer (3 cost a pencil number, 4 five numbers). The piece must read as
# another class than the digit: a 1 with a flag and a base cut down its stem reads as 1
# from either sliver, and the charge made "311" read "34" (the two 1s as one 4; issue 63,
# rows.py's seeds 0-999: 962 -> 963 read whole, the drawn sets as before).
REDUNDANT, SURE, ALONE = 2.0, 0.99, 0.9
# A 1 is a straight stroke; an arc of a 0 or the hook of a 4, cut off, reads as 1 too
# (a pencil 0 in two arcs read as "11" at 98-100% each). A reading of 1 whose stroke
# bows (``_bend``) more than BEND costs ARC per MNIST pixel beyond: the arcs of such 0s
# bow 1.8-4.4 px, MNIST's training 1s 0.5 (the median; 1.4 at the 90th percentile).
# Chosen with MAX_CUTS 3 -> 5 and PAIR_WIDTH 0.5 -> 0.3 on
# make.py's numbers at seed 8 (80 of each kind) and the photo-like set at seed 7, the
# network's readings held fixed: touching 54 -> 61 of 80 and 12 -> 13 of 16, every
# number 783 -> 793 of 880, no kind fewer (more cuts alone: 61 of 80, but 4 kinds lost
# a number each, 0s and a 4 read "11"). ARC 2-3 with BEND 0.75-1.25 read the same.
ARC, BEND = 2.0, 1.0
# Two components each as tall as a digit, side by side, are two digits far more often
# than one digit's strokes (its bar, flag, base or a 4's arm are shorter): a digit of
# such components pays TALL_PARTS for each beyond the first (a 1 between a 6 and an 8
# was read as one 6, and a 6 beside an 8 as one 4 at 99.7%).
TALL_PARTS = 2.0
# A piece cut off one end of a component, shorter than a digit, while the rest reads as
# the class the whole reads (both at SURE or more), is that digit's arm or loop: read as a
# digit of its own it pays PART_OF (``_part_of``; a 4 read as "14"). On rows.py's numbers
# at seeds 0-299, 277 -> 278 of 300 read whole at 1, 2 and 4 alike; the drawn sets at
# seeds 7, 45, 8 and 2026 and photos-dev read as before.
PART_OF = 2.0
SKIP = 30.0  # a stray mark as big as a digit costs e^-30, one a third as big e^-3.3
# The network's probabilities are calibrated on single MNIST digits; of what is not one
# digit (two touching digits read as one, a fragment) it is surer than it should be: a
# touching "19" reads as 9 at 0.79, as 0 at 0.93. Its doubt counts DOUBT times in a
# reading's odds. Measured on generated numbers none of the tests use (make.py's
# touching numbers at seed 8, photo_fixtures at seeds 100-102, a photo-like set at seed
# 7), numbers read whole by lenet5: touching 37 -> 43 of 80, clean 35 -> 36 of 40, the
# others as many or more; lenet-tf and lenet-keras alike (touching +9 and +5).
DOUBT = 8.0
FRAGMENT = 0.15  # smaller components are specks, neither digits nor parts of one
# A component OFF_ROW of the digits' height or more above or below the tall components
# within ROW_REACH of it sideways is off the row: never part of a digit (a short mark
# below a 2 was cut into the 2's foot, read as a 9), named if it is a digit's size.
OFF_ROW, ROW_REACH = 0.15, 1.5
# Ink left out of every digit read is named (``Number.skipped``) when its longer side is
# NAMED of the digits' height or more; a rule line is MAX_WIDTH long or more and at most
# RULE_THICK thick.
NAMED, RULE_THICK = 0.5, 0.3
MAX_GAP = 0.25  # the widest gap between two components of one digit
MAX_WIDTH = 1.8  # the widest digit (a 2 with a long tail)
# A component PAIR_WIDTH wide may be two touching digits (two 1s), twice as wide three;
# MAX_CUTS per component at most (0.5 and 3 before issue 45's ARC).
PAIR_WIDTH = 0.3
MAX_CUTS = 5
CUT_SIDE = 0.12  # the narrowest piece a cut may leave
STEP = 0.5  # the cost of a cut moving one column sideways, against 1 per ink pixel it crosses
# The constants were tuned on numbers from photo_fixtures with seeds 100-103, not on
# the test's seed.
# A second reader (issue 55): the candidate digits that the engine's network is unsure
# of (its top probability under RECHECK_BELOW) are read again by a larger network, whose
# reading replaces its own, in the choice of the cuts and in the answer (which shipped
# models have one: ``shipped.NUMBER_RECHECK``). Chosen on the drawn numbers (make.py at
# seeds 7, 45 and 8, and tests/data/photoset): with lenet5 rechecked by lenet-tf, every
# threshold from 0.6 to 0.9 reads as many numbers as before or more on each set (1,210 to
# 1,212 of 1,320, against 1,204); 0.6, where a calibrated shipped model is right about
# 60% of the time, sends the fewest candidates (12% of them). Rechecked by lenet-keras,
# fewer numbers are read. On single digits (``infer``) it read no photo more at 0.6 and
# lost drawn digits at every threshold (docs/real-images.md): not used there.
RECHECK_BELOW = 0.6


def rechecked(
    proba: Callable[[np.ndarray], np.ndarray], second: Callable[[], Callable[[np.ndarray], np.ndarray]]
) -> Callable[[np.ndarray], np.ndarray]:
    """``proba`` with the rows it is unsure of (top probability under RECHECK_BELOW) read by
    the network ``second()`` gives instead (called only when a row needs it: it may load
    one)."""

    def read(rows: np.ndarray) -> np.ndarray:
        p = proba(rows)
        unsure = p.max(axis=1) < RECHECK_BELOW
        if unsure.any():
            if not p.flags.writeable:
                p = p.copy()
            p[unsure] = second()(rows[unsure])
        return p

    return read


def _cut_paths(page: Page, label: int, height: float) -> list[tuple[np.ndarray, int]]:
    """Where component ``label`` may be cut into touching digits, left to right:
    per row of its box, the first column of the right-hand digit, and how many
    strokes the cut crosses. The cuts are the paths from its top to its bottom that
    cross the least ink (a pixel costs 1, a move one column sideways STEP), so that
    they pass between digits that overlap and cross where they touch: the best few
    (one per PAIR_WIDTH of width, MAX_CUTS at most), each leaving pieces at least
    CUT_SIDE wide."""
    x, y, w, h = page.boxes[label]
    side = max(2, round(CUT_SIDE * height))
    most = min(MAX_CUTS, int(w / (PAIR_WIDTH * height)))
    if most < 1 or w < 2 * side + 1 or h < 2:
        return []
    ink = (page.labels[y : y + h, x : x + w] == label).astype(np.float32)
    # cost[c]: the least cost of a path from the top row to column c of row r; came[r, c]: its move into row r.
    cost, came = ink[0].copy(), np.zeros((h, w), np.int8)
    for r in range(1, h):
        moves = np.stack([np.r_[np.inf, cost[:-1]] + STEP, cost, np.r_[cost[1:], np.inf] + STEP])
        came[r] = np.argmin(moves, axis=0) - 1
        cost = moves[came[r] + 1, np.arange(w)] + ink[r]
    ends = np.arange(side, w - side)
    minima = ends[(cost[ends] <= cost[ends - 1]) & (cost[ends] <= cost[ends + 1])]
    paths: list[tuple[np.ndarray, int]] = []
    for c in minima[np.argsort(cost[minima], kind="stable")]:
        path = np.empty(h, np.int64)
        path[-1] = c
        for r in range(h - 1, 0, -1):
            path[r - 1] = path[r] + came[r, path[r]]
        # Not a sliver off either end, and not (nearly) a cut already taken.
        if side <= path.mean() <= w - side and all(np.abs(path - q).mean() >= side for q, _ in paths):
            on = ink[np.arange(h), path] > 0
            paths.append((path, int(on[0]) + int(np.count_nonzero(on[1:] & ~on[:-1]))))
            if len(paths) == most:
                break
    return sorted(((x + p, n) for p, n in paths), key=lambda t: float(t[0].mean()))


def _pieces_of(page: Page, label: int, cuts: list[tuple[np.ndarray, int]]) -> list[Part]:
    """Component ``label`` cut along ``cuts`` (``_cut_paths``): its pieces, left to right."""
    if not cuts:
        return whole(page, [label])
    x, y, w, h = page.boxes[label]
    mine = page.labels[y : y + h, x : x + w] == label
    columns = np.arange(x, x + w)[None, :]
    paths = [p for p, _ in cuts]
    pieces = []
    for left, right, crossings in zip([None] + paths, paths + [None], [n for _, n in cuts] + [0]):
        inside = mine.copy()
        if left is not None:
            inside &= columns >= left[:, None]
        if right is not None:
            inside &= columns < right[:, None]
        used = np.nonzero(inside.any(axis=0))[0]
        if used.size:
            pieces.append(Part(label, int(x + used[0]), int(x + used[-1] + 1), left, right, crossings))
    return pieces


def _parts(pieces: list[Part]) -> list[Part]:
    """Adjacent pieces as one digit's parts: the pieces of one component merged."""
    merged: dict[int, Part] = {}
    for p in pieces:
        q = merged.get(p.label)
        merged[p.label] = (
            p if q is None else Part(p.label, min(q.x0, p.x0), max(q.x1, p.x1), q.left, p.right, p.crossings)
        )
    return sorted(merged.values(), key=lambda p: p.x0)


def _off_row(page: Page, labels: np.ndarray, tall: np.ndarray, height: float) -> np.ndarray:
    """Which of ``labels`` lie above or below the row of the ``tall`` components (those of
    a digit's height): OFF_ROW of the digits' height or more from the rows of every tall
    component within ROW_REACH of it sideways (of all of them where none is that near),
    and not tall themselves. A number written on a slant keeps its broken strokes: each is
    beside a tall neighbour of its own height."""
    bx, by, bw, bh = (page.boxes[tall, k] for k in range(4))
    off = np.zeros(len(labels), bool)
    for k, label in enumerate(labels):
        if label in tall:
            continue
        x, y, w, h = page.boxes[label]
        near = (bx < x + w + ROW_REACH * height) & (bx + bw > x - ROW_REACH * height)
        near = near if near.any() else np.ones_like(near)
        gap = np.maximum(by[near] - (y + h), y - (by[near] + bh[near]))
        off[k] = gap.min() >= OFF_ROW * height
    return off


def _pieces(page: Page) -> tuple[list[Part], float, np.ndarray]:
    """The pieces of a number, left to right, its digits' height, and the components
    set aside as off the row (``_off_row``)."""
    ids = page.ink_labels()
    big = ids[page.side[ids] >= page.min_digit]
    heights = page.boxes[big, 3]
    height = float(np.median(heights[heights >= 0.5 * heights.max()]))
    labels = ids[page.side[ids] >= FRAGMENT * height]
    off = _off_row(page, labels, big[heights >= 0.5 * heights.max()], height)
    labels, off_row = labels[~off], labels[off]
    # Components by their middles; the pieces of one together, so that a mark within
    # a touching pair's span cannot come between the two halves of a digit.
    labels = labels[np.argsort(2 * page.boxes[labels, 0] + page.boxes[labels, 2], kind="stable")]
    pieces: list[Part] = []
    for label in labels:
        pieces += _pieces_of(page, int(label), _cut_paths(page, int(label), height))
    return pieces, height, off_row


@dataclass
class _Run:
    """A digit hypothesis: pieces i..j drawn as ``frame``, with ``box`` (x, y, w,
    h, working pixels), made of ``components`` components."""

    i: int
    j: int
    frame: np.ndarray
    box: np.ndarray
    components: int
    tall: int  # of them as tall as a digit (SHORT)


def _runs(page: Page, pieces: list[Part], height: float) -> list[_Run]:
    """Every run of adjacent pieces that may be one digit (each piece alone; longer
    runs up to MAX_WIDTH wide, with no gap between components wider than MAX_GAP),
    drawn."""
    runs = []
    for i in range(len(pieces)):
        for j in range(i, len(pieces)):
            parts = _parts(pieces[i : j + 1])
            if j > i and max(p.x1 for p in parts) - parts[0].x0 > MAX_WIDTH * height:
                break  # longer runs are wider still
            if max([p.x0 - max(q.x1 for q in parts[:k]) for k, p in enumerate(parts) if k] + [0]) > MAX_GAP * height:
                continue
            drawn = frame(page, parts)
            if drawn is not None:
                tall = sum(page.boxes[p.label, 3] >= SHORT * height for p in parts)
                runs.append(_Run(i, j, *drawn, len(parts), int(tall)))
    return runs


def _overlap(left: list[Part], right: list[Part]) -> float:
    """How much pieces of different components on either side of a digit boundary lie
    over one another: the largest share of the narrower one's columns that the other
    covers (0: side by side, 1: one above the other)."""
    most = 0.0
    for a in left:
        for b in right:
            if a.label != b.label:
                both = min(a.x1, b.x1) - max(a.x0, b.x0)
                most = max(most, both / max(1, min(a.x1 - a.x0, b.x1 - b.x0)))
    return most


def _redundant(score: dict, runs: list[_Run], probs: np.ndarray, height: float) -> None:
    """Charges REDUNDANT in ``score`` ((i, j) -> (log odds, run)) to each run of pieces
    that reads as the same class without its first or last piece (at SURE or more)
    while that piece alone, a digit's height, reads as a digit of another class (at
    ALONE or more)."""
    index = {(r.i, r.j): k for k, r in enumerate(runs)}
    for (i, j), (odds, k) in list(score.items()):
        c = int(np.argmax(probs[k]))
        for rest, alone in (((i, j - 1), (j, j)), ((i + 1, j), (i, i))):
            if j > i and rest in index and alone in index:
                pr, pa = probs[index[rest]], probs[index[alone]]
                if (
                    pr.argmax() == c
                    and pr[c] >= SURE
                    and pa.max() >= ALONE
                    and pa.argmax() != c
                    and runs[index[alone]].box[3] >= SHORT * height
                ):
                    score[i, j] = (odds - REDUNDANT, k)
                    break


def _part_of(score: dict, runs: list[_Run], probs: np.ndarray, pieces: list[Part], height: float) -> None:
    """Charges PART_OF in ``score`` to each run of the pieces at one end of a component cut
    in two that is shorter than a digit (SHORT) while the rest of the component reads as
    the class the whole reads, both at SURE or more: a 4's arm or a 2's loop cut off, not a
    digit of its own (a 4 read as "14", a looped 2 as "12")."""
    index = {(r.i, r.j): k for k, r in enumerate(runs)}
    spans: dict[int, list[int]] = {}
    for k, p in enumerate(pieces):
        spans.setdefault(p.label, []).append(k)
    for ks in spans.values():
        a, b = ks[0], ks[-1]
        whole = index.get((a, b))
        if b == a or whole is None or probs[whole].max() < SURE:
            continue
        c = int(np.argmax(probs[whole]))
        for m in range(a, b):
            for end, rest in (((a, m), (m + 1, b)), ((m + 1, b), (a, m))):
                if end in score and rest in index:
                    pr = probs[index[rest]]
                    if pr.argmax() == c and pr[c] >= SURE and runs[index[end]].box[3] < SHORT * height:
                        odds, k = score[end]
                        score[end] = (odds - PART_OF, k)


def _bend(drawn: np.ndarray) -> float:
    """How far a stroke drawn as MNIST (``frame``) bows sideways: the ink's centre per
    row, fitted as a parabola over the rows it spans, the parabola's rise from its
    middle to its ends (MNIST pixels; 0 for a straight stroke, slanted or not; an arc
    of a 0 bows 2-4)."""
    f = drawn.astype(np.float64) / 255
    mass = f.sum(axis=1)
    rows = np.nonzero(mass > 0.5)[0]
    if rows.size < 3:
        return 0.0
    centre = f[rows] @ np.arange(f.shape[1]) / mass[rows]
    t = (rows - rows.mean()) / max(1.0, (rows[-1] - rows[0]) / 2)
    weight = np.sqrt(mass[rows])
    design = np.stack([np.ones_like(t), t, t * t], axis=1) * weight[:, None]
    return float(np.linalg.lstsq(design, centre * weight, rcond=None)[0][2])


def _choose(
    pieces: list[Part], sides: np.ndarray, runs: list[_Run], probs: np.ndarray, height: float
) -> tuple[list[int], list[int], float]:
    """The runs (indices into ``runs``, left to right) of the most probable reading
    of all the pieces, each piece in one digit or a stray mark; those of the most probable
    reading of another number of digits (``_runner_up``; [] where there is none); and how
    much less probable that is, in log odds (inf where there is none). A digit counts with
    the probability the network gives its best class (``probs``, one row per run; its
    log times DOUBT),
    how usual its width is for that class (``ASPECT``, SLANT) and its height for the
    number (SHORT, TALL), and BROKEN per further component, REDUNDANT where it does
    not need a piece that reads as a digit alone (``_redundant``), ARC where a 1 bows
    like an arc (``_bend``); a digit boundary through a
    component with TOUCHING (and CROSSING); a stray mark (a whole component, of
    longer side ``sides``) with SKIP."""
    n = len(pieces)
    score = {}  # (i, j) -> (log odds of run i..j as a digit, its index)
    for k, (r, pk) in enumerate(zip(runs, probs)):
        c = int(np.argmax(pk))
        _, _, w, h = r.box
        z = (w / h - ASPECT[0, c]) / (SLANT * ASPECT[1, c])
        odd = max(0.0, SHORT - h / height, h / height - TALL) / 0.1
        ink = (float(r.frame.sum()) / 255 - INK[0, c]) / (INK_SPREAD * INK[1, c])
        score[r.i, r.j] = (
            DOUBT * float(np.log(max(pk[c], 1e-30)))
            - z * z / 2
            - odd * odd / 2
            - ink * ink / 2
            + (r.components - 1) * np.log(BROKEN)
            - TALL_PARTS * max(0, r.tall - 1)
            - (ARC * max(0.0, abs(_bend(r.frame)) - BEND) if c == 1 and ARC else 0.0)
            + DIGIT_BONUS,
            k,
        )
    _redundant(score, runs, probs, height)
    if PART_OF:
        _part_of(score, runs, probs, pieces, height)
    # boundary[i]: the log odds of a digit boundary before piece i, for each component on both sides.
    boundary = [0.0] * (n + 1)
    last: dict[int, Part] = {}  # per component, its last piece before i
    for i, p in enumerate(pieces):
        for label in set(last) & {q.label for q in pieces[i:]}:
            boundary[i] += np.log(TOUCHING) + max(0, last[label].crossings - 1) * np.log(CROSSING)
        boundary[i] -= OVERLAP * _overlap(pieces[max(0, i - 2) : i], pieces[i : i + 2])
        last[p.label] = p
    # A stray mark is skipped whole (SKIP): a component cut into pieces only with all of
    # them (its pieces are adjacent), so that a mark wide enough to be cut can be left out.
    first: dict[int, int] = {}
    for k, p in enumerate(pieces):
        first.setdefault(p.label, k)
    skips = {}  # j -> (i, log odds): pieces i..j-1, the whole of a component, skipped as a mark
    for j in range(1, n + 1):
        if j == n or pieces[j].label != pieces[j - 1].label:  # the last piece of its component
            i = first[pieces[j - 1].label]
            skips[j] = (i, -SKIP * (sides[j - 1] / height) ** 2)
    best, back = _readings(n, score, boundary, skips)
    length = int(np.argmax(best[n]))
    if length == 0:  # everything looked stray: the likeliest single digit
        return [max(score.values())[1]], [], np.inf
    other, odds = _runner_up(best, back, length)
    return _path(back, n, length), other, best[n, length] - odds


def _readings(n: int, score: dict, boundary: list[float], skips: dict) -> tuple[np.ndarray, dict]:
    """The dynamic programming over the ``n`` pieces, per number of digits: ``best[j, m]``,
    the log odds of the best reading of pieces 0..j-1 in m digits, and ``back``: (j, m) ->
    (i, run ending it, or -1 where pieces i..j-1 are a mark skipped). From ``_choose``'s
    terms: ``score``, (i, j) -> (log odds, run) of pieces i..j as a digit; ``boundary``, of
    a digit starting at each piece; ``skips``, j -> (i, log odds) of pieces i..j-1 skipped."""
    best = np.full((n + 1, n + 2), -np.inf)
    back: dict[tuple[int, int], tuple[int, int]] = {}
    best[0, 0] = 0.0
    for j in range(1, n + 1):
        if j in skips:
            i, odds = skips[j]
            for m in np.flatnonzero(best[i] + odds > best[j]):
                best[j, m], back[j, m] = best[i, m] + odds, (i, -1)
        for i in range(j):
            if (i, j - 1) in score:
                odds, k = score[i, j - 1]
                for m in np.flatnonzero(best[i, :-1] + odds + boundary[i] > best[j, 1:]):
                    best[j, m + 1], back[j, m + 1] = best[i, m] + odds + boundary[i], (i, k)
    return best, back


def _path(back: dict, j: int, m: int) -> list[int]:
    """The runs, left to right, of the best reading of pieces 0..j-1 in m digits (``_readings``)."""
    runs = []
    while j > 0:
        i, k = back[j, m]
        if k >= 0:
            runs.append(k)
            m -= 1
        j = i
    return runs[::-1]


def _runner_up(best: np.ndarray, back: dict, length: int) -> tuple[list[int], float]:
    """The runs of the most probable reading of all the pieces (``_readings``) with another
    number of digits than ``length``, and its log odds; [] and -inf where there is none."""
    n = best.shape[0] - 1
    lengths = [m for m in range(1, n + 2) if m != length and np.isfinite(best[n, m])]
    if not lengths:
        return [], -np.inf
    m = max(lengths, key=lambda q: best[n, q])
    return _path(back, n, m), float(best[n, m])


def _skipped(
    page: Page, labels: list[int], off_row: np.ndarray, height: float
) -> list[tuple[tuple[int, int, int, int], str]]:
    """The ink left out of every digit read (components ``labels``), a digit's size or
    larger, as (box in working pixels, why), left to right. Components of the row within
    MAX_GAP of one another are one mark (a digit broken into pieces too small to be read:
    together they are a digit's size); each is named if its longer side is NAMED of the
    digits' height or more."""
    rows, cols = page.labels.shape
    marks: list[list] = []  # [union box x0, y0, x1, y1; off the row; holds more than specks]
    for label in sorted(labels, key=lambda q: int(page.boxes[q, 0])):
        x, y, w, h = (int(v) for v in page.boxes[label])
        box, off, big = np.array([x, y, x + w, y + h]), bool(label in off_row), max(w, h) >= FRAGMENT * height
        last = marks[-1] if marks else None
        if last is not None and not off and not last[1] and x - last[0][2] <= MAX_GAP * height:
            last[0][:2], last[0][2:] = np.minimum(last[0][:2], box[:2]), np.maximum(last[0][2:], box[2:])
            last[2] |= big
        else:
            marks.append([box, off, big])
    out = []
    for (x0, y0, x1, y1), off, big in marks:
        w, h = x1 - x0, y1 - y0
        if not big or max(w, h) < NAMED * height:
            continue
        if w >= MAX_WIDTH * height and h <= RULE_THICK * height:
            why = "rule line"
        elif x0 <= 0 or y0 <= 0 or x1 >= cols or y1 >= rows:
            why = "margin"
        elif off:
            why = "off the row"
        else:
            why = "stray mark"
        out.append(((int(x0), int(y0), int(w), int(h)), why))
    return out


class FoundNumber(NamedTuple):
    """What ``find_number`` found: the digits as MNIST images (float32 (28, 28), 0..255)
    and their boxes (x, y, w, h), left to right; the ink of a digit's size that no digit
    holds, as (box, why) (``_skipped``); the most probable reading with another number of
    digits ("" where there is none) and how much less probable it is, in log odds
    (``_choose``)."""

    frames: list[np.ndarray]
    boxes: list[tuple[int, int, int, int]]
    skipped: list[tuple[tuple[int, int, int, int], str]]
    runner_up: str
    margin: float


def find_number(img: np.ndarray, proba: Callable[[np.ndarray], np.ndarray], source: str = "<array>") -> FoundNumber:
    """The digits of a number written left to right in ``img`` (boxes in its pixels).
    ``proba``: the network, a batch of MNIST images (n, 28, 28) to class probabilities (n,
    classes). Raises InputError ("no digit found") when there is no digit (as
    ``to_mnist``)."""
    page = Page(img, source)
    pieces, height, off_row = _pieces(page)
    runs = _runs(page, pieces, height)
    if not runs:  # pragma: no cover - a piece has ink, so it draws
        raise InputError(f"{source}: no digit found")
    probs = proba(np.stack([r.frame for r in runs]))
    picked, other, margin = _choose(pieces, page.side[[p.label for p in pieces]], runs, probs, height)
    chosen = [runs[k] for k in picked]
    used = {pieces[k].label for r in chosen for k in range(r.i, r.j + 1)}
    left = [int(q) for q in page.ink_labels() if int(q) not in used]
    skipped = [(tuple(v * page.n for v in box), why) for box, why in _skipped(page, left, off_row, height)]
    return FoundNumber(
        [r.frame for r in chosen],
        [tuple(int(v) * page.n for v in r.box) for r in chosen],
        skipped,
        "".join(str(int(np.argmax(probs[k]))) for k in other),
        float(margin),
    )
