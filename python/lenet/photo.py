"""Real images to MNIST-style digits: photos and scans of digits written on paper,
digits drawn in a paint program.

MNIST digits are white on black, scaled to fit a 20×20 box keeping their aspect ratio
(anti-aliased) and pasted in a 28×28 frame with their centre of mass at the centre. A
photo is none of that. The steps, each a function below:

1. ``gray``, ``shrink``: alpha composited on white, gray, and shrunk early by a whole
   factor so that the longest side is at most ``WORK_SIDE`` pixels;
2. ``dark_ink``, ``paper``, ``darkening``: the ink's polarity; the paper's brightness
   under the strokes, estimated at a coarse scale; the ink as the relative darkening
   against it, which evens out uneven lighting and contrast (``Page``);
3. ``Page``: the ink thresholded with hysteresis relative to its strongest strokes
   (paper texture and noise drop out) and split into connected components;
4. ``find_digit``: the largest component and the components beside it (a broken
   stroke); or, for a number, ``blobs``, ``cuts`` and ``find_number``: every digit
   left to right, broken strokes joined and touching digits cut where the network
   reads the pieces better;
5. ``frame``: a digit's ink, taken at full size, cropped to its bounding box, its
   strokes brought to MNIST's width when far from it, scaled into 20×20 and pasted
   in 28×28 by its centre of mass, as MNIST was made.

Images are float32 or uint8 arrays of pixels 0..255: (H, W), or (H, W, C) with C = 1,
3 (RGB) or 4 (RGBA).
"""

from __future__ import annotations

from typing import Callable

import cv2
import numpy as np

from .errors import InputError

WORK_SIDE = 800      # px; a digit is still 15+ px tall in a 12 MP photo where it is 2% of the height
COARSE_SIDE = 128    # px; the paper's brightness is smooth: estimated at this scale
BOX, FRAME = 20, 28  # MNIST: digits fit a 20×20 box in a 28×28 frame


def gray(img: np.ndarray) -> np.ndarray:
    """The image in gray at full size, alpha composited on white (uint8 stays uint8)."""
    if img.ndim == 3 and img.shape[2] == 4:
        a = img[:, :, 3:4].astype(np.float32) / 255
        img = img[:, :, :3] * a + 255 * (1 - a)
    if img.ndim == 3 and img.shape[2] == 3:
        return cv2.cvtColor(img if img.dtype == np.uint8 else img.astype(np.float32), cv2.COLOR_RGB2GRAY)
    return img[:, :, 0] if img.ndim == 3 else img


