"""Make the photo-like test set: digits that look like phone photos and scans of
handwriting, of the kinds that real images break a reader on.

    python tools/photoset/make.py                  # writes tests/data/photoset/
    python tools/photoset/make.py --out DIR --seed 1
    python tools/photoset/make.py --out DIR --seed 8 --per-kind 0 --numbers-per-kind 80 --kinds number-touching

Nothing here comes from the MNIST test set. The digits are either held-out MNIST
*training* digits (the 5,000 that tools/train/train.py holds out for checkpoint
selection, never trained on), redrawn as smooth pen strokes, or glyphs drawn as pen
strokes from hand-made stroke skeletons (an open-top and a closed-top 4, a European 1
with its long flag, a 7 with a bar, a 9 with a straight stem...), jittered, slanted
and drawn with a pen of random width.

Each image has a *kind*, the condition it tests (``KINDS``): faint ballpoint, a thin
pen, a bold marker, blur, pencil under a shadow, lined and squared paper, a tilted
camera (perspective), a dim photo, heavy JPEG; numbers add touching digits, digits
written in two strokes, and marks that are not digits (an underline, dots, a shadow
edge). ``manifest.csv`` lists file, label (the digit or the number), kind and source.

Issue 34 added the styles and conditions a set of real photos was misread on
(``STYLE_KINDS``, ``STYLE_NUMBER_KINDS``, made after all the others so that those stay
byte for byte as they were): closed-top 4s (a triangle, a top stroke meeting the
stem; with the bar past the stem or stopping at it), open-top 4s, European 1s (a long
flag, with and without a base), 7s with and without a bar, straight-stemmed 9s, 2s with
and without a loop (glyphs from fixed
skeletons in ``STYLE_GLYPHS``, and held-out MNIST digits of the class), a defocused,
low-contrast digit, faint pencil on a low-resolution webcam frame, a faint thin pen;
numbers with open-top 4s, closed-top 4s beside 9s, European 1s and barred 7s, and
faint pencil 2s and 1s. The styled glyphs are not tools/train/styles.py's (those are
parametric, these fixed) and no image here was used to choose anything in training.
"""

import argparse
import csv
import sys
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from mnist_split import held_out_digits  # noqa: E402

