"""The page of a photo or scan and the ink on it: the first stage of reading real
images (``digit`` then frames one digit as MNIST's, ``number`` reads several).

MNIST digits are white on black, scaled to fit a 20×20 box keeping their aspect ratio
(anti-aliased) and pasted in a 28×28 frame with their centre of mass at the centre. A
photo is none of that. The steps, each a function or class of these three modules:

1. ``gray``, ``shrink``: alpha composited on white, gray, and shrunk early by a whole
   factor so that the longest side is at most ``WORK_SIDE`` pixels (``jpeg_reduction``
   lets the decoder do part of that for big JPEGs);
2. ``dark_ink``, ``paper``, ``darkening``: the ink's polarity; the paper's brightness
   under the strokes, estimated at a coarse scale, then (``Page``) also by a grey
   closing a few strokes wide, which follows the sharp edge of a shadow; the ink as
   the relative darkening against it, which evens out uneven lighting and contrast;
3. ``Page``: the lines of ruled or squared paper taken out, and underlines
   (``rules``); the ink thresholded with hysteresis relative to its strongest
   strokes (paper texture and noise drop out), split into connected components;
   specks, and the edges of the paper, a desk or a shadow at the image's border (and
   what lies past the sheet's edge, ``beyond_paper``), are set apart;
4. ``digit.find_digit``: the largest component and the components beside it (a broken
   stroke); or, for a number, ``number.find_number``: every digit left to right, broken
   strokes joined, touching digits cut and stray marks left out where that gives the
   likeliest reading;
5. ``digit.frame``: a digit's ink, taken at full size, cropped to its bounding box, its
   strokes brought to MNIST's median width, scaled into 20×20 and pasted in 28×28 by its
   centre of mass, as MNIST was made.

Images are float32 or uint8 arrays of pixels 0..255: (H, W), or (H, W, C) with C = 1,
3 (RGB) or 4 (RGBA). Sizes and distances of the page are in working pixels unless
said otherwise.
"""

from __future__ import annotations

from typing import Optional

import cv2
import numpy as np

from ..errors import InputError
from .rules import ruled_lines, underlines

WORK_SIDE = 800  # px; a digit 2% of a photo's height is still 10+ px tall here
COARSE_SIDE = 128  # px; the paper's brightness is smooth: estimated at this scale
BOX, FRAME = 20, 28  # MNIST: digits fit a 20×20 box in a 28×28 frame


# ------------------------------------------------------------------ decoding big JPEGs


def jpeg_reduction(longest: int, side: int = 2 * WORK_SIDE) -> int:
    """1, 2, 4 or 8: how many times smaller a JPEG whose longest side is ``longest``
    pixels may be decoded (libjpeg scales while decoding, for a fraction of the time)
    and keep that side at least ``side`` pixels, where every path shrinks it anyway:
    to the model's input for the mnist path, to WORK_SIDE for the photo path, which
    takes a digit's ink at full size, so ``side`` leaves it twice the working
    resolution."""
    k = 1
    while k < 8 and longest // (2 * k) >= side:
        k *= 2
    return k


# ------------------------------------------------------------------ the page and its ink


def gray(img: np.ndarray) -> np.ndarray:
    """The image in gray at full size, alpha composited on white (uint8 stays uint8)."""
    if img.ndim == 3 and img.shape[2] == 4:
        a = img[:, :, 3:4].astype(np.float32) / 255
        img = img[:, :, :3] * a + 255 * (1 - a)
    if img.ndim == 3 and img.shape[2] == 3:
        return cv2.cvtColor(img if img.dtype == np.uint8 else img.astype(np.float32), cv2.COLOR_RGB2GRAY)
    return img[:, :, 0] if img.ndim == 3 else img


