"""Handwriting styles that MNIST rarely shows, made as MNIST digits for training.

MNIST's writers (American Census staff and high-school students) wrote 4s with an
open top, 1s as a bare stroke, 7s without a bar and 9s with a curved tail; people
elsewhere close the 4 into a triangle, give the 1 a long flag from the top (and a
base), cross the 7, and draw the 9's stem straight. This module makes such digits,
two ways, both seeded:

- ``glyphs``: digits drawn as pen strokes from *parametric* skeletons (every corner
  of a style drawn at random within the style's range: where the flag of a 1 ends,
  how far the top of a 4 closes, where a 7 is crossed), slanted, rotated and drawn
  with a pen of random width, then framed as MNIST frames its digits (anti-aliased,
  the longer side 20 px, centred by centre of mass in 28 x 28);
- ``transformed``: MNIST *training* digits with a stroke added where the style adds
  one: a flag (and a base) on a 1, a bar across a 7. Only the digits given (train.py
  gives its training split, never the held-out digits) are used.

The result is added to the training set and goes through train.py's augmentation
like every MNIST digit. The photo-like test set (tools/photoset/make.py) draws its
styled digits with its own, fixed skeletons and from held-out digits: this module
is not used there.

    python tools/train/styles.py --sheet build/styles.png    # a contact sheet to look at
"""

import argparse
import math
import sys
from pathlib import Path

import cv2
import numpy as np

SIDE, BOX = 28, 20
SCALE = 4  # drawn at 4x MNIST's scale, then shrunk (anti-aliased)


def _u(rng, lo, hi):
    return float(rng.uniform(lo, hi))


# ---------------------------------------------------------------- skeletons
#
# Each returns polylines in a unit box (x right, y down; the digit 1 tall, x about
# 0..1 before the aspect is applied), one per pen stroke.


def _bar_end(rng, s):
    """Where a 4's bar ends: past the stem, or (half the time) at it: a closed 4 whose
    bar stops at the stem is a triangle on a stick, which a network that knows only
    MNIST's 4s reads as a 9."""
    return s + (_u(rng, -0.02, 0.08) if rng.random() < 0.5 else _u(rng, 0.12, 0.35))


def four_closed(rng):
    """A 4 whose top is closed: the diagonal starts on the stem (a triangle)."""
    s, c = _u(rng, 0.6, 0.8), _u(rng, 0.55, 0.72)
    left, right = _u(rng, 0.0, 0.15), _bar_end(rng, s)
    top = (s + _u(rng, -0.06, 0.03), _u(rng, 0.0, 0.06))
    if rng.random() < 0.5:  # one stroke: up the stem, down the diagonal, along the bar
        return [[(s + _u(rng, -0.03, 0.03), 1.0), top, (left, c), (right, c + _u(rng, -0.04, 0.04))]]
    # two strokes: the diagonal and bar, then the stem from (or just above) its top
    return [
        [top, (left, c), (right, c + _u(rng, -0.04, 0.04))],
        [(top[0] + _u(rng, -0.02, 0.03), top[1] - _u(rng, 0.0, 0.06)), (s + _u(rng, -0.03, 0.03), 1.0)],
    ]


def four_open(rng):
    """A 4 with an open top: a left stroke down and along, a stem apart from it."""
    s, c = _u(rng, 0.6, 0.8), _u(rng, 0.52, 0.7)
    a = _u(rng, 0.05, 0.4)
    left = min(a, _u(rng, 0.0, 0.2))
    first = [(a, _u(rng, 0.0, 0.1)), (left, c), (_bar_end(rng, s), c + _u(rng, -0.04, 0.04))]
    if rng.random() < 0.3:  # a rounded corner
        first.insert(2, (left + 0.05, c + 0.02))
    return [first, [(s + _u(rng, -0.02, 0.04), _u(rng, 0.0, 0.3)), (s + _u(rng, -0.03, 0.03), 1.0)]]