# Stroke skeletons in a unit box (x right, y down; digits about 0.6 wide): polylines,
# several per glyph when the pen is lifted. Named variants where people differ.
GLYPHS = {
    "0": [
        [
            (0.5, 0.0),
            (0.2, 0.15),
            (0.08, 0.5),
            (0.2, 0.88),
            (0.5, 1.0),
            (0.8, 0.88),
            (0.92, 0.5),
            (0.8, 0.12),
            (0.5, 0.0),
        ]
    ],
    "1": [[(0.45, 0.12), (0.62, 0.0), (0.6, 1.0)]],
    "1-european": [[(0.15, 0.38), (0.62, 0.0), (0.6, 1.0)]],
    "1-based": [[(0.3, 0.2), (0.58, 0.0), (0.58, 1.0)], [(0.3, 1.0), (0.85, 1.0)]],
    "2": [[(0.12, 0.25), (0.3, 0.04), (0.6, 0.0), (0.85, 0.2), (0.75, 0.48), (0.1, 1.0), (0.92, 0.98)]],
    "3": [
        [
            (0.12, 0.12),
            (0.45, 0.0),
            (0.8, 0.12),
            (0.78, 0.35),
            (0.4, 0.48),
            (0.82, 0.6),
            (0.88, 0.85),
            (0.5, 1.0),
            (0.1, 0.9),
        ]
    ],
    "4-open": [[(0.45, 0.0), (0.08, 0.62), (0.95, 0.62)], [(0.72, 0.25), (0.72, 1.0)]],
    "4-closed": [[(0.7, 1.0), (0.7, 0.0), (0.08, 0.65), (0.95, 0.65)]],
    "4-parallel": [[(0.2, 0.0), (0.12, 0.58), (0.9, 0.58)], [(0.75, 0.0), (0.75, 1.0)]],
    "5": [[(0.85, 0.0), (0.25, 0.0), (0.18, 0.45), (0.55, 0.38), (0.85, 0.55), (0.85, 0.85), (0.5, 1.0), (0.12, 0.9)]],
    "5-two-strokes": [
        [(0.25, 0.02), (0.18, 0.45), (0.55, 0.38), (0.85, 0.55), (0.85, 0.85), (0.5, 1.0), (0.12, 0.9)],
        [(0.3, 0.0), (0.88, 0.0)],
    ],
    "6": [
        [
            (0.78, 0.05),
            (0.45, 0.15),
            (0.15, 0.6),
            (0.25, 0.92),
            (0.55, 1.0),
            (0.85, 0.8),
            (0.75, 0.55),
            (0.45, 0.5),
            (0.18, 0.68),
        ]
    ],
    "7": [[(0.1, 0.02), (0.9, 0.0), (0.4, 1.0)]],
    "7-bar": [[(0.1, 0.02), (0.9, 0.0), (0.4, 1.0)], [(0.35, 0.5), (0.85, 0.5)]],
    "8": [
        [
            (0.5, 0.48),
            (0.82, 0.28),
            (0.7, 0.04),
            (0.5, 0.0),
            (0.3, 0.04),
            (0.18, 0.28),
            (0.5, 0.48),
            (0.85, 0.72),
            (0.7, 0.97),
            (0.5, 1.0),
            (0.3, 0.97),
            (0.15, 0.72),
            (0.5, 0.48),
        ]
    ],
    "9": [[(0.82, 0.2), (0.5, 0.0), (0.2, 0.15), (0.2, 0.4), (0.5, 0.5), (0.82, 0.35), (0.82, 0.2), (0.8, 1.0)]],
    "9-curved": [
        [
            (0.82, 0.25),
            (0.5, 0.0),
            (0.2, 0.15),
            (0.2, 0.4),
            (0.5, 0.5),
            (0.82, 0.3),
            (0.75, 0.75),
            (0.45, 1.0),
            (0.2, 0.9),
        ]
    ],
}
# Issue 34's styles, kept apart from GLYPHS so that the kinds above draw exactly what
# they drew before (glyph_for picks among a digit's names in GLYPHS). Fixed skeletons,
# not tools/train/styles.py's parametric ones: the models never trained on these.
STYLE_GLYPHS = {
    "4-triangle": [[(0.62, 0.0), (0.08, 0.66), (0.95, 0.66)], [(0.62, 0.0), (0.66, 1.0)]],
    "4-closed-slant": [[(0.55, 1.0), (0.72, 0.0), (0.05, 0.6), (0.92, 0.6)]],
    # 4s whose bar stops at the stem: closed, a triangle on a stick (read as 9 in real photos)
    "4-closed-flush": [[(0.75, 1.0), (0.75, 0.0), (0.1, 0.62), (0.75, 0.62)]],
    "4-triangle-flush": [[(0.7, 0.0), (0.1, 0.6), (0.78, 0.6)], [(0.7, 0.0), (0.72, 1.0)]],
    "4-open-flush": [[(0.3, 0.0), (0.1, 0.6), (0.72, 0.6)], [(0.72, 0.15), (0.72, 1.0)]],
    "4-open-apart": [[(0.3, 0.0), (0.1, 0.6), (0.64, 0.6)], [(0.74, 0.1), (0.74, 1.0)]],  # the bar short of the stem
    "1-european-long": [[(0.05, 0.45), (0.62, 0.0), (0.58, 1.0)]],
    "1-european-based": [[(0.12, 0.4), (0.6, 0.0), (0.6, 1.0)], [(0.3, 1.0), (0.9, 1.0)]],
    "2-loop": [
        [
            (0.12, 0.25),
            (0.3, 0.04),
            (0.6, 0.0),
            (0.85, 0.2),
            (0.75, 0.48),
            (0.3, 0.85),
            (0.22, 0.98),
            (0.1, 0.9),
            (0.1, 0.76),
            (0.22, 0.7),
            (0.34, 0.8),
            (0.3, 0.95),
            (0.55, 0.97),
            (0.92, 0.96),
        ]
    ],
    "9-straight-long": [
        [(0.85, 0.22), (0.5, 0.0), (0.15, 0.12), (0.15, 0.38), (0.5, 0.48), (0.85, 0.3), (0.85, 0.22), (0.85, 1.0)]
    ],
    # Issue 45: closed 4s with a rounded top (up the stem, over, down the left and along
    # the bar; a 9 whose loop has a flat bottom), the bar past the stem or at it.
    "4-round": [[(0.7, 1.0), (0.7, 0.12), (0.52, 0.0), (0.28, 0.08), (0.1, 0.45), (0.08, 0.62), (0.95, 0.62)]],
    "4-round-high": [[(0.68, 1.0), (0.7, 0.1), (0.5, 0.0), (0.22, 0.12), (0.12, 0.4), (0.2, 0.55), (0.9, 0.55)]],
    "4-round-flush": [[(0.72, 1.0), (0.72, 0.1), (0.5, 0.0), (0.25, 0.1), (0.1, 0.42), (0.12, 0.62), (0.8, 0.62)]],
    "4-round-two": [[(0.65, 0.0), (0.3, 0.06), (0.1, 0.4), (0.1, 0.62), (0.92, 0.62)], [(0.62, 0.02), (0.7, 1.0)]],
}
INKS = {
    "ballpoint-blue": (40, 55, 150),
    "ballpoint-black": (30, 30, 35),
    "gel-black": (15, 15, 20),
    "pencil": (80, 80, 85),
    "marker": (20, 20, 25),
}  # RGB
# kind: (ink, pen width as a fraction of the digit's height, ink strength, blur sigma px, JPEG quality range)
KINDS = {
    "clean": dict(ink="ballpoint-black", width=(0.07, 0.11), strength=(0.8, 1.0)),
    "faint-ballpoint": dict(ink="ballpoint-blue", width=(0.03, 0.06), strength=(0.18, 0.35)),
    "thin-pen": dict(ink="gel-black", width=(0.02, 0.04), strength=(0.6, 0.9)),
    "bold-marker": dict(ink="marker", width=(0.16, 0.24), strength=(0.85, 1.0)),
    "blurry": dict(ink="ballpoint-black", width=(0.06, 0.1), strength=(0.6, 0.9), blur=(0.05, 0.09)),
    "pencil-shadow": dict(ink="pencil", width=(0.04, 0.08), strength=(0.3, 0.55), shadow=True, grain=True),
    "lined-paper": dict(ink="ballpoint-blue", width=(0.05, 0.09), strength=(0.6, 0.9), ruling="lined"),
    "squared-paper": dict(ink="ballpoint-black", width=(0.05, 0.09), strength=(0.6, 0.9), ruling="squared"),
    "perspective": dict(ink="ballpoint-black", width=(0.06, 0.1), strength=(0.7, 1.0), tilt=(0.12, 0.25)),
    "dim-photo": dict(ink="ballpoint-black", width=(0.06, 0.1), strength=(0.6, 0.9), light=(0.25, 0.45)),
    "heavy-jpeg": dict(ink="ballpoint-blue", width=(0.05, 0.09), strength=(0.6, 0.9), jpeg=(12, 25)),
}
NUMBER_KINDS = {
    "number-clean": dict(ink="ballpoint-black", width=(0.06, 0.1), strength=(0.7, 1.0)),
    "number-touching": dict(ink="ballpoint-black", width=(0.07, 0.11), strength=(0.7, 1.0), touching=True),
    "number-pencil-shadow": dict(
        ink="pencil", width=(0.05, 0.08), strength=(0.35, 0.6), shadow=True, grain=True, open4=True
    ),
    "number-two-strokes": dict(ink="ballpoint-blue", width=(0.05, 0.09), strength=(0.6, 0.9), two_strokes=True),
    "number-marks": dict(ink="ballpoint-black", width=(0.06, 0.1), strength=(0.7, 1.0), marks=True),
}
# Issue 34: the styles and conditions a set of real photos failed on. "glyphs": the
# skeletons drawn on odd images; "mnist": the held-out MNIST digit drawn on even ones
# (none: glyphs only); neither: any digit, as KINDS. "webcam": the frame shrunk by a
# factor in that range and enlarged again (a low-resolution camera).
STYLE_KINDS = {
    "closed-four": dict(
        ink="ballpoint-black",
        width=(0.05, 0.1),
        strength=(0.7, 1.0),
        glyphs=["4-closed", "4-closed-flush", "4-triangle", "4-triangle-flush", "4-closed-slant"],
    ),
    "open-four": dict(
        ink="ballpoint-blue",
        width=(0.05, 0.1),
        strength=(0.6, 0.9),
        glyphs=["4-open", "4-open-flush", "4-parallel"],
        mnist="4",
    ),
    "european-one": dict(
        ink="ballpoint-black",
        width=(0.05, 0.1),
        strength=(0.7, 1.0),
        glyphs=["1-european", "1-european-long", "1-european-based", "1-based"],
    ),
    "seven-bar": dict(ink="gel-black", width=(0.05, 0.1), strength=(0.7, 1.0), glyphs=["7-bar", "7"], mnist="7"),
    "straight-nine": dict(
        ink="ballpoint-black", width=(0.05, 0.1), strength=(0.7, 1.0), glyphs=["9", "9-straight-long"], mnist="9"
    ),
    "loop-two": dict(ink="ballpoint-blue", width=(0.05, 0.1), strength=(0.6, 0.9), glyphs=["2-loop", "2"], mnist="2"),
    "defocus": dict(ink="ballpoint-black", width=(0.06, 0.1), strength=(0.5, 0.75), blur=(0.07, 0.1)),
    "faint-pencil-webcam": dict(
        ink="pencil", width=(0.04, 0.07), strength=(0.3, 0.45), grain=True, webcam=(0.35, 0.55), jpeg=(35, 60)
    ),
    "faint-thin": dict(ink="ballpoint-blue", width=(0.02, 0.035), strength=(0.2, 0.35)),
}
STYLE_NUMBER_KINDS = {
    "number-open-four": dict(
        ink="ballpoint-black", width=(0.06, 0.1), strength=(0.7, 1.0), use=["4-open", "4-open-flush"]
    ),
    "number-closed-four": dict(
        ink="ballpoint-blue",
        width=(0.06, 0.1),
        strength=(0.6, 0.9),
        use=["4-closed", "4-closed-flush", "4-triangle-flush", "9"],
    ),
    "number-european": dict(
        ink="ballpoint-black", width=(0.06, 0.1), strength=(0.7, 1.0), use=["1-european", "1-european-long", "7-bar"]
    ),
    "number-faint-pencil": dict(
        ink="pencil",
        width=(0.04, 0.07),
        strength=(0.3, 0.45),
        grain=True,
        webcam=(0.4, 0.55),
        jpeg=(35, 60),
        use=["2", "1"],
    ),
}
# Issue 45: the 4s a set of real photos still missed, and kinds for every way a 4 is
# written (made after all the kinds above, so that those stay byte for byte):
# closed 4s with a rounded top; a closed 4 gone over twice ("retrace": each stroke drawn
# twice, apart and with a pen of another width: thick and uneven); 4s slanted hard
# ("slant": the range of the x shift per unit of height, replacing the usual one);
# numbers of each beside 9s.
ROUND3_KINDS = {
    "round-four": dict(
        ink="ballpoint-black",
        width=(0.05, 0.1),
        strength=(0.7, 1.0),
        glyphs=["4-round", "4-round-high", "4-round-flush", "4-round-two"],
    ),
    "retraced-four": dict(
        ink="ballpoint-blue",
        width=(0.05, 0.09),
        strength=(0.6, 0.95),
        retrace=True,
        glyphs=["4-closed", "4-round", "4-triangle", "4-closed-flush", "4-round-high", "4-open"],
    ),
    "slanted-four": dict(
        ink="gel-black",
        width=(0.05, 0.1),
        strength=(0.7, 1.0),
        slant=(-0.5, -0.25),
        glyphs=["4-open", "4-closed", "4-round", "4-triangle", "4-parallel"],
    ),
}
ROUND3_NUMBER_KINDS = {
    "number-round-four": dict(
        ink="ballpoint-black",
        width=(0.06, 0.1),
        strength=(0.7, 1.0),
        use=["4-round", "4-round-high", "4-round-flush", "9"],
    ),
    "number-retraced-four": dict(
        ink="ballpoint-blue",
        width=(0.05, 0.09),
        strength=(0.6, 0.95),
        retrace=True,
        use=["4-closed", "4-round", "4-triangle"],
    ),
}
SUPERSAMPLE = 4


