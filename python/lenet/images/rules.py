"""Lines that are not writing: those of ruled or squared paper (and a margin line),
and underlines, dashes and crossings-out; ``page.Page`` takes them out of the ink
before it looks for digits."""

from __future__ import annotations

from typing import Optional

import cv2
import numpy as np

# Ruled and squared paper. A line is ink along a straight path across at least
# RULE_LENGTH of the image's width (height) and RULE_MIN px, thin along most of its
# length (RULE_SLIM of its length, where a pen's stroke is 4% of a digit's height or
# more), and RULE_OVER times longer than the tallest ink beside the lines, so that the
# bar of a 7 filling a tight crop is not a line; alone, one such line is a 1, two or
# more are a blank ruled page. Lines are found in runs a quarter of the image long in
# a band RULE_TILT px either side: tilted up to about 2 degrees.
RULE_LENGTH, RULE_MIN, RULE_SLIM, RULE_OVER, RULE_TILT = 0.5, 100, 0.015, 2.5, 3
# Ink beside the lines more elongated than this is a piece of a line (not found whole).
RULE_PIECE = 10
# Lines are looked for in ink down to this fraction of the faintest stroke ink: a faint
# line (pale blue) is taken out whole, not left in pieces that join a digit.
RULE_INK = 0.5


def ruled_lines(ink: np.ndarray, threshold: float) -> Optional[np.ndarray]:
    """A bool mask of the lines of ruled or squared paper (and a margin line) in
    ``ink`` (working size), or None when there are none. ``threshold``: the faintest
    ink of a stroke (lines are followed down to RULE_INK of it). Where a stroke
    crosses a line, the crossing is left to the stroke: line pixels with stroke ink
    just beyond the line on both sides are not in the mask."""
    b = (ink > RULE_INK * threshold).astype(np.uint8)
    h, w = b.shape
    found, widest, count_lines = np.zeros((h, w), bool), 0.0, 0
    for axis in (0, 1):  # lines along rows, then along columns
        # Most pages have none: no band of rows holds a line's worth of thin ink (ink
        # in runs across of at most RULE_SLIM of the length: not a desk, not a bold
        # stroke). Checked before anything is transposed.
        length = b.shape[1 - axis]
        k = int(max(1.0, RULE_SLIM * length)) + 1
        thin = b & ~cv2.morphologyEx(b, cv2.MORPH_OPEN, np.ones((k, 1) if axis == 0 else (1, k), np.uint8))
        per_row = cv2.reduce(thin, 1 - axis, cv2.REDUCE_SUM, dtype=cv2.CV_32S).ravel()
        if length < RULE_MIN or np.convolve(per_row, np.ones(2 * RULE_TILT + 1), "same").max() < RULE_LENGTH * length:
            continue
        m, out = (b, found) if axis == 0 else (np.ascontiguousarray(b.T), found.T)
        rows, cols = m.shape
        # Thickened across and bridged along, a slightly tilted or broken line still
        # has runs a quarter of the image long; where lines are so close that this
        # joins them (fine squared paper), they are looked for again without it.
        for tilt, bridge in ((RULE_TILT, 9), (0, 1)):
            lines_before = count_lines
            band = cv2.dilate(m, np.ones((2 * tilt + 1, 1), np.uint8))
            band = cv2.morphologyEx(band, cv2.MORPH_CLOSE, np.ones((1, bridge), np.uint8))
            band = cv2.morphologyEx(band, cv2.MORPH_OPEN, np.ones((1, max(20, cols // 4)), np.uint8)) & m
            count, labels, stats, _ = cv2.connectedComponentsWithStats(band, connectivity=8)
            long = stats[:, 2] >= max(RULE_MIN, RULE_LENGTH * cols)
            long[0] = False
            joined = False
            for i in np.nonzero(long)[0]:
                x, y, bw, bh = stats[i, :4]
                ys, xs = np.nonzero(labels[y : y + bh, x : x + bw] == i)
                n = np.bincount(xs, minlength=bw)
                centre = np.bincount(xs, weights=ys, minlength=bw) / np.maximum(n, 1)
                # The line's own course, from where it is thin (a digit on it widens
                # a part; a number may cover half of it): thin and straight.
                slim = max(1.0, RULE_SLIM * bw)
                clean = (n > 0) & (n <= slim)
                if clean.sum() < max(RULE_MIN, RULE_LENGTH / 2 * cols):
                    joined |= bh > 4 * (2 * tilt + 1) and np.median(n[n > 0]) > slim
                    continue
                at = np.nonzero(clean)[0]
                slope, offset = np.polyfit(at, centre[at], 1)
                if np.mean(np.abs(centre[at] - (offset + slope * at)) <= max(1.5, slim / 2)) < 0.9:
                    continue  # not straight: a long stroke
                half = float(np.median(n[clean])) / 2 + 1
                widest, count_lines = max(widest, 2 * half), count_lines + 1
                # Printed lines run from edge to edge: the course is followed across
                # the whole image, so the pieces of a line broken where it is faint go too.
                course = y + offset + slope * (np.arange(cols) - x)
                top, bottom = max(0, int(course.min() - half)), min(rows, int(np.ceil(course.max() + half)) + 1)
                on = np.abs(np.arange(top, bottom)[:, None] - course[None, :]) <= half
                out[top:bottom] |= on & (m[top:bottom] > 0)
            if count_lines > lines_before or not joined:
                break
    if not found.any():
        return None
    # The strokes left beside the lines must be much shorter than the lines are long.
    strokes = ink > threshold
    rest = strokes & ~found
    count, _, stats, _ = cv2.connectedComponentsWithStats(rest.astype(np.uint8), connectivity=8)
    sides = np.sort(stats[1:, 2:4], axis=1)
    # Not a piece of a line left over, nor the edge of a desk or a shadow across the image.
    shaped = (
        (sides[:, 1] <= RULE_PIECE * np.maximum(sides[:, 0], 1)) & (stats[1:, 2] < 0.9 * w) & (stats[1:, 3] < 0.9 * h)
    )
    tallest = int(sides[shaped, 1].max()) if shaped.any() else 0
    count, labels, stats, _ = cv2.connectedComponentsWithStats(found.astype(np.uint8), connectivity=8)
    keep = stats[:, 2:4].max(axis=1) >= RULE_OVER * tallest
    keep[0] = False
    if not keep.any() or (tallest == 0 and count_lines < 2):  # one line alone is a 1
        return None
    lines = keep[labels]
    # A stroke crossing a line keeps the pixels it shares with it: ink within d
    # pixels beyond the line on both sides.
    d = int(np.ceil(widest)) + 1
    rest = strokes & ~lines
    above, below, left, right = (np.zeros_like(rest) for _ in range(4))
    for k in range(1, d + 1):
        above[k:] |= rest[:-k]
        below[:-k] |= rest[k:]
        left[:, k:] |= rest[:, :-k]
        right[:, :-k] |= rest[:, k:]
    return lines & ~((above & below) | (left & right))


# An underline (or a dash, a crossing-out) is a horizontal run of ink UNDERLINE times
# longer than the ink's usual height (the median height of its components that are
# taller than wide, digits, each counted by its pixels), no taller than UNDERLINE_THICK of that height; a digit's
# own bars (a 7's, a 2's foot) are shorter.
UNDERLINE, UNDERLINE_THICK = 1.4, 0.3


def underlines(ink: np.ndarray, stats: np.ndarray) -> Optional[np.ndarray]:
    """A bool mask of the underlines in binary ``ink`` (components ``stats``), or None."""
    w, h, area = stats[1:, 2], stats[1:, 3], stats[1:, 4]
    upright = (h >= w) & (h >= 5)
    if not upright.any():
        return None
    # Weighed by their ink, so that many specks (the texture of a background past the
    # sheet's edge) do not make the usual height theirs.
    order = np.argsort(h[upright], kind="stable")
    weight = np.cumsum(area[upright][order])
    height = float(h[upright][order][np.searchsorted(weight, weight[-1] / 2)])
    length = int(UNDERLINE * height)
    if length >= ink.shape[1]:
        return None
    b = ink.astype(np.uint8)
    runs = cv2.morphologyEx(b, cv2.MORPH_OPEN, np.ones((1, length), np.uint8))
    if not runs.any():
        return None
    # Only thin runs: where the run's ink, taken whole, is a band at most UNDERLINE_THICK tall.
    thick = max(2, int(UNDERLINE_THICK * height))
    band = runs & ~cv2.morphologyEx(runs, cv2.MORPH_OPEN, np.ones((thick + 1, 1), np.uint8))
    if not band.any():
        return None
    return cv2.dilate(band, np.ones((3, 1), np.uint8)).astype(bool) & ink