def four_round(rng):
    """A closed 4 whose top is rounded (issue 45: read as 9 in real photos): up the stem,
    over a round top, down the left side and along the bar; or the loop and bar first,
    then the stem from the top."""
    s, c = _u(rng, 0.6, 0.8), _u(rng, 0.55, 0.7)  # the bar lower than a 9's loop reaches
    left = _u(rng, 0.0, 0.15)
    bend = _u(rng, 0.05, 0.2)  # where the top turns from the stem
    top = [
        (s + _u(rng, -0.03, 0.03), bend),
        (s - _u(rng, 0.12, 0.25), _u(rng, 0.0, 0.04)),
        (left + _u(rng, 0.1, 0.25), _u(rng, 0.03, 0.12)),
        (left + _u(rng, 0.0, 0.05), c * _u(rng, 0.5, 0.75)),
        (left + _u(rng, 0.0, 0.08), c),
        (_bar_end(rng, s), c + _u(rng, -0.04, 0.04)),
    ]
    if rng.random() < 0.6:
        return [[(s + _u(rng, -0.03, 0.03), 1.0)] + top]
    return [top[1:], [(s + _u(rng, -0.03, 0.03), top[1][1] + _u(rng, 0.0, 0.1)), (s + _u(rng, -0.03, 0.03), 1.0)]]


def retraced(skeleton):
    """A digit gone over twice: each stroke drawn again, a little apart (thick and
    uneven, with gaps where the passes part)."""

    def again(rng):
        strokes = skeleton(rng)
        shift = rng.normal(0, 0.03, 2)
        return strokes + [
            [(x + shift[0] + _u(rng, -0.02, 0.02), y + shift[1] + _u(rng, -0.02, 0.02)) for x, y in st]
            for st in strokes
        ]

    return again


def one_flag(rng, base=False):
    """A European 1: a long flag from the top down to the left, no base (or one)."""
    s = _u(rng, 0.5, 0.65)
    flag = (s - _u(rng, 0.32, 0.55), _u(rng, 0.25, 0.45))
    stroke = [flag, (s, 0.0), (s + _u(rng, -0.04, 0.02), 1.0)]
    if rng.random() < 0.3:  # a flag that curves into the stem
        stroke.insert(1, ((flag[0] + s) / 2 + 0.03, flag[1] / 2 - 0.03))
    strokes = [stroke]
    if base:
        w = _u(rng, 0.22, 0.38)
        strokes.append([(s - w, 1.0 + _u(rng, -0.02, 0.02)), (s + w, 1.0 + _u(rng, -0.02, 0.02))])
    return strokes


def seven(rng, bar=False):
    """A 7, its top near level, its stem straight or gently curved; crossed or not."""
    l, r = _u(rng, 0.0, 0.15), _u(rng, 0.85, 1.0)
    t0, t1 = _u(rng, 0.0, 0.08), _u(rng, 0.0, 0.06)
    foot = (_u(rng, 0.25, 0.5), 1.0)
    stroke = [(l, t0), (r, t1), foot]
    if rng.random() < 0.3:
        stroke.insert(2, ((r + foot[0]) / 2 + _u(rng, -0.06, 0.02), 0.5))
    if rng.random() < 0.25:  # a serif down at the start
        stroke.insert(0, (l + _u(rng, -0.02, 0.03), t0 + _u(rng, 0.1, 0.2)))
    strokes = [stroke]
    if bar:
        y = _u(rng, 0.45, 0.6)
        xm = r + (foot[0] - r) * (y - t1) / (1.0 - t1)  # the stem at height y
        w = _u(rng, 0.18, 0.3)
        strokes.append([(xm - w, y + _u(rng, -0.03, 0.03)), (xm + w, y + _u(rng, -0.03, 0.03))])
    return strokes


