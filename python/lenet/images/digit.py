"""One digit of a page (``page.Page``) found and framed as MNIST's: the second stage
of reading real images (see ``page``'s docstring for all of them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import cv2
import numpy as np

from ..errors import InputError
from .page import BOX, FRAME, Page, stroke_width, union_box

# ------------------------------------------------------------------ one digit


def find_digit(page: Page) -> list[int]:
    """The labels of the one digit: the largest component, and every sizeable
    component close to it (the parts of a broken stroke)."""
    ids = page.ink_labels()
    ids = ids[page.side[ids] >= page.min_digit]
    area = page.area[ids]
    main = int(ids[np.argmax(area)])
    # Components at least 2% of the main one's area, within a fifth of the digit's
    # size of it, are its broken strokes; grown until no more are near.
    candidates = set(ids[area >= 0.02 * page.area[main]].tolist()) - {main}
    digit = [main]
    while candidates:
        x, y, w, h = union_box(page.boxes[digit])
        m = 0.2 * max(w, h)
        near = {
            i
            for i in candidates
            if page.boxes[i, 0] < x + w + m
            and page.boxes[i, 0] + page.boxes[i, 2] > x - m
            and page.boxes[i, 1] < y + h + m
            and page.boxes[i, 1] + page.boxes[i, 3] > y - m
        }
        if not near:
            break
        digit += sorted(near)
        candidates -= near
    return digit


FINE = 4  # strokes are adjusted at 4× MNIST's scale, where a pixel is a quarter of MNIST's
# The median stroke width of MNIST training digits at that scale (box 80 px; 5% are
# finer than 7.4, 5% bolder than 14.2). Every digit is brought to it, unless closer
# than 2 px (half an MNIST pixel, and the least a disk can change): the network reads
# digits of MNIST's usual width best, rotated or blurred ones especially.
MNIST_STROKE = 9.8


@dataclass(frozen=True, eq=False)
class Part:
    """Part of a digit: the pixels of component ``label`` that lie in columns
    [x0, x1), and, where it was cut from a digit touching it, right of ``left`` and
    left of ``right``: per row of the component's box, the first column that is the
    part's and the first that is no longer (None: no cut on that side)."""

    label: int
    x0: int
    x1: int
    left: Optional[np.ndarray] = None
    right: Optional[np.ndarray] = None
    crossings: int = 0  # the strokes the cut on its right crosses

    @property
    def cut(self) -> bool:
        return self.left is not None or self.right is not None

    def mask(self, page: Page, ox: int, oy: int, h: int, w: int) -> np.ndarray:
        """The part's pixels in the working region (ox, oy, w, h), uint8 0/1."""
        labels = page.labels[oy : oy + h, ox : ox + w]
        m = labels == self.label
        if self.cut:
            m &= self._inside(page, ox, oy, h, w)
        return m.astype(np.uint8)

    def _inside(self, page: Page, ox: int, oy: int, h: int, w: int) -> np.ndarray:
        """Whether each pixel of region (ox, oy, w, h) lies between the cuts."""
        by = page.boxes[self.label, 1]
        rows = np.clip(np.arange(oy, oy + h) - by, 0, page.boxes[self.label, 3] - 1)
        columns = np.arange(ox, ox + w)[None, :]
        inside = np.ones((h, w), bool)
        if self.left is not None:
            inside &= columns >= self.left[rows][:, None]
        if self.right is not None:
            inside &= columns < self.right[rows][:, None]
        return inside


def whole(page: Page, labels) -> list[Part]:
    """Components ``labels`` as parts, uncut."""
    x, w = page.boxes[:, 0], page.boxes[:, 2]
    return [Part(int(i), int(x[i]), int(x[i] + w[i])) for i in labels]