def shrink(g: np.ndarray) -> tuple[np.ndarray, int]:
    """Gray float32 at working size, and the integer factor it was shrunk by: the
    longest side at most WORK_SIDE (OpenCV's area interpolation is fastest, and still
    anti-aliased, by whole factors)."""
    n = -(-max(g.shape) // WORK_SIDE)
    if n > 1:
        h, w = g.shape[0] // n, g.shape[1] // n
        g = cv2.resize(g[:h * n, :w * n], (max(1, w), max(1, h)), interpolation=cv2.INTER_AREA)
    return g.astype(np.float32), n


def _coarse(g: np.ndarray) -> np.ndarray:
    f = COARSE_SIDE / max(g.shape)
    if f >= 1:
        return g
    return cv2.resize(g, (max(1, round(g.shape[1] * f)), max(1, round(g.shape[0] * f))), interpolation=cv2.INTER_AREA)


def dark_ink(g: np.ndarray) -> bool:
    """Whether the ink is darker than the paper. The paper is most of the image, so
    the median is paper: on light paper the ink is dark; on a dark ground (a board, a
    dim photo) the ink is whichever extreme lies farther from the median (extremes of
    a 3×3 median, so that single noisy pixels do not count)."""
    m = cv2.medianBlur(np.clip(g, 0, 255).astype(np.uint8), 3)
    median = float(np.median(m[::2, ::2]))
    return median >= 128 or median - float(m.min()) >= float(m.max()) - median


def paper(c: np.ndarray) -> np.ndarray:
    """The paper's brightness under coarse image ``c`` (dark ink): the strokes are
    found by their darkening against a small max filter (a wide stroke shows its
    outline, which is then filled), masked out and inpainted from the paper around."""
    k = max(3, max(c.shape) // 16 | 1)
    bright = cv2.dilate(c, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    strokes = ((bright - c) > 0.15 * np.maximum(bright, 32)).astype(np.uint8)
    strokes = cv2.dilate(strokes, np.ones((3, 3), np.uint8))  # the strokes' blurred edges
    outlines, _ = cv2.findContours(strokes, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    cv2.drawContours(strokes, outlines, -1, 1, cv2.FILLED)
    c8 = np.clip(c, 0, 255).astype(np.uint8)
    return cv2.inpaint(c8, strokes, 3, cv2.INPAINT_TELEA).astype(np.float32)


def darkening(ground: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ink in [0, 1] (0: bare paper, ~1: the darkest ink): how much darker ``p`` is
    than the paper under it (``ground``), relatively, so that a stroke in the shade
    counts as much as one in the light."""
    # A ground darker than 32 has no ink to speak of on it: no division by ~0.
    return np.clip(cv2.divide(cv2.subtract(ground, p), cv2.max(ground, 32.0)), 0, 1)


class Page:
    """One image analysed: its ink and the ink's strokes.

    ``ink``: float32 (h, w) in [0, 1] at working size (``darkening`` against
    ``paper``, light ink on a dark ground inverted first); ``labels``: int32 (h, w),
    the strokes: connected components of a hysteresis threshold of the ink, 0 for
    none; ``boxes``: (n, 4) x, y, w, h per label (row 0 unused); ``area``: pixels per
    label, 0 for a label that reaches no strong stroke; ``n``: the working size is the
    full size shrunk n times (``fine_ink`` gives a box's ink at full size).
    """

    def __init__(self, img: np.ndarray, source: str):
        self.full = gray(img)
        g, self.n = shrink(self.full)
        self.dark = dark_ink(g)
        p = g if self.dark else 255 - g
        bg = cv2.GaussianBlur(paper(_coarse(p)), (0, 0), 1.0)
        self.paper = cv2.resize(bg, (p.shape[1], p.shape[0]), interpolation=cv2.INTER_LINEAR)
        self.ink = darkening(self.paper, p)
        # Seeds and peak from a 3×3 median: salt-and-pepper noise and paper fibres
        # cannot start a stroke (the strokes themselves keep their fine detail).
        smooth = cv2.medianBlur(self.ink, 3)
        peak = float(smooth.max())
        if peak < 0.15:  # paper texture, JPEG noise and lighting stay below
            raise InputError(f"{source}: no digit found (no ink darker or lighter than the paper)")
        # Relative to the darkest ink, low enough that a fainter digit beside it counts.
        low, high = self.ink > 0.25 * peak, smooth > 0.4 * peak
        n, self.labels, stats, _ = cv2.connectedComponentsWithStats(low.astype(np.uint8), connectivity=8)
        # Keep the components that reach a strong stroke somewhere (hysteresis).
        strong = np.bincount(self.labels[high], minlength=n) > 0
        strong[0] = False
        self.boxes = stats[:, :4]
        x, y, w, h = self.boxes.T
        self.at_border = (x == 0) | (y == 0) | (x + w == low.shape[1]) | (y + h == low.shape[0])
        self.area = stats[:, 4] * strong
        self.min_side = max(5.0, 0.015 * max(low.shape))  # px; anything smaller is a speck

    def fine_ink(self, x: int, y: int, w: int, h: int) -> np.ndarray:
        """The ink of working box (x, y, w, h) at full size: (h n, w n)."""
        n = self.n
        p = self.full[y * n:(y + h) * n, x * n:(x + w) * n].astype(np.float32)
        if not self.dark:
            p = 255 - p
        return darkening(cv2.resize(self.paper[y:y + h, x:x + w], (w * n, h * n), interpolation=cv2.INTER_LINEAR), p)


def _union(boxes: np.ndarray) -> np.ndarray:
    x0, y0 = boxes[:, 0].min(), boxes[:, 1].min()
    return np.array([x0, y0, (boxes[:, 0] + boxes[:, 2]).max() - x0, (boxes[:, 1] + boxes[:, 3]).max() - y0])


def find_digit(page: Page, source: str) -> list[int]:
    """The labels of the one digit: the largest component, and every sizeable
    component close to it (the parts of a broken stroke)."""
    # Ink at the image's border is a paper edge, a desk or a shadow, unless it is all there is.
    area = page.area * (np.maximum(page.boxes[:, 2], page.boxes[:, 3]) >= page.min_side)
    if not area.any():
        raise InputError(f"{source}: no digit found (only specks)")
    if (area * ~page.at_border).any():
        area = area * ~page.at_border
    main = int(np.argmax(area))
    ids = [main]
    candidates = set(np.nonzero(area >= 0.02 * area[main])[0]) - {main}
    grown = True
    while grown:
        x, y, w, h = _union(page.boxes[ids])
        m = 0.2 * max(w, h)
        near = {i for i in candidates if page.boxes[i, 0] < x + w + m and page.boxes[i, 0] + page.boxes[i, 2] > x - m
                and page.boxes[i, 1] < y + h + m and page.boxes[i, 1] + page.boxes[i, 3] > y - m}
        ids += sorted(near)
        candidates -= near
        grown = bool(near)
    return ids


def stroke_width(fine: np.ndarray) -> float:
    """A digit's mean stroke width in pixels: twice its area over its perimeter (a
    stroke of length L and width w has area Lw and perimeter about 2L)."""
    b = (fine > 0.5).astype(np.uint8)
    contours, _ = cv2.findContours(b, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
    return 2 * float(b.sum()) / max(sum(cv2.arcLength(c, True) for c in contours), 1.0)


FINE = 4  # strokes are adjusted at 4× MNIST's scale, where a pixel is a quarter of MNIST's
# Stroke widths of MNIST training digits at that scale (box 80 px): 5th percentile, median, 95th.
MNIST_STROKE = (7.4, 9.8, 14.2)


def frame(page: Page, ids, columns: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """The digit made of components ``ids`` (optionally only columns [x0, x1) of
    them) as MNIST draws it: float32 (28, 28), 0..255, white on black; and its box
    (x, y, w, h) in working pixels; None if there is no ink there. Strokes bolder
    or finer than MNIST's are brought to MNIST's median width (the network has seen few)."""
    x, y, w, h = _union(page.boxes[ids])
    if columns is not None:
        x, w = columns[0], columns[1] - columns[0]
    # The digit's own pixels, one pixel wider all round to keep the anti-aliased edges.
    y0, x0 = max(y - 1, 0), max(x - 1, 0)
    m = np.isin(page.labels[y0:y + h + 1, x0:x + w + 1], ids).astype(np.uint8)
    if columns is not None:
        m[:, :x - x0] = 0
        m[:, x + w - x0:] = 0
    m = cv2.dilate(m, np.ones((3, 3), np.uint8))
    if not m.any():
        return None
    bx, by, w, h = cv2.boundingRect(m)
    x, y = x0 + bx, y0 + by
    # Drawn from the full-size image: a small digit keeps the detail shrinking took.
    crop = page.fine_ink(x, y, w, h)
    crop *= cv2.resize(m[by:by + h, bx:bx + w], crop.shape[::-1], interpolation=cv2.INTER_NEAREST)
    inked = crop[crop > 0]
    if inked.size == 0:
        return None
    crop = np.minimum(crop / float(np.percentile(inked, 90)), 1)  # the strongest strokes at full white
    pw, ph = max(1, round(w * BOX / max(w, h))), max(1, round(h * BOX / max(w, h)))
    fine = cv2.resize(crop, (FINE * pw, FINE * ph),
                      interpolation=cv2.INTER_AREA if crop.shape[1] > FINE * pw else cv2.INTER_LINEAR)
    width = stroke_width(fine)
    if not MNIST_STROKE[0] <= width <= MNIST_STROKE[2]:
        k = round(abs(width - MNIST_STROKE[1])) // 2 * 2 + 1  # a disk of diameter k changes the width by k - 1
        disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))
        fine = cv2.erode(fine, disk) if width > MNIST_STROKE[1] else cv2.dilate(fine, disk)
    patch = cv2.resize(fine, (pw, ph), interpolation=cv2.INTER_AREA)  # anti-aliased, as MNIST
    patch /= max(float(patch.max()), 1e-6)
    mo = cv2.moments(patch)
    cx, cy = (mo["m10"] / mo["m00"], mo["m01"] / mo["m00"]) if mo["m00"] > 0 else (pw / 2, ph / 2)
    px = int(np.clip(round(FRAME / 2 - cx), 0, FRAME - pw))
    py = int(np.clip(round(FRAME / 2 - cy), 0, FRAME - ph))
    out = np.zeros((FRAME, FRAME), np.float32)
    out[py:py + ph, px:px + pw] = patch * 255
    return out, np.array([x, y, w, h])


def to_mnist(img: np.ndarray, source: str = "<array>") -> np.ndarray:
    """One digit anywhere in ``img`` as an MNIST image: float32 (28, 28), 0..255.
    Raises InputError when there is no digit (a blank page)."""
    page = Page(img, source)
    return frame(page, find_digit(page, source))[0]


def blobs(page: Page, source: str) -> list[list[int]]:
    """The number's blobs, left to right, each the labels of one or more components:
    components that overlap horizontally by half the narrower one are one blob (a 5
    and its bar), and a fragment less than half as tall as the tallest component
    joins its nearest blob (the broken hook of a 2). A blob is one digit, part of one
    (a broken stroke) or several touching digits: ``find_number`` decides."""
    ok = (page.area > 0) & (np.maximum(page.boxes[:, 2], page.boxes[:, 3]) >= page.min_side)
    if (ok & ~page.at_border).any():
        ok &= ~page.at_border
    if not ok.any():
        raise InputError(f"{source}: no digit found (only specks)")
    ids = np.nonzero(ok & (page.area >= 0.03 * page.area[ok].max()))[0]
    tall = page.boxes[ids, 3] >= 0.5 * page.boxes[ids, 3].max()
    groups: list[list[int]] = []
    for i in sorted(ids[tall], key=lambda i: page.boxes[i, 0]):
        x, w = page.boxes[i, 0], page.boxes[i, 2]
        if groups:
            gx, _, gw, _ = _union(page.boxes[groups[-1]])
            if min(x + w, gx + gw) - max(x, gx) >= 0.5 * min(w, gw):
                groups[-1].append(i)
                continue
        groups.append([i])
    for i in ids[~tall]:
        x, w = page.boxes[i, 0], page.boxes[i, 2]
        gap = [max(b[0] - (x + w), x - (b[0] + b[2])) for b in (_union(page.boxes[g]) for g in groups)]
        groups[int(np.argmin(gap))].append(i)
    return groups


def cuts(page: Page, ids: list[int], height: float) -> list[int]:
    """Columns where blob ``ids`` may be cut into touching digits: for 2, 3 and 4
    digits (as many as its width allows), the column with the least ink near each
    even division."""
    x, y, w, h = _union(page.boxes[ids])
    column_ink = (page.ink[y:y + h, x:x + w] * np.isin(page.labels[y:y + h, x:x + w], ids)).sum(axis=0)
    out: list[int] = []
    for n in range(2, min(int(w / (0.45 * height)), 4) + 1):
        for k in range(1, n):
            lo, hi = round((k - 0.4) * w / n), round((k + 0.4) * w / n)
            out.append(x + lo + int(np.argmin(column_ink[lo:hi])))
    # Cuts closer than a tenth of the height to another, or to an end, cut the same place.
    kept: list[int] = []
    for c in sorted(out):
        if c - max([x] + kept) >= 0.1 * height and x + w - c >= 0.1 * height:
            kept.append(c)
    return kept


# Width over height of MNIST digits per class (the 5,000 training digits the shipped
# models learnt from): mean and standard deviation.
ASPECT = np.array([[0.93, 0.49, 0.97, 0.84, 0.82, 0.99, 0.74, 0.81, 0.79, 0.71],
                   [0.16, 0.20, 0.21, 0.15, 0.16, 0.23, 0.16, 0.17, 0.17, 0.14]])
SLANT = 1.3  # handwriting is more slanted and rotated than MNIST: its spread of widths is wider
# Prior odds of the two accidents of handwriting: two digits that touch (a blob cut
# in two), and a digit whose strokes do not meet (two blobs joined).
TOUCHING, BROKEN = 0.1, 0.1
SHORT = 0.9  # a digit less tall than this, relative to the number's median, is suspect


def find_number(img: np.ndarray, proba: Callable[[np.ndarray], np.ndarray],
                source: str = "<array>") -> tuple[list[np.ndarray], list[tuple[int, int, int, int]]]:
    """The digits of a number written left to right in ``img``: MNIST images
    (float32 (28, 28), 0..255) and boxes (x, y, w, h) in ``img``'s pixels, left to
    right. Raises InputError when there is no digit.

    Blobs wide enough to hold touching digits are cut into pieces where they could
    be (``cuts``); a digit is a run of adjacent pieces of one blob, or two or three
    whole blobs joined (a digit whose strokes do not meet). The reading kept is the
    most probable sequence of digits (dynamic programming over the pieces): each
    digit counts with the probability the network (``proba``: MNIST images -> class
    probabilities) gives its best class and with how usual its width is for that
    class (``ASPECT``), each cut through a blob with TOUCHING, each join of two blobs
    with BROKEN (impossible across a gap wider than a quarter of the digits'
    height), and a digit shorter than the number's digits (a fragment) with how
    unusual its height is."""
    page = Page(img, source)
    groups = blobs(page, source)
    height = float(np.median([_union(page.boxes[ids])[3] for ids in groups]))
    pieces = []  # (labels, x0, x1, blob index)
    for b, ids in enumerate(groups):
        x, _, w, _ = _union(page.boxes[ids])
        edges = [x] + cuts(page, ids, height) + [x + w]
        pieces += [(ids, a, e, b) for a, e in zip(edges, edges[1:]) if e > a]
    first = {b: min(k for k, p in enumerate(pieces) if p[3] == b) for b in range(len(groups))}
    last = {b: max(k for k, p in enumerate(pieces) if p[3] == b) for b in range(len(groups))}
    spans = [(i, j) for b in range(len(groups)) for i in range(first[b], last[b] + 1) for j in range(i, last[b] + 1)]
    spans += [(first[b], last[e]) for b in range(len(groups)) for e in (b + 1, b + 2) if e < len(groups)]
    runs = {}  # (first piece, last piece) -> (frame, box, log prior, aspect)
    for i, j in spans:
        joins = [k for k in range(i, j) if pieces[k][3] != pieces[k + 1][3]]
        if any(pieces[k + 1][1] - pieces[k][2] > 0.25 * height for k in joins):
            continue
        ids = sorted({l for p in pieces[i:j + 1] for l in p[0]})
        drawn = frame(page, ids, (pieces[i][1], pieces[j][2]))
        if drawn is None:
            continue
        _, _, w, h = drawn[1]
        short = max(0.0, SHORT - h / height) / 0.1  # the digits of a number are about as tall
        runs[i, j] = (*drawn, len(joins) * np.log(BROKEN) - short * short / 2, w / h)
    keys = list(runs)
    score = {}
    for k, pk in zip(keys, proba(np.stack([runs[k][0] for k in keys]))):
        c = int(np.argmax(pk))
        z = (runs[k][3] - ASPECT[0, c]) / (SLANT * ASPECT[1, c])  # how unusual its width is for its class
        score[k] = runs[k][2] + float(np.log(pk[c])) - z * z / 2
    # best[j]: the score of the best reading of pieces [0, j); start[j]: where its last digit starts.
    best, start = [0.0] + [-np.inf] * len(pieces), [0] * (len(pieces) + 1)
    for j in range(1, len(pieces) + 1):
        for i in range(j):
            if (i, j - 1) in score:
                cut = np.log(TOUCHING) if 0 < i and pieces[i - 1][3] == pieces[i][3] else 0.0
                if best[i] + score[i, j - 1] + cut > best[j]:
                    best[j], start[j] = best[i] + score[i, j - 1] + cut, i
    digits, j = [], len(pieces)
    while j > 0:
        digits.append(runs[start[j], j - 1])
        j = start[j]
    return [d[0] for d in digits[::-1]], [tuple(int(v) * page.n for v in d[1]) for d in digits[::-1]]