def glyph_alpha(name, height, width_frac, rng, retrace=False, slant=(-0.25, 0.1)):
    """Glyph `name` drawn as pen strokes `height` px tall: ink coverage in [0, 1].
    ``retrace``: every stroke drawn twice, a little apart, the second pass with a pen
    of another width (a digit gone over again). ``slant``: the range of the x shift per
    unit of height (handwriting leans right)."""
    strokes = GLYPHS[name] if name in GLYPHS else STYLE_GLYPHS[name]
    if retrace:
        strokes = [(s, 1.0) for s in strokes] + [(s, rng.uniform(0.6, 1.6)) for s in strokes]
    else:
        strokes = [(s, 1.0) for s in strokes]
    slant = rng.uniform(*slant)
    aspect = rng.uniform(0.5, 0.75)
    angle = np.radians(rng.uniform(-6, 6))
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    s = SUPERSAMPLE
    pen = max(1, round(width_frac * height * s))
    pad = 2 * pen + 4 if retrace else pen + 4
    side_h, side_w = round(height * s), round(height * aspect * s)
    canvas = np.zeros(
        (side_h + 2 * pad + round(0.4 * height * s), side_w + 2 * pad + round(0.4 * height * s)), np.uint8
    )
    for stroke, pen_scale in strokes:
        p = np.array(stroke, np.float64) + rng.normal(0, 0.025, (len(stroke), 2))
        if pen_scale != 1.0:  # the second pass: its own wobble, offset a little as a whole
            p += rng.normal(0, 0.025, (len(stroke), 2)) + rng.normal(0, 0.035, 2)
        p[:, 0] = (p[:, 0] - 0.5) * aspect - slant * (p[:, 1] - 0.5)
        p[:, 1] -= 0.5
        p = p @ rot.T
        # Smooth the polyline into a pen's curve: Chaikin corner cutting, twice.
        for _ in range(2):
            a, b = p[:-1], p[1:]
            cut = np.stack([0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b], 1).reshape(-1, 2)
            p = np.concatenate([p[:1], cut[1:-1], p[-1:]])
        xy = np.stack([p[:, 0] * height * s + canvas.shape[1] / 2, p[:, 1] * height * s + canvas.shape[0] / 2], 1)
        width = pen if pen_scale == 1.0 else max(1, round(pen * pen_scale))
        cv2.polylines(canvas, [np.round(xy * 16).astype(np.int32)], False, 255, width, cv2.LINE_AA, shift=4)
    small = cv2.resize(canvas, (canvas.shape[1] // s, canvas.shape[0] // s), interpolation=cv2.INTER_AREA)
    return _crop(small.astype(np.float32) / 255)


def mnist_alpha(digit28, height, width_frac, rng):
    """An MNIST digit redrawn as a smooth pen stroke `height` px tall: upsampled, its
    stroke's core kept, brought to the pen's width."""
    ys, xs = np.nonzero(digit28 > 40)
    crop = digit28[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].astype(np.float32) / 255
    f = height / crop.shape[0]
    big = cv2.resize(crop, (max(1, round(crop.shape[1] * f)), round(crop.shape[0] * f)), interpolation=cv2.INTER_CUBIC)
    big = cv2.copyMakeBorder(big, 8, 8, 8, 8, cv2.BORDER_CONSTANT)
    core = np.clip((big - 0.45) / 0.2, 0, 1)
    mnist_width = 0.11  # MNIST strokes are about this fraction of the digit's height
    k = round(abs(width_frac - mnist_width) * height)
    if k >= 2:
        disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))
        core = (cv2.dilate if width_frac > mnist_width else cv2.erode)(core, disk)
    angle = rng.uniform(-8, 8)
    m = cv2.getRotationMatrix2D((core.shape[1] / 2, core.shape[0] / 2), angle, 1.0)
    m[0, 1] += rng.uniform(-0.2, 0.05)  # slant
    core = cv2.warpAffine(core, m, (core.shape[1] + 20, core.shape[0]), flags=cv2.INTER_LINEAR)
    return _crop(cv2.GaussianBlur(core, (0, 0), 0.6))