def shrink(g: np.ndarray) -> tuple[np.ndarray, int]:
    """Gray float32 at working size, and the integer factor n it was shrunk by: the
    longest side at most WORK_SIDE. Area interpolation by a whole factor is OpenCV's
    fastest way down and still anti-aliased; the last n - 1 rows or columns at most
    are dropped (a side shorter than n becomes one pixel)."""
    n = -(-max(g.shape) // WORK_SIDE)
    if n > 1:
        h, w = max(1, g.shape[0] // n), max(1, g.shape[1] // n)
        g = cv2.resize(g[: h * n, : w * n], (w, h), interpolation=cv2.INTER_AREA)
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
    a 3×3 median, so that single noisy pixels do not count) - unless what is lighter
    is wider than a quarter of the image and covers LIGHT_PAPER of it: that is
    paper, and the rest a shadow over the page.

    A crop of one digit (at most CROP_SIDE px) may be as tight as its ink, which
    then covers most of it: its paper is what its border mostly is (a digit touches
    each side of its box over a stroke's width, its corners stay bare)."""
    m = cv2.medianBlur(np.clip(g, 0, 255).astype(np.uint8), 3)
    lo, hi = float(m.min()), float(m.max())
    if max(m.shape) <= CROP_SIDE:
        border = np.concatenate([m[0], m[-1], m[1:-1, 0], m[1:-1, -1]])
        return float(np.median(border)) >= (lo + hi) / 2
    median = float(np.median(m[::2, ::2]))
    if median >= 128 or median - lo >= hi - median:
        return True
    light = (m > (median + hi) / 2).astype(np.uint8)
    wide = cv2.morphologyEx(light, cv2.MORPH_OPEN, np.ones((max(3, max(m.shape) // 4),) * 2, np.uint8))
    return float(np.mean(wide)) > LIGHT_PAPER


# Light regions wider than a quarter of the image covering this much of it are paper:
# strokes, however bold, are narrower.
LIGHT_PAPER = 0.15


# The closing that finds the paper beside sharp changes of light: a window CLOSING
# strokes wide (at least CLOSING_MIN px, at most a quarter of the page).
CLOSING, CLOSING_MIN = 4.0, 5
# A stroke darkens the paper by at least this fraction of the brightest paper near it
# (pale blue ballpoint under a lamp: 0.12-0.15); paper texture and JPEG noise stay well
# below. On a dark image (a board, a dim photo; its median below 128) ink must stand
# out by DIM_CONTRAST: relative to a dark ground the noise is larger, and chalk dust
# smudges a board (at 0.12, 2 of 180 blank boards of photo_fixtures gave a digit). A
# region at the border darker than the paper next to it by EDGE_STEP is not paper: a
# desk, a shadow, a bold stroke.
STROKE_CONTRAST, DIM_CONTRAST, EDGE_STEP = 0.12, 0.15, 0.2
# A faint or defocused digit can darken the coarse page less than the stroke contrast
# (its thin or soft strokes averaged with the paper around them): the paper estimate
# then takes it for paper, inpaints over nothing, and no ink is left ("no digit
# found" for 5 of 40 defocused digits of a photo-like set, whose ink peaked 1-10%
# below the floor). A page with no ink has its paper estimated again with everything
# darker by FAINT_MASK of the contrast masked as possible ink; the ink must darken the
# paper by FAINT_FLOOR (below) and stand FAINT_NOISE standard deviations of
# the noise above the paper, not NOISE: masking that shallow also masks slopes of
# uneven light, where the paper inpainted from a patch's brighter rim leaves a
# darkening that is no stroke (a blank lit page: 7-12 sd; the faint and defocused
# digits: 20-55). Not on a dim page (DIM_CONTRAST) nor one with ruled lines: the
# remnants of the lines taken out read as faint strokes that stand 17-29 sd out (blank
# ruled pages of tests/images/test_photo.py: 54 -> 51 of 60 "no digit found" with the
# retry). Chosen on the photo-like set at seed 7 and those blank pages.
FAINT_MASK, FAINT_NOISE = 0.4, 15
# On that second estimate the ink's peak need only darken the paper by FAINT_FLOOR (not
# STROKE_CONTRAST): standing FAINT_NOISE out already tells it from texture and light,
# and a thin pale ballpoint stroke darkens 9-12%. Blank photo-like pages that reach the
# retry (make.py's kinds, seeds 97-99: 181 of 330) peak at 6% at most (heavy JPEG); of
# 1,200 faint and defocused digits at seed 12, "no digit found" 9 -> 3 and 2 more read
# right (0.08 read as many right).
FAINT_FLOOR = 0.09
# A component at the border that is a single run of ink across it in this share of its
# rows is a band (a line, a shadow's edge), not a digit with loops or forks.
BAND = 0.9
# A band that spans the page from one side to the opposite one, on a page at least
# ACROSS times as wide (tall) as the band is long, is no digit: no tight crop of a 1.
ACROSS = 0.6
# Beyond the paper (``beyond_paper``): a background seen past the sheet's edge (a
# sweater above a webcam's sheet) is darker than BEYOND of the paper estimated under it,
# where a shadow on the paper is 0.35 or more of it; it lies along the border
# (BEYOND_CONTACT). A component with BEYOND_SHARE of its pixels there is the edge of
# something, as a desk is (taking that ink out instead left the remnants of a grid's lines
# beside a desk apart, and one was read as a 1).
BEYOND, BEYOND_CONTACT, BEYOND_SHARE = 0.3, 0.5, 0.5
# A page where more than this fraction is strokes at the coarse scale is lined (a
# digit alone covers a few percent).
LINED = 0.1


# Defocus (``_defocused``): a page whose strokes, against the paper's window, are
# shallower than their valleys by this ratio (median of their deeper half; pen
# strokes 0.94-1.0, defocused ones 0.6-0.97) is out of focus; valleys up to
# BLUR_WINDOW windows wide are then strokes, where the strokes lie within a box of
# BLUR_BOX of the image.
BLUR_DEPTH, BLUR_WINDOW, BLUR_BOX = 0.9, 4, 0.5


def _window(c: np.ndarray) -> int:
    """The side of the max filter that finds the paper near each pixel of coarse image
    ``c``: 1/16 of the image, odd, at least 3."""
    return max(3, max(c.shape) // 16 | 1)


def _strokes(c: np.ndarray, contrast: float, k: int) -> np.ndarray:
    """uint8 0/1: where coarse image ``c`` is darker than its brightest paper within
    ``k`` px by ``contrast`` of it."""
    return (_below_max(c, k) > contrast).astype(np.uint8)


def _below_max(c: np.ndarray, k: int) -> np.ndarray:
    """How much darker coarse image ``c`` is than its brightest paper within ``k`` px,
    as a fraction of it."""
    bright = cv2.dilate(c, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    return (bright - c) / np.maximum(bright, 32)


def _below_closing(c: np.ndarray, k: int) -> np.ndarray:
    """How much darker coarse image ``c`` is than its grey closing with a window of
    ``k`` px, as a fraction of it: dark valleys narrower than ``k``. A closing, unlike
    the max filter, leaves a slope of light (a ramp, the edge of a shadow) as it is:
    only what is darker than both its sides counts."""
    k = min(k, max(3, min(c.shape) // 2 * 2 - 1)) | 1
    closed = cv2.morphologyEx(c, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    return (closed - c) / np.maximum(closed, 32)


def _defocused(c: np.ndarray, strokes: np.ndarray, k: int, contrast: float) -> np.ndarray:
    """uint8 0/1: the rest of the defocused strokes around ``strokes`` (found on
    coarse image ``c`` against a window of ``k`` px), or nothing where the page is in
    focus. A pen's stroke reaches its full depth within the window; a defocused one
    fades over more than the window, so against it the stroke is shallower than its
    valley, and the paper estimated beside it keeps its soft outer part (a 9 without
    its loop). On such a page, valleys up to BLUR_WINDOW windows wide near the strokes
    are strokes too - where the strokes lie together as one digit's or one number's
    do (lines across the page, or specks all over it, leave the window as it is)."""
    ys, xs = np.nonzero(strokes)
    if (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1) > BLUR_BOX * strokes.size:
        return np.zeros_like(strokes)
    wide = BLUR_WINDOW * k | 1
    valley = _below_closing(c, wide)
    # Judged on the deeper half of the strokes: their fringes, and the slopes of
    # uneven light a closing this wide rounds off, are shallow on any page.
    depth, valley_depth = _below_max(c, k)[strokes > 0], valley[strokes > 0]
    deep = depth >= np.median(depth)
    if np.median(depth[deep] / np.maximum(valley_depth[deep], 1e-6)) >= BLUR_DEPTH:
        return np.zeros_like(strokes)
    return (valley > contrast).astype(np.uint8) & cv2.dilate(strokes, np.ones((wide, wide), np.uint8))


def beyond_paper(c: np.ndarray, ground: np.ndarray, shape: tuple) -> Optional[np.ndarray]:
    """A bool mask, at working size ``shape``, of what lies beyond the paper's edge on
    coarse image ``c`` (dark ink) whose paper is ``ground`` (``paper``): regions darker
    than BEYOND of the paper that lie along the border: their contact with it is
    BEYOND_CONTACT of their outline within the image or more, where a bold stroke or loop
    cut by the border has paper along both its sides. None where there is none."""
    dark = (c < BEYOND * np.maximum(ground, 1)).astype(np.uint8)
    if not dark.any():
        return None
    # Gaps of a pixel closed (a textured background is one region), no more: a window's
    # closing joined a bold 8 to the desk beside it, and took it for the desk.
    dark = cv2.morphologyEx(dark, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
    count, labels = cv2.connectedComponents(dark, connectivity=8)
    contact = sum(
        np.bincount(side, minlength=count) for side in (labels[0], labels[-1], labels[1:-1, 0], labels[1:-1, -1])
    )
    outline = dark.astype(bool) & ~cv2.erode(dark, np.ones((3, 3), np.uint8), borderType=cv2.BORDER_REPLICATE).astype(
        bool
    )
    along = contact >= BEYOND_CONTACT * np.bincount(labels[outline], minlength=count)
    along[0] = False
    if not along.any():
        return None
    return cv2.resize(along[labels].astype(np.uint8), (shape[1], shape[0]), interpolation=cv2.INTER_NEAREST) > 0


def stroke_contrast(c: np.ndarray) -> float:
    """The least darkening that is ink on coarse image ``c`` (dark ink):
    STROKE_CONTRAST, or DIM_CONTRAST on a dim page or a ruled one (where the faint
    stretches of its lines, left in pieces, would be read as strokes)."""
    if np.median(c) < 128:
        return DIM_CONTRAST
    lined = _strokes(c, STROKE_CONTRAST, _window(c)).mean() > LINED
    return DIM_CONTRAST if lined else STROKE_CONTRAST


def paper(c: np.ndarray, contrast: float = STROKE_CONTRAST) -> np.ndarray:
    """The paper's brightness under coarse image ``c`` (dark ink): the strokes
    (darker than the paper by ``contrast`` of it) are found by their darkening
    against a max filter 1/16 of the image wide, masked out with whatever they
    enclose, and inpainted from the paper around them.

    A stroke wider than the filter shows only its outline; so does a desk or a
    shadow along the border. What the outlines enclose, alone or with the border,
    is masked too: every region apart from the paper (the largest) that does not
    reach the border (the inside of a bold stroke, the hole of a 0), and every one
    that does but is darker than the paper next to it by EDGE_STEP or more (a bold
    stroke cut by the border, a desk) - not a pocket of paper between a digit and
    the border, which is as light as the paper around it."""
    k = _window(c)
    strokes = _strokes(c, contrast, k)
    if strokes.mean() > LINED:
        # So many strokes are the lines of ruled or squared paper: lines thinner than
        # 3 px here are closed over (the paper under them is the paper beside them),
        # or the inpainting would have little paper left to go by.
        c = cv2.morphologyEx(c, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
        strokes = _strokes(c, contrast, k)
    elif strokes.any():
        strokes |= _defocused(c, strokes, k, contrast)
    strokes = cv2.dilate(strokes, np.ones((3, 3), np.uint8))  # the strokes' blurred edges
    count, regions, stats, _ = cv2.connectedComponentsWithStats(1 - strokes, connectivity=4)
    if count > 2:
        main = 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
        x, y, w, h = stats[:, 0], stats[:, 1], stats[:, 2], stats[:, 3]
        fill = ~((x == 0) | (y == 0) | (x + w == c.shape[1]) | (y + h == c.shape[0]))
        for r in np.nonzero(~fill)[0]:  # at the border: compared with the paper within the filter's width
            box = (slice(max(y[r] - k, 0), y[r] + h[r] + k), slice(max(x[r] - k, 0), x[r] + w[r] + k))
            near = c[box][regions[box] == main]
            fill[r] = near.size > 0 and np.median(c[box][regions[box] == r]) <= (1 - EDGE_STEP) * np.median(near)
        fill[[0, main]] = False
        strokes[fill[regions]] = 1
    c8 = np.clip(c, 0, 255).astype(np.uint8)
    # OpenCV's inpainting reads memory it has not written on a 1-pixel-high image (its
    # answers varied from call to call; tests/fuzz_targets.py image-array): such an
    # image (a thin strip, shrunk) is inpainted with its row repeated, then cropped.
    dy, dx = max(0, 3 - c8.shape[0]), max(0, 3 - c8.shape[1])
    if dy or dx:
        c8 = cv2.copyMakeBorder(c8, 0, dy, 0, dx, cv2.BORDER_REPLICATE)
        strokes = cv2.copyMakeBorder(strokes, 0, dy, 0, dx, cv2.BORDER_REPLICATE)
    return cv2.inpaint(c8, strokes, 3, cv2.INPAINT_TELEA)[: c.shape[0], : c.shape[1]].astype(np.float32)


def darkening(ground: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ink in [0, 1] (0: bare paper, ~1: the darkest ink): how much darker ``p`` is
    than the paper under it (``ground``), relatively, so that a stroke in the shade
    counts as much as one in the light."""
    # A ground darker than 32 has no ink to speak of on it: no division by ~0.
    return np.clip(cv2.divide(cv2.subtract(ground, p), cv2.max(ground, 32.0)), 0, 1)


# Hysteresis, relative to the darkest ink of the page (its peak): a stroke is ink
# above LOW connected to ink above HIGH somewhere. LOW keeps a fainter digit beside a
# darker one, and a stroke's soft edges; HIGH keeps texture and noise from starting one.
# A page whose darkest ink darkens the paper by less than the stroke contrast has none
# (STROKE_CONTRAST, DIM_CONTRAST: at 0.15, faint blue ballpoint read as blank).
LOW, HIGH = 0.25, 0.4
# The darkest ink must also stand this many standard deviations of the noise above
# the paper: the 3×3 median's peak over a page of pure noise reaches about 3.
NOISE = 6
# A digit is at least this fraction of the image's longest side (and 5 px) tall or
# wide: anything smaller alone is a speck. Parts of a digit may be smaller: a number
# judges them by its digits' height (``find_number``); below 3 px all are specks.
SPECK, SPECK_MIN = 0.015, 5
# A component at the image's border whose contact with the border is this fraction of
# its box's perimeter or more is the edge of something (a desk, the paper, a shadow): a
# band along one side has at least half, a digit cut by the border a stroke's width.
# An image no larger than CROP_SIDE px is a crop of one digit: it has no such edges.
EDGE_CONTACT, CROP_SIDE = 0.2, 64
# Unless it encloses bare paper over LOOP of its box or more and touches the border
# along less than LOOP_CONTACT of its box's perimeter: a bold loop filling the frame (a
# brush 0 on a canvas touches it along 0.21 and encloses 0.43). On 530 blank pages
# (photo_fixtures' at seeds 3-12, 200; make.py's kinds at seeds 97-99, 330) no edge encloses
# more than 0.014 of its box, and a desk all round the page touches the border along 0.53
# or more; none reads as a digit with the rule that did not before.
LOOP, LOOP_CONTACT = 0.1, 0.4


class Page:
    """One image analysed: its ink and the ink's strokes.

    ``ink``: float32 (h, w) in [0, 1] at working size (``darkening`` against
    ``paper``, light ink on a dark ground inverted first); ``labels``: int32 (h, w),
    the strokes: connected components of the hysteresis threshold of the ink, 0 for
    none; per label (row 0 unused): ``boxes`` (n, 4) x, y, w, h, ``side`` the longer
    of w and h, ``area`` in pixels, 0 for a label that reaches no strong ink, ``edge``
    whether it is the edge of something at the border rather than ink on the page
    (``EDGE_CONTACT``); ``min_digit``: the smallest side of a digit (``SPECK``);
    ``ruled``: whether lines of ruled or squared paper were taken out of the ink;
    ``n``: the working size is the full size shrunk n times (``fine_ink`` gives a
    box's ink at full size).
    Raises InputError when the page has no ink.
    """

    def __init__(self, img: np.ndarray, source: str):
        self.full = gray(img)
        self.source = source
        g, self.n = shrink(self.full)
        self.dark = dark_ink(g)
        p = g if self.dark else 255 - g
        self._gray = p
        c = _coarse(p)
        self.contrast = stroke_contrast(c if self.dark else 255 - c)
        first = paper(c, self.contrast)
        # A crop of one digit (CROP_SIDE) may be all ink to its edges: nothing lies beyond it.
        self._beyond = None if max(self.full.shape) <= CROP_SIDE else beyond_paper(c, first, p.shape)
        coarse, noise_sd, floor = self._at_work_size(first, p), NOISE, self.contrast
        try:
            self._threshold(p, coarse, noise_sd, floor)
        except InputError:  # nothing reaches the contrast: faint strokes taken for paper? (FAINT_MASK)
            if self.contrast != STROKE_CONTRAST or self.ruled:  # a dim or ruled page: not faint ink (FAINT_MASK)
                raise
            coarse = self._at_work_size(paper(c, FAINT_MASK * self.contrast), p)
            noise_sd, floor = FAINT_NOISE, FAINT_FLOOR
            self._threshold(p, coarse, noise_sd, floor)
        # The coarse paper cannot follow a sharp change of light (the edge of a shadow
        # across the page): beside it, bare paper reads as ink. A grey closing follows
        # such a step exactly and fills every stroke narrower than its window, so the
        # paper is also taken as the closing with a window a few strokes wide (the
        # strokes measured on the first pass), wherever that is darker.
        # With no stroke apart from such edges (a digit merged with one), the window
        # is as wide as it may be; where that pass sets a digit apart, the closing is
        # taken again with a window a few of its strokes wide: the wide window leaves the
        # paper's grain in a shadow as ink, which faint pencil beside the shadow's edge
        # was read as or joined to (pencil under a shadow, make.py at seed 13: 179 -> 187
        # of 200 digits, 69 -> 74 of 80 numbers). A crop of one digit (CROP_SIDE) has
        # no such light; where the closing leaves no ink at all, the pass before stands.
        if max(self.full.shape) <= CROP_SIDE:
            return
        width = self._stroke_width()
        self._close(p, coarse, noise_sd, floor, width)
        if width is None and (width := self._stroke_width()) is not None:
            self._close(p, coarse, noise_sd, floor, width)

    def _close(self, p: np.ndarray, coarse: np.ndarray, noise_sd: float, floor: float, width: Optional[float]) -> None:
        """Thresholds ``p`` again against the paper taken as the darker of ``coarse`` and
        a grey closing CLOSING strokes of ``width`` wide (None: as wide as it may be);
        keeps the strokes found before where that leaves no ink."""
        k = int(np.clip(CLOSING * (width or np.inf), CLOSING_MIN, max(p.shape) / 4)) | 1
        closed = cv2.morphologyEx(p, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
        before = dict(vars(self))
        try:
            self._threshold(p, np.minimum(coarse, cv2.GaussianBlur(closed, (0, 0), 1.0)), noise_sd, floor)
        except InputError:
            vars(self).update(before)

    @staticmethod
    def _at_work_size(coarse: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The coarse paper ``coarse`` (``paper``) smoothed and at the size of working image ``p``."""
        bg = cv2.GaussianBlur(coarse, (0, 0), 1.0)
        return cv2.resize(bg, (p.shape[1], p.shape[0]), interpolation=cv2.INTER_LINEAR)

    def _threshold(self, p: np.ndarray, ground: np.ndarray, noise_sd: float, floor: float) -> None:
        """The ink of ``p`` against paper ``ground``, thresholded into strokes; none
        unless its peak darkens the paper by ``floor`` and stands ``noise_sd``
        standard deviations of the noise out."""
        self.paper = ground
        self.ink = darkening(self.paper, p)
        # The noise (sensor, paper texture, JPEG): ink only darkens, so what lies
        # lighter than the paper is noise, the mirror of the noise that darkens; its
        # standard deviation from the median of that half (0.6745 sd for a normal).
        ground = self.paper[::2, ::2]
        lighter = cv2.divide(cv2.subtract(p[::2, ::2], ground), cv2.max(ground, 32.0))
        lighter = lighter[lighter > 0]
        noise = float(np.median(lighter)) / 0.6745 if lighter.size else 0.0
        # Seeds and peak from a 3×3 median: salt-and-pepper noise and paper fibres
        # cannot start a stroke (the strokes themselves keep their fine detail).
        smooth = cv2.medianBlur(self.ink, 3)
        # Ruled or squared paper: its lines are taken out first (they may be darker
        # than the digit, and they join everything written on them).
        lines = ruled_lines(self.ink, min(self.contrast, LOW * float(smooth.max())))
        self.ruled = lines is not None
        if lines is not None:
            self.ink[lines] = 0
            smooth[lines] = 0
        peak = float(smooth.max())
        if peak < max(floor, noise_sd * noise):  # paper texture, JPEG noise and lighting stay below
            raise InputError(f"{self.source}: no digit found (no ink darker or lighter than the paper)")
        low, high = self.ink > LOW * peak, smooth > HIGH * peak
        count, self.labels, stats, _ = cv2.connectedComponentsWithStats(low.astype(np.uint8), connectivity=8)
        rules = underlines(low, stats)
        if rules is not None:
            self.ink[rules] = 0
            low &= ~rules
            high &= ~rules
            count, self.labels, stats, _ = cv2.connectedComponentsWithStats(low.astype(np.uint8), connectivity=8)
        strong = np.bincount(self.labels[high], minlength=count) > 0
        strong[0] = False
        self.boxes = stats[:, :4]
        self.area = stats[:, 4] * strong
        self.edge = self._edges(count)
        self.side = np.maximum(self.boxes[:, 2], self.boxes[:, 3])
        self.min_digit = max(SPECK_MIN, SPECK * max(low.shape))

    def _stroke_width(self) -> Optional[float]:
        """The strokes' width in working pixels: that of the largest component that
        may be a digit (``stroke_width``); None when there is none."""
        ok = (self.area > 0) & ~self.edge & (self.side >= self.min_digit)
        if not ok.any():
            return None
        i = int(np.argmax(np.where(ok, self.area, 0)))
        x, y, w, h = self.boxes[i]
        return stroke_width(self.labels[y : y + h, x : x + w] == i)

    def _edges(self, count: int) -> np.ndarray:
        """Per label: whether it is the edge of something at the image's border (a
        desk, the paper's edge, a shadow: ``paper`` makes it ink) rather than ink on
        the paper: its contact with the border is EDGE_CONTACT of its box's perimeter
        or more, where a digit cut by the border touches it over a stroke's width.
        None in an image of at most CROP_SIDE pixels: a crop of one digit, which may
        touch all its sides."""
        labels, (h, w) = self.labels, self.labels.shape
        if max(h, w) * self.n <= CROP_SIDE:
            return np.zeros(count, bool)
        contact = (
            np.bincount(labels[0], minlength=count)
            + np.bincount(labels[-1], minlength=count)
            + np.bincount(labels[1:-1, 0], minlength=count)
            + np.bincount(labels[1:-1, -1], minlength=count)
        )
        edge = contact >= EDGE_CONTACT * 2 * (self.boxes[:, 2] + self.boxes[:, 3])
        if self._beyond is not None:  # ink mostly past the sheet's edge: a background's
            inside = np.bincount(labels[self._beyond], minlength=count)
            edge |= inside >= BEYOND_SHARE * np.bincount(labels.ravel(), minlength=count)
        edge[0] = False
        # A bold loop that fills the frame (a brush 0 on a canvas) touches it as much as
        # a desk does; but it encloses bare paper, which no edge of a desk or a shadow does.
        for i in np.nonzero(edge & (contact < LOOP_CONTACT * 2 * (self.boxes[:, 2] + self.boxes[:, 3])))[0]:
            edge[i] = not self._encloses_paper(i)
        # A band (a line, a shadow's edge) that reaches the border is the edge of
        # something when it crosses the page (a ruled line not found as one, a fold) or
        # when the paper on its two sides differs (a shadow's edge, whole or in pieces).
        border = np.zeros(count, bool)
        border[np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])] = True
        border[0] = False
        border &= ~edge & (self.area > 0) & (np.maximum(self.boxes[:, 2], self.boxes[:, 3]) >= 3)
        for i in np.nonzero(border)[0]:
            sides = self._band_sides(i)
            if sides is not None:
                x, y, bw, bh = self.boxes[i]
                crosses = (bh == h and bh * ACROSS <= w) if bh >= bw else (bw == w and bw * ACROSS <= h)
                edge[i] = crosses or min(sides) <= (1 - EDGE_STEP) * max(sides)
        return edge

    def _encloses_paper(self, label: int) -> bool:
        """Whether component ``label`` encloses a hole of bare paper (a loop): LOOP of its
        box or more, with no other ink in it."""
        x, y, w, h = self.boxes[label]
        labels = self.labels[y : y + h, x : x + w]
        mine = (labels == label).astype(np.uint8)
        contours, hierarchy = cv2.findContours(mine, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
        for contour, (_, _, _, parent) in zip(contours, hierarchy[0] if hierarchy is not None else ()):
            if parent >= 0 and cv2.contourArea(contour) >= LOOP * w * h:
                hole = np.zeros_like(mine)
                cv2.drawContours(hole, [contour], 0, 1, -1)
                hole &= 1 - mine
                inside = np.unique(labels[hole > 0])
                if not (self.area[inside[inside > 0]] > 0).any():  # no ink but specks
                    return True
        return False

    def _band_sides(self, label: int) -> Optional[tuple[float, float]]:
        """For component ``label``, if it is a band (a single run of ink across it in
        BAND of its rows, where a digit's loops and forks make two or more): the
        median paper beside it, within its own width, on its two sides (left and
        right of a tall one, above and below a wide one); else None."""
        x, y, w, h = self.boxes[label]
        labels, p = self.labels, self._gray
        if w > h:  # above and below: the same as left and right, transposed
            labels, p, (x, y, w, h) = labels.T, p.T, (y, x, h, w)
        d = max(3, int(w))
        x0, x1 = max(0, x - d), min(labels.shape[1], x + w + d)  # the band and d columns either side
        labels, p = labels[y : y + h, x0:x1], p[y : y + h, x0:x1]
        inside = labels[:, x - x0 : x - x0 + w] == label
        has = inside.any(axis=1)
        runs = np.count_nonzero(np.diff(inside.astype(np.int8), axis=1) == 1, axis=1) + inside[:, 0]
        if np.mean(runs[has] == 1) < BAND:
            return None
        left = x - x0 + np.argmax(inside, axis=1)
        right = x - x0 + w - 1 - np.argmax(inside[:, ::-1], axis=1)
        rows = np.broadcast_to(np.arange(h)[:, None], (h, d))
        sides = []
        for start, step in ((left, -1), (right, 1)):
            cols = start[:, None] + step * np.arange(1, d + 1)[None, :]
            ok = has[:, None] & (cols >= 0) & (cols < labels.shape[1])
            r, c = rows[ok], cols[ok]
            paper = labels[r, c] == 0
            # Against the image's border there is no paper on that side: as its other.
            sides.append(float(np.median(p[r[paper], c[paper]])) if paper.any() else None)
        if sides[0] is None and sides[1] is None:
            return None
        return (sides[0] if sides[0] is not None else sides[1], sides[1] if sides[1] is not None else sides[0])

    def ink_labels(self) -> np.ndarray:
        """The labels that may be digits or parts of one (at least 3 px, not an
        edge), or InputError ("no digit found") when none is as big as a digit."""
        ok = (self.area > 0) & (self.side >= 3)
        if not (ok & (self.side >= self.min_digit)).any():
            raise InputError(f"{self.source}: no digit found (only specks)")
        ok &= ~self.edge
        if not (ok & (self.side >= self.min_digit)).any():
            raise InputError(f"{self.source}: no digit found (only the edge of the paper, a desk or a shadow)")
        return np.nonzero(ok)[0]

    def fine_ink(self, x: int, y: int, w: int, h: int) -> np.ndarray:
        """The ink of working box (x, y, w, h) at full size: about (h n, w n)."""
        n = self.n
        p = self.full[y * n : (y + h) * n, x * n : (x + w) * n].astype(np.float32)
        if not self.dark:
            p = 255 - p
        ground = cv2.resize(self.paper[y : y + h, x : x + w], (p.shape[1], p.shape[0]), interpolation=cv2.INTER_LINEAR)
        return darkening(ground, p)


def union_box(boxes: np.ndarray) -> np.ndarray:
    """The box (x, y, w, h) around boxes (k, 4)."""
    x0, y0 = boxes[:, 0].min(), boxes[:, 1].min()
    return np.array([x0, y0, (boxes[:, 0] + boxes[:, 2]).max() - x0, (boxes[:, 1] + boxes[:, 3]).max() - y0])


def stroke_width(fine: np.ndarray) -> float:
    """A digit's mean stroke width in pixels: twice its area over its perimeter (a
    stroke of length L and width w has area Lw and perimeter about 2L)."""
    b = (fine > 0.5).astype(np.uint8)
    contours, _ = cv2.findContours(b, cv2.RETR_LIST, cv2.CHAIN_APPROX_NONE)
    return 2 * float(b.sum()) / max(sum(cv2.arcLength(c, True) for c in contours), 1.0)