def frame(page: Page, parts: list[Part]) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """The digit made of ``parts`` as MNIST draws it: float32 (28, 28), 0..255, white
    on black; and its box (x, y, w, h) in working pixels; None if there is no ink
    there. The strokes are brought to MNIST's median width (``MNIST_STROKE``)."""
    boxes = page.boxes[[p.label for p in parts]]
    x0, x1 = min(p.x0 for p in parts), max(p.x1 for p in parts)
    y0, y1 = boxes[:, 1].min(), (boxes[:, 1] + boxes[:, 3]).max()
    # The digit's own pixels, one pixel wider all round to keep the anti-aliased
    # edges, except across a cut: that pixel is the other digit's.
    ox, oy = max(x0 - 1, 0), max(y0 - 1, 0)
    h, w = min(y1 + 1, page.labels.shape[0]) - oy, min(x1 + 1, page.labels.shape[1]) - ox
    m = np.zeros((h, w), np.uint8)
    grow = np.ones((3, 3), np.uint8)
    for p in parts:
        mine = cv2.dilate(p.mask(page, ox, oy, h, w), grow)
        if p.cut:
            mine &= p._inside(page, ox, oy, h, w)
        m |= mine
    if not m.any():
        return None
    bx, by, w, h = cv2.boundingRect(m)
    x, y = ox + bx, oy + by
    # Drawn from the full-size image: a small digit keeps the detail shrinking took.
    crop = page.fine_ink(x, y, w, h)
    crop *= cv2.resize(m[by : by + h, bx : bx + w], crop.shape[::-1], interpolation=cv2.INTER_NEAREST)
    inked = crop[crop > 0]
    if inked.size == 0:
        return None
    crop = np.minimum(crop / float(np.percentile(inked, 90)), 1)  # the strongest strokes at full white
    pw, ph = max(1, round(w * BOX / max(w, h))), max(1, round(h * BOX / max(w, h)))
    fine = cv2.resize(
        crop, (FINE * pw, FINE * ph), interpolation=cv2.INTER_AREA if crop.shape[1] > FINE * pw else cv2.INTER_LINEAR
    )
    width = stroke_width(fine)
    if abs(width - MNIST_STROKE) >= 2:
        k = round(abs(width - MNIST_STROKE)) // 2 * 2 + 1  # a disk of diameter k changes the width by k - 1
        disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k))
        thinned = cv2.erode(fine, disk) if width > MNIST_STROKE else cv2.dilate(fine, disk)
        if thinned.max() > 0:  # a blob no wider than the disk is left as it is
            fine = thinned
    patch = cv2.resize(fine, (pw, ph), interpolation=cv2.INTER_AREA)  # anti-aliased, as MNIST
    patch /= max(float(patch.max()), 1e-6)
    mo = cv2.moments(patch)
    cx, cy = (mo["m10"] / mo["m00"], mo["m01"] / mo["m00"]) if mo["m00"] > 0 else (pw / 2, ph / 2)
    px = int(np.clip(round(FRAME / 2 - cx), 0, FRAME - pw))
    py = int(np.clip(round(FRAME / 2 - cy), 0, FRAME - ph))
    out = np.zeros((FRAME, FRAME), np.float32)
    out[py : py + ph, px : px + pw] = patch * 255
    return out, np.array([x, y, w, h])


# One digit asked for, several seen (``several_digits``): beside the digit that
# ``find_digit`` takes (not above or below it) and on its line (the centres at most
# SEVERAL_LINE of its height apart), ink at least SEVERAL_TALL as tall; or the digit itself
# wider than SEVERAL_WIDE times its height (digits so close that they were taken for one's
# broken strokes; MNIST's widest class averages 0.99 of its height).
SEVERAL_TALL, SEVERAL_LINE, SEVERAL_WIDE = 0.6, 1.0, 1.6


def several_digits(page: Page, digit: list[int]) -> bool:
    """Whether ``page`` holds more than its digit of labels ``digit`` (``find_digit``): other
    digits beside it, as in a number."""
    x, y, w, h = union_box(page.boxes[digit])
    if w > SEVERAL_WIDE * h:
        return True
    ids = page.ink_labels()
    bx, by, bw, bh = page.boxes[ids[(page.side[ids] >= page.min_digit) & ~np.isin(ids, digit)]].T
    beside = (bx >= x + w) | (bx + bw <= x)
    return bool(np.any(beside & (bh >= SEVERAL_TALL * h) & (np.abs(2 * by + bh - 2 * y - h) <= 2 * SEVERAL_LINE * h)))


def to_mnist(img: np.ndarray, source: str = "<array>") -> tuple[np.ndarray, bool]:
    """One digit anywhere in ``img`` as an MNIST image: float32 (28, 28), 0..255; and
    whether the image holds several digits (``several_digits``: that one is the largest).
    Raises InputError ("no digit found") when there is none: a blank page, specks, or only
    the edge of a desk, the paper or a shadow at the border."""
    page = Page(img, source)
    digit = find_digit(page)
    drawn = frame(page, whole(page, digit))
    if drawn is None:  # pragma: no cover - a strong component always has ink
        raise InputError(f"{source}: no digit found")
    return drawn[0], several_digits(page, digit)