def nine_straight(rng):
    """A 9 with a straight stem: a loop, and a line straight down from its right side."""
    cx, cy = _u(rng, 0.42, 0.52), _u(rng, 0.2, 0.3)
    rx, ry = _u(rng, 0.3, 0.42), _u(rng, 0.18, 0.28)
    start = _u(rng, -0.3, 0.3)
    loop = [(cx + rx * math.cos(t), cy - ry * math.sin(t)) for t in np.linspace(start, start + 2 * math.pi, 13)]
    sx = cx + rx * math.cos(start)
    return [loop + [(sx + _u(rng, -0.05, 0.02), 1.0)]]


def two(rng, loop=False):
    """A 2 with a sharp corner at the bottom, or with a loop there."""
    top = [
        (_u(rng, 0.05, 0.2), _u(rng, 0.15, 0.3)),
        (_u(rng, 0.3, 0.45), _u(rng, 0.0, 0.05)),
        (_u(rng, 0.65, 0.8), _u(rng, 0.0, 0.06)),
        (_u(rng, 0.85, 1.0), _u(rng, 0.22, 0.32)),
    ]
    corner = (_u(rng, 0.02, 0.15), _u(rng, 0.88, 0.97))
    end = (_u(rng, 0.85, 1.0), _u(rng, 0.9, 1.0))
    if not loop:
        return [top + [corner, end]]
    # The loop: the diagonal comes down through it to its bottom, the pen goes round it
    # (left, up, right, down: crossing the diagonal) and on along the base.
    r = _u(rng, 0.1, 0.16)
    cx, cy = corner[0] + r, corner[1] - r
    loop = [(cx + r * math.cos(t), cy + r * math.sin(t)) for t in np.linspace(math.pi / 2, 2.5 * math.pi, 9)]
    return [top[:-1] + [(top[-1][0], top[-1][1] + 0.05)] + loop + [end]]


# name: (label, skeleton, how many per 1,000 generated)
STYLES = {
    "4-closed": (4, four_closed, 190),
    "4-open": (4, four_open, 100),
    # Issue 45: closed 4s with a rounded top, and closed 4s gone over twice.
    "4-round": (4, four_round, 170),
    "4-retraced": (4, lambda rng: retraced(four_round if rng.random() < 0.5 else four_closed)(rng), 90),
    "1-flag": (1, one_flag, 120),
    "1-flag-base": (1, lambda rng: one_flag(rng, base=True), 80),
    "7-plain": (7, seven, 60),
    "7-bar": (7, lambda rng: seven(rng, bar=True), 100),
    "9-straight": (9, nine_straight, 180),
    "2-loop": (2, lambda rng: two(rng, loop=True), 110),
    "2-plain": (2, two, 60),
}


# ---------------------------------------------------------------- drawing


def _chaikin(p, times=2):
    for _ in range(times):
        a, b = p[:-1], p[1:]
        cut = np.stack([0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b], 1).reshape(-1, 2)
        p = np.concatenate([p[:1], cut[1:-1], p[-1:]])
    return p


def to_frame(big):
    """An ink image (any size, float 0..1) framed as MNIST: uint8 (28, 28), the longer
    side of its box 20 px, centred by centre of mass."""
    ys, xs = np.nonzero(big > 0.02)
    crop = big[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]
    h, w = crop.shape
    f = BOX / max(h, w)
    pw, ph = max(1, round(w * f)), max(1, round(h * f))
    small = cv2.resize(crop, (pw, ph), interpolation=cv2.INTER_AREA)
    small /= max(float(small.max()), 1e-6)
    m = cv2.moments(small)
    cx, cy = m["m10"] / m["m00"], m["m01"] / m["m00"]
    px = int(np.clip(round(SIDE / 2 - cx), 0, SIDE - pw))
    py = int(np.clip(round(SIDE / 2 - cy), 0, SIDE - ph))
    out = np.zeros((SIDE, SIDE), np.float32)
    out[py : py + ph, px : px + pw] = small
    return np.round(out * 255).astype(np.uint8)