def centre_line(mask):
    """The centre line of the strokes of bool image ``mask``, one pixel wide, as
    connected as they are (Zhang and Suen's thinning, 1984)."""
    img = np.pad(mask, 1).astype(np.uint8)
    changed = True
    while changed:
        changed = False
        for step in (0, 1):
            # The 8 neighbours clockwise from the one above.
            ring = [img[:-2, 1:-1], img[:-2, 2:], img[1:-1, 2:], img[2:, 2:]]
            ring += [img[2:, 1:-1], img[2:, :-2], img[1:-1, :-2], img[:-2, :-2]]
            n, e, s, w = ring[0], ring[2], ring[4], ring[6]
            count = sum(q.astype(np.int32) for q in ring)
            turns = sum(((ring[i] == 0) & (ring[(i + 1) % 8] == 1)).astype(np.int32) for i in range(8))
            side = (n & e & s) | (e & s & w) if step == 0 else (n & e & w) | (n & s & w)
            drop = (img[1:-1, 1:-1] == 1) & (count >= 2) & (count <= 6) & (turns == 1) & (side == 0)
            if drop.any():
                img[1:-1, 1:-1][drop] = 0
                changed = True
    return img[1:-1, 1:-1].astype(bool)


# An MNIST stroke is ink above half of full, and the fainter ink (above FAINT_STROKE) that
# joins it: a side of a 0 written lightly.
FAINT_STROKE = 0.25