def draw(strokes, rng):
    """Skeleton strokes drawn with a random slant, rotation, aspect and pen, as MNIST."""
    height = BOX * SCALE * 2.0  # drawn large, shrunk into the box
    aspect = _u(rng, 0.5, 0.8)
    slant = _u(rng, -0.3, 0.15)  # x shift per unit of height (leaning right is negative here)
    angle = math.radians(_u(rng, -8, 8))
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    pen = max(2, round(_u(rng, 0.08, 0.16) * height))  # MNIST strokes are about 0.11 of the height
    side = int(height * 1.8)
    canvas = np.zeros((side, side), np.uint8)
    for stroke in strokes:
        p = np.array(stroke, np.float64) + rng.normal(0, 0.015, (len(stroke), 2))
        p[:, 0] = (p[:, 0] - 0.5) * aspect - slant * (p[:, 1] - 0.5)
        p[:, 1] -= 0.5
        p = _chaikin(p @ rot.T)
        xy = p * height + side / 2
        cv2.polylines(canvas, [np.round(xy * 16).astype(np.int32)], False, 255, pen, cv2.LINE_AA, shift=4)
    return to_frame(cv2.GaussianBlur(canvas.astype(np.float32) / 255, (0, 0), pen * 0.15))


def glyphs(n, seed):
    """n digits drawn from STYLES in their proportions: (uint8 (n, 28, 28), labels, style names)."""
    rng = np.random.default_rng([seed, 1])
    names = list(STYLES)
    weights = np.array([STYLES[k][2] for k in names], np.float64)
    which = rng.choice(len(names), n, p=weights / weights.sum())
    images = np.stack([draw(STYLES[names[k]][1](rng), rng) for k in which])
    return images, np.array([STYLES[names[k]][0] for k in which], np.int64), [names[k] for k in which]


# ---------------------------------------------------------------- MNIST digits with a stroke added


def _stroke_width(big):
    """The median stroke width of an ink image, by the distance transform."""
    mask = (big > 0.5).astype(np.uint8)
    if not mask.any():
        return 2.0 * SCALE
    dist = cv2.distanceTransform(mask, cv2.DIST_L2, 5)
    ridge = dist[(dist >= cv2.dilate(dist, np.ones((3, 3), np.uint8))) & (mask > 0)]
    return float(2 * np.median(ridge)) if ridge.size else 2.0 * SCALE