def mnist_pen_alpha(digit28, height, width_frac, rng):
    """An MNIST digit written again with a pen ``width_frac`` of its ``height`` wide: its
    strokes brought to that width, never thinner than the pen along their centre line.
    ``mnist_alpha`` erodes every stroke by what MNIST's average one needs: with a thin pen
    a narrow stroke is eroded to faint, broken specks that no pen draws (issue 63). Here
    the digit's own median stroke sets how much comes off; what is wider than it (a loop
    written closed) stays wider."""
    ys, xs = np.nonzero(digit28 > 40)
    crop = digit28[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].astype(np.float32) / 255
    f = height / crop.shape[0]
    big = cv2.resize(crop, (max(1, round(crop.shape[1] * f)), round(crop.shape[0] * f)), interpolation=cv2.INTER_CUBIC)
    pen = width_frac * height
    pad = 8 + round(pen)
    big = cv2.copyMakeBorder(big, pad, pad, pad, pad, cv2.BORDER_CONSTANT)
    _, labels = cv2.connectedComponents((big > FAINT_STROKE).astype(np.uint8))
    mask = np.isin(labels, np.unique(labels[big > 0.5])) & (labels > 0)
    line = centre_line(mask)
    inside = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    signed = inside - cv2.distanceTransform((~mask).astype(np.uint8), cv2.DIST_L2, 5)
    own = 2 * float(np.median(inside[line]))
    strokes = np.clip(signed - (own - pen) / 2 + 0.5, 0, 1)
    along = np.clip(pen / 2 + 0.5 - cv2.distanceTransform((~line).astype(np.uint8), cv2.DIST_L2, 5), 0, 1)
    core = np.maximum(strokes, along)
    angle = rng.uniform(-8, 8)
    m = cv2.getRotationMatrix2D((core.shape[1] / 2, core.shape[0] / 2), angle, 1.0)
    m[0, 1] += rng.uniform(-0.2, 0.05)  # slant
    core = cv2.warpAffine(core, m, (core.shape[1] + 20, core.shape[0]), flags=cv2.INTER_LINEAR)
    return _crop(cv2.GaussianBlur(core, (0, 0), 0.6))


def _crop(a):
    ys, xs = np.nonzero(a > 0.02)
    if ys.size == 0:
        return a[:1, :1]
    return a[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1]


def paper(h, w, rng, spec):
    """An RGB float32 page: paper tint, texture, uneven light, optionally lines, a shadow."""
    tint = np.float32([240, 236, 225]) + rng.uniform(-15, 12, 3).astype(np.float32)
    grain = cv2.GaussianBlur(rng.normal(0, 1, (h, w)).astype(np.float32), (0, 0), 1.2) * 3
    fibres = cv2.resize(rng.normal(0, 1, (h // 8 + 1, w // 8 + 1)).astype(np.float32), (w, h)) * 2
    light = cv2.resize(rng.uniform(0.8, 1.0, (3, 3)).astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    if "light" in spec:
        light *= rng.uniform(*spec["light"])
    if spec.get("shadow"):
        # A soft-edged shadow (a hand, a phone) across a part of the page, its edge crossing the digits.
        mask = np.zeros((h, w), np.float32)
        a, b = rng.uniform(0.2, 0.8, 2) * w
        side = rng.random() < 0.5
        poly = np.array([[a, 0], [b, h], [w if side else 0, h], [w if side else 0, 0]], np.int32)
        cv2.fillPoly(mask, [poly], 1.0)
        mask = cv2.GaussianBlur(mask, (0, 0), rng.uniform(2, 12))
        light *= 1 - rng.uniform(0.35, 0.6) * mask
    page = (tint[None, None, :] + (grain + fibres)[..., None]) * light[..., None]
    return page, light


def rule(h, w, rng, kind, digit_height):
    """Line coverage (h, w) of lined or squared paper, and the lines' RGB colour."""
    lines = np.zeros((h, w), np.float32)
    colour = np.float32([[150, 180, 225], [120, 160, 215], [170, 170, 175]][rng.integers(3)])
    spacing = digit_height * (rng.uniform(1.2, 1.6) if kind == "lined" else rng.uniform(0.4, 0.6))
    tilt = np.tan(np.radians(rng.uniform(-1.5, 1.5)))
    phase = rng.uniform(0, spacing)
    for k in range(-2, int(h / spacing) + 3):
        y = phase + k * spacing
        cv2.line(lines, (0, round(y)), (w, round(y + tilt * w)), 1.0, 1, cv2.LINE_AA)
    if kind == "squared":
        for k in range(-2, int(w / spacing) + 3):
            x = phase + k * spacing
            cv2.line(lines, (round(x), 0), (round(x - tilt * h), h), 1.0, 1, cv2.LINE_AA)
    return lines, colour


def photograph(alpha, rng, spec, size, digit_height):
    """Ink `alpha` placed on a page of `size` (w, h) as `spec` says; returns BGR uint8."""
    w, h = size
    page, light = paper(h, w, rng, spec)
    ah, aw = alpha.shape
    m = 0.2 if "tilt" in spec else 0.03  # a tilted camera crops the corners: keep the digit in the middle
    x0 = int(rng.integers(int(m * w) + 4, max(int(m * w) + 5, int((1 - m) * w) - aw - 4)))
    y0 = int(rng.integers(int(m * h) + 4, max(int(m * h) + 5, int((1 - m) * h) - ah - 4)))
    cover = np.zeros((h, w), np.float32)
    cover[y0 : y0 + ah, x0 : x0 + aw] = alpha[: h - y0, : w - x0]
    if "ruling" in spec:
        lines, colour = rule(h, w, rng, spec["ruling"], digit_height)
        page += (lines * (1 - cover))[..., None] * (colour * light[..., None] - page) * 0.8
    strength = rng.uniform(*spec["strength"])
    ink = cover * strength
    if spec.get("grain"):  # graphite: the paper's tooth leaves gaps
        ink *= np.clip(0.75 + 0.35 * rng.normal(0, 1, (h, w)).astype(np.float32), 0.3, 1)
    colour = np.float32(INKS[spec["ink"]]) * light[..., None]
    img = page + ink[..., None] * (colour - page)
    if "tilt" in spec:  # the camera not square to the page
        t = rng.uniform(*spec["tilt"])
        src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
        dst = src + rng.uniform(-t, t, (4, 2)).astype(np.float32) * np.float32([w, h]) * 0.5
        dst = np.clip(dst, [-0.1 * w, -0.1 * h], [1.1 * w, 1.1 * h]).astype(np.float32)
        img = cv2.warpPerspective(
            img, cv2.getPerspectiveTransform(src, dst), (w, h), borderMode=cv2.BORDER_CONSTANT, borderValue=(60, 55, 50)
        )
    sigma = rng.uniform(*spec["blur"]) * digit_height if "blur" in spec else rng.uniform(0.3, 0.9)
    img = cv2.GaussianBlur(img, (0, 0), sigma)
    img += rng.normal(0, rng.uniform(1, 4), img.shape).astype(np.float32)
    if "webcam" in spec:  # a low-resolution camera: fewer pixels, more noise
        f = rng.uniform(*spec["webcam"])
        small = cv2.resize(img, (max(8, round(w * f)), max(8, round(h * f))), interpolation=cv2.INTER_AREA)
        small += rng.normal(0, rng.uniform(2, 5), small.shape).astype(np.float32)
        img = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)
    return cv2.cvtColor(np.clip(img, 0, 255).astype(np.uint8), cv2.COLOR_RGB2BGR)


def encode(bgr, rng, spec):
    lo, hi = spec.get("jpeg", (55, 90))
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(lo, hi + 1))])
    assert ok
    return buf.tobytes()