def add_strokes(digit28, label, rng):
    """An MNIST 1 with a flag (and, half the time, a base) or an MNIST 7 with a bar,
    drawn with the digit's own stroke width; None when the digit does not suit."""
    big = cv2.resize(digit28.astype(np.float32) / 255, (SIDE * SCALE, SIDE * SCALE), interpolation=cv2.INTER_CUBIC)
    big = np.clip(big, 0, 1)
    ys, xs = np.nonzero(big > 0.5)
    if ys.size < 10:
        return None
    y0, y1 = ys.min(), ys.max()
    h = y1 - y0
    pen = max(3, round(_stroke_width(big)))
    canvas = np.zeros((SIDE * SCALE * 2, SIDE * SCALE * 2), np.float32)  # room for a flag beyond the box
    off = SIDE * SCALE // 2
    canvas[off : off + SIDE * SCALE, off : off + SIDE * SCALE] = big
    lines = []
    if label == 1:
        if (xs.max() - xs.min()) > 0.45 * h:  # a slanted or hooked 1: a flag would not be faithful
            return None
        top = xs[ys <= y0 + max(2, pen // 2)].mean()
        fx, fy = top - _u(rng, 0.22, 0.42) * h / 0.65 * 0.65, y0 + _u(rng, 0.22, 0.45) * h
        lines.append([(top, y0 + pen * 0.3), (fx, fy)])
        if rng.random() < 0.5 and (xs.max() - xs.min()) < 0.3 * h:  # a base on upright 1s only
            bottom = xs[ys >= y1 - max(2, pen // 2)].mean()
            w = _u(rng, 0.2, 0.35) * h
            lines.append([(bottom - w, y1 - pen * 0.3), (bottom + w, y1 - pen * 0.3 + _u(rng, -2, 2))])
    elif label == 7:
        y = y0 + _u(rng, 0.45, 0.6) * h
        row = xs[np.abs(ys - y) < 1]
        if row.size == 0:
            return None
        xm = float(np.median(row))
        w = _u(rng, 0.15, 0.28) * h
        lines.append([(xm - w, y + _u(rng, -3, 3)), (xm + w, y + _u(rng, -3, 3))])
    else:
        return None
    stroke = np.zeros_like(canvas, np.uint8)
    for a, b in lines:
        pts = np.round((np.array([a, b]) + off) * 16).astype(np.int32)
        cv2.polylines(stroke, [pts], False, 255, pen, cv2.LINE_AA, shift=4)
    canvas = np.maximum(canvas, stroke.astype(np.float32) / 255)
    return to_frame(canvas)


def transformed(images, labels, n_ones, n_sevens, seed):
    """MNIST 1s with a flag (half of them with a base too) and 7s with a bar, from the
    digits given: (uint8 (k, 28, 28), labels, style names)."""
    rng = np.random.default_rng([seed, 2])
    out, ys, names = [], [], []
    for label, n in ((1, n_ones), (7, n_sevens)):
        for k in rng.choice(np.flatnonzero(labels == label), n, replace=False):
            d = add_strokes(images[k], label, rng)
            if d is not None:
                out.append(d)
                ys.append(label)
                names.append("mnist-1-flag" if label == 1 else "mnist-7-bar")
    return np.stack(out), np.array(ys, np.int64), names


def style_set(images, labels, seed, glyph_count=7000, ones=1500, sevens=1200):
    """Everything train.py adds to its training split: (uint8 images, labels, names)."""
    g = glyphs(glyph_count, seed)
    t = transformed(images, labels, ones, sevens, seed)
    return np.concatenate([g[0], t[0]]), np.concatenate([g[1], t[1]]), g[2] + t[2]


def contact_sheet(images, names, path, per_row=20):
    rows = math.ceil(len(images) / per_row)
    sheet = np.full((rows * (SIDE + 2), per_row * (SIDE + 2)), 40, np.uint8)
    for i, img in enumerate(images):
        r, c = divmod(i, per_row)
        sheet[r * (SIDE + 2) : r * (SIDE + 2) + SIDE, c * (SIDE + 2) : c * (SIDE + 2) + SIDE] = img
    cv2.imwrite(str(path), cv2.resize(sheet, None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST))


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/train/styles.py", description=__doc__.split("\n")[0])
    p.add_argument("--sheet", type=Path, default=Path("build/styles.png"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mnist_split import HELD_OUT_PER_CLASS, default_mnist_dir, load_idx_pair, stratified_split

    x, y = load_idx_pair(default_mnist_dir("train"), "train")
    train_idx, _ = stratified_split(y, HELD_OUT_PER_CLASS, np.random.default_rng(args.seed))
    rng = np.random.default_rng(args.seed)
    picks = []
    for name in STYLES:  # 20 of each, one row per style, then the transformed digits
        r = np.random.default_rng([args.seed, 3, len(picks)])
        picks += [(draw(STYLES[name][1](r), r), name) for _ in range(20)]
    t = transformed(x[train_idx], y[train_idx], 40, 20, args.seed)
    picks += list(zip(t[0], t[2]))
    args.sheet.parent.mkdir(parents=True, exist_ok=True)
    contact_sheet(np.stack([p[0] for p in picks]), [p[1] for p in picks], args.sheet)
    print(f"{len(picks)} digits -> {args.sheet} (rows: {', '.join(STYLES)}, MNIST 1s with a flag x2, 7s with a bar)")
    del rng


if __name__ == "__main__":
    main()