def glyph_for(digit, rng, open4=False, two_strokes=False):
    names = [k for k in GLYPHS if k.split("-")[0] == digit]
    if digit == "4" and open4:
        names = ["4-open"]
    if two_strokes and digit in "45":
        names = [n for n in names if n in ("4-open", "4-parallel", "5-two-strokes")]
    elif digit == "5":
        names = ["5", "5", "5-two-strokes"]
    return names[rng.integers(len(names))]


def single(i, kind, spec, held, rng):
    digit_height = rng.uniform(60, 110)
    width = rng.uniform(*spec["width"])
    if i % 2 == 0:  # an MNIST training digit the models never trained on
        k = int(rng.integers(len(held[1])))
        label, source = str(held[1][k]), f"mnist-train-{held[2][k]}"
        alpha = mnist_alpha(held[0][k], digit_height, width, rng)
    else:
        label = str(rng.integers(10))
        name = glyph_for(label, rng)
        source = f"glyph-{name}"
        alpha = glyph_alpha(name, digit_height, width, rng)
    side = int(rng.integers(220, 300))
    return encode(photograph(alpha, rng, spec, (side, side), digit_height), rng, spec), label, source


def _drawing(spec):
    """glyph_alpha's drawing options that a kind sets (none for the kinds before issue 45)."""
    return {k: spec[k] for k in ("retrace", "slant") if k in spec}


def styled_single(i, kind, spec, held, rng):
    """A STYLE_KINDS image: its glyphs on odd images, a held-out MNIST digit of its
    class on even ones; a kind without glyphs is drawn as ``single``."""
    if "glyphs" not in spec:
        return single(i, kind, spec, held, rng)
    digit_height = rng.uniform(60, 110)
    width = rng.uniform(*spec["width"])
    if "mnist" in spec and i % 2 == 0:
        k = int(rng.choice(np.flatnonzero(held[1] == int(spec["mnist"]))))
        label, source = spec["mnist"], f"mnist-train-{held[2][k]}"
        alpha = mnist_alpha(held[0][k], digit_height, width, rng)
    else:
        name = spec["glyphs"][(i // (2 if "mnist" in spec else 1)) % len(spec["glyphs"])]
        label, source = name.split("-")[0], f"glyph-{name}"
        alpha = glyph_alpha(name, digit_height, width, rng, **_drawing(spec))
    side = int(rng.integers(220, 300))
    return encode(photograph(alpha, rng, spec, (side, side), digit_height), rng, spec), label, source


def number(i, kind, spec, held, rng):
    n = int(rng.integers(3, 9))
    digit_height = rng.uniform(45, 70)
    width = rng.uniform(*spec["width"])
    label, sources, patches = "", [], []
    for j in range(n):
        if "use" in spec and j % 2 == 1:  # the kind's styles, every other digit
            name = spec["use"][int(rng.integers(len(spec["use"])))]
            label += name.split("-")[0]
            sources.append(name)
            patches.append(glyph_alpha(name, digit_height * rng.uniform(0.92, 1.08), width, rng, **_drawing(spec)))
            continue
        if spec.get("open4") and j == 1 or (spec.get("two_strokes") and j % 2 == 0):
            d = "4" if spec.get("open4") or j % 4 == 0 else "5"
        else:
            d = str(rng.integers(10))
        label += d
        if j % 2 == 0 and not (spec.get("open4") and d == "4") and not spec.get("two_strokes"):
            k = int(rng.choice(np.flatnonzero(held[1] == int(d))))
            sources.append(f"m{held[2][k]}")
            patches.append(mnist_alpha(held[0][k], digit_height * rng.uniform(0.92, 1.08), width, rng))
        else:
            name = glyph_for(d, rng, spec.get("open4", False), spec.get("two_strokes", False))
            sources.append(name)
            patches.append(glyph_alpha(name, digit_height * rng.uniform(0.92, 1.08), width, rng))
    touch = set(rng.choice(n - 1, max(1, (n - 1) // 3), replace=False)) if spec.get("touching") else set()
    gaps = [
        -round(rng.uniform(0.04, 0.12) * digit_height) if j in touch else round(rng.uniform(0.15, 0.45) * digit_height)
        for j in range(n - 1)
    ] + [0]
    tops = [round(rng.uniform(0, 0.08) * digit_height) for _ in patches]
    row = np.zeros(
        (
            max(t + p.shape[0] for t, p in zip(tops, patches)) + round(0.4 * digit_height),
            sum(p.shape[1] for p in patches) + sum(gaps) + 4,
        ),
        np.float32,
    )
    x = 0
    for p, g, t in zip(patches, gaps, tops):
        np.maximum(row[t : t + p.shape[0], x : x + p.shape[1]], p, out=row[t : t + p.shape[0], x : x + p.shape[1]])
        x += p.shape[1] + g
    if spec.get("marks"):
        pen = max(1, round(width * digit_height))
        base = max(t + p.shape[0] for t, p in zip(tops, patches))
        y = min(row.shape[0] - pen - 1, base + round(0.15 * digit_height))
        cv2.line(row, (0, y), (row.shape[1] - 1, y + int(rng.integers(-3, 4))), 1.0, pen, cv2.LINE_AA)  # underline
        for _ in range(int(rng.integers(2, 5))):  # dots
            cv2.circle(
                row,
                (int(rng.integers(0, row.shape[1])), int(rng.integers(0, row.shape[0]))),
                max(1, pen // 2),
                1.0,
                -1,
                cv2.LINE_AA,
            )
    w = row.shape[1] + int(rng.integers(40, 120))
    h = row.shape[0] + int(rng.integers(60, 160))
    spec = dict(spec, shadow=spec.get("shadow") or spec.get("marks"))
    return encode(photograph(row, rng, spec, (w, h), digit_height), rng, spec), label, "+".join(sources)


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/photoset/make.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("tests/data/photoset"))
    p.add_argument("--per-kind", type=int, default=20, help="single-digit images per kind (default 20)")
    p.add_argument("--numbers-per-kind", type=int, default=8, help="numbers per kind (default 8)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument(
        "--kinds",
        nargs="+",
        help="make only these kinds (e.g. number-touching); each image is the one the full set would hold",
    )
    args = p.parse_args(argv)
    held = held_out_digits()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    # The issue-34 kinds, then issue 45's, come last, so that the images before them stay as they were.
    for kinds, make, count, prefix in (
        (KINDS, single, args.per_kind, "digit"),
        (NUMBER_KINDS, number, args.numbers_per_kind, "number"),
        (STYLE_KINDS, styled_single, args.per_kind, "digit"),
        (STYLE_NUMBER_KINDS, number, args.numbers_per_kind, "number"),
        (ROUND3_KINDS, styled_single, args.per_kind, "digit"),
        (ROUND3_NUMBER_KINDS, number, args.numbers_per_kind, "number"),
    ):
        for kind, spec in kinds.items():
            for i in range(count):
                rng = np.random.default_rng([args.seed, len(rows)])
                if args.kinds and kind not in args.kinds:
                    rows.append(None)  # its seed stays taken: the others are made as in the full set
                    continue
                data, label, source = make(i, kind, spec, held, rng)
                name = f"{prefix}-{kind.removeprefix('number-')}-{i:02d}.jpg"
                (args.out / name).write_bytes(data)
                rows.append({"file": name, "label": label, "kind": kind, "source": source})
    rows = [r for r in rows if r is not None]
    with open(args.out / "manifest.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["file", "label", "kind", "source"])
        writer.writeheader()
        writer.writerows(rows)
    size = sum((args.out / r["file"]).stat().st_size for r in rows)
    print(f"{len(rows)} images, {size / 1e6:.2f} MB -> {args.out}")


if __name__ == "__main__":
    main()
