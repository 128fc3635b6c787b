"""Synthetic "real" images made from MNIST test digits, for tests/images/test_photo.py.

Each image looks like what a user would point lenet-cli at: a phone photo of a digit
written on paper (dark, blue, red or green ink; paper tint, uneven lighting, texture
noise, ink specks, blur, JPEG compression, sometimes the dark desk beside the page,
sometimes an EXIF orientation tag), a scan (8- or 16-bit PNG, TIFF, BMP), a digit
drawn in a paint program (RGBA with a transparent background, WebP) or light chalk
on a dark board; some on ruled or squared paper (``ruling``). The digit is small and
off-centre in a large canvas (800 to 1200 px wide; 300 to 700 for drawings), rotated
up to 12°, with thin, normal, thick or bold strokes. Rows of 2 to 6 digits make numbers; 5% of their gaps are closed.

Everything is derived from a seed; nothing derived from MNIST is stored.
"""

import struct
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np

INKS = np.array([[25, 25, 30], [30, 50, 150], [150, 25, 30], [30, 90, 50], [90, 90, 95]], np.float32)  # RGB
NOISE_SCALE = 16  # NOISE, a tile of paper texture and sensor noise: 128 + 16 N(0, 1), in uint8
NOISE = np.clip(128 + NOISE_SCALE * np.random.default_rng(0).standard_normal((1300, 1300)), 0, 255).astype(np.uint8)


def digit_alpha(digit28, height, rng, stroke):
    """One MNIST digit as ink coverage in [0, 1], `height` pixels tall, slightly
    rotated, with its stroke made thicker (stroke > 0) or thinner (stroke < 0)."""
    ys, xs = np.nonzero(digit28)
    crop = digit28[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1].astype(np.float32) / 255
    # Thicken or thin at a moderate scale (cheap), then rotate and scale in one warp.
    mid = min(height, 100) / crop.shape[0]
    a = cv2.resize(
        crop, (max(1, round(crop.shape[1] * mid)), round(crop.shape[0] * mid)), interpolation=cv2.INTER_CUBIC
    )
    k = round(abs(stroke) * a.shape[0])
    if k >= 2:
        a = (cv2.dilate if stroke > 0 else cv2.erode)(a, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)))
    f = height / a.shape[0]
    side = round(1.5 * max(a.shape) * f)  # room for the rotated digit
    m = cv2.getRotationMatrix2D((a.shape[1] / 2, a.shape[0] / 2), rng.uniform(-12, 12), f)
    m[:, 2] += side / 2 - np.array([a.shape[1], a.shape[0]]) / 2
    a = cv2.warpAffine(a, m, (side, side), flags=cv2.INTER_CUBIC)
    ys, xs = np.nonzero(a > 0.02)
    return np.clip(a[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1], 0, 1)


def row_alpha(digits, height, rng, touching=0.05):
    """Digits side by side at about the same height and baseline, some gaps wide,
    some narrow, a fraction `touching` of them closed (the digits touch)."""
    patches = [digit_alpha(d, height * rng.uniform(0.9, 1.1), rng, _stroke(rng)) for d in digits]
    gaps = [
        round(height * (rng.uniform(-0.03, 0.0) if rng.random() < touching else rng.uniform(0.05, 0.5)))
        for _ in patches[1:]
    ] + [0]
    width = sum(p.shape[1] for p in patches) + sum(gaps)
    top = [round(rng.uniform(0, 0.1) * height) for _ in patches]
    row = np.zeros((max(t + p.shape[0] for t, p in zip(top, patches)), width), np.float32)
    x = 0
    for p, g, t in zip(patches, gaps, top):
        roi = row[t : t + p.shape[0], x : x + p.shape[1]]
        np.maximum(roi, p, out=roi)
        x += p.shape[1] + g
    return row


def _stroke(rng):
    """Thinner (a fine pen), as MNIST (twice as often), thicker, bolder (a marker):
    added to a stroke MNIST draws about 0.11 of the digit's height wide."""
    return rng.choice([-0.05, 0.0, 0.0, 0.04, 0.08])


def _canvas_size(rng, min_w, min_h, small):
    w = int(rng.integers(300, 701) if small else rng.integers(800, 1201))
    w, h = (w, w * 3 // 4) if rng.random() < 0.7 else (w * 3 // 4, w)  # some portrait
    return max(w, min_w), max(h, min_h)


def compose(alpha, rng, kind=None, desk=None, ruling=None):
    """Puts ink coverage `alpha` somewhere on a large canvas of the given kind
    ("photo", "scan", "paint", "chalk"; random if None) and encodes it; a photo shows
    the desk beside the page one time in five (or as `desk` says). `ruling`: a
    function (h, w) -> (line coverage (h, w) float32, line colour RGB) printing the
    paper's lines under the ink ("photo" and "scan" only). Returns bytes."""
    kind = kind or rng.choice(["photo"] * 6 + ["scan", "paint", "chalk"])
    ah, aw = alpha.shape
    desk = kind == "photo" and (rng.random() < 0.2 if desk is None else desk)
    w, h = _canvas_size(rng, aw + 40, ah + 40, small=kind == "paint")  # paint programs: smaller canvases
    band = min(int(0.12 * w), w - aw - 20) if desk else 0  # a dark desk along the left edge
    x0 = int(rng.integers(band + 10, w - aw - 10 + 1))
    y0 = int(rng.integers(10, h - ah - 10 + 1))
    if kind in ("photo", "chalk"):
        alpha = cv2.GaussianBlur(alpha, (0, 0), rng.uniform(0.5, 2.0))
    if kind == "paint":
        rgba = np.zeros((h, w, 4), np.uint8)
        rgba[..., :3] = INKS[rng.integers(len(INKS))]
        rgba[y0 : y0 + ah, x0 : x0 + aw, 3] = np.round(alpha * 255)
        return _encode(cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA), rng.choice([".png", ".png", ".png", ".webp"]), rng)

    if kind == "chalk":
        paper, ink = np.float32([40, 55, 45]) * rng.uniform(0.6, 1.3), np.float32([230, 230, 225])
    else:
        paper = np.float32([245, 240, 228]) + rng.uniform(-15, 10, 3).astype(np.float32)
        ink = INKS[rng.integers(len(INKS))] if kind == "photo" else INKS[0]
    # All in uint8, which keeps this fast: light (255 = full light), ink coverage
    # under that light, and noise about 128 at NOISE_SCALE.
    if kind == "scan":
        light = np.full((h, w), 255, np.uint8)
    else:  # a smooth random lighting field: gradients and soft shadows
        grid = rng.uniform(0.55, 1.0, (3, 4)).astype(np.float32) * 255
        light = cv2.resize(grid, (w, h), interpolation=cv2.INTER_CUBIC).clip(115, 255).astype(np.uint8)
    lit_ink = np.zeros((h, w), np.uint8)
    lit_ink[y0 : y0 + ah, x0 : x0 + aw] = alpha * light[y0 : y0 + ah, x0 : x0 + aw]
    oy, ox = rng.integers(0, 1300 - h + 1), rng.integers(0, 1300 - w + 1)
    sigma = rng.uniform(1, 8 if kind != "scan" else 2) / NOISE_SCALE
    # BGR = light * paper + lit ink * (ink - paper) + noise: one affine transform per pixel.
    mix = np.stack([paper / 255, (ink - paper) / 255, np.full(3, sigma), np.full(3, -128 * sigma)], axis=1)[::-1]
    img = cv2.transform(cv2.merge([light, lit_ink, NOISE[oy : oy + h, ox : ox + w]]), mix)
    if ruling is not None:  # printed lines, under the ink: covered where the ink is
        lines, colour = ruling(h, w)
        inked = np.zeros((h, w), np.float32)
        inked[y0 : y0 + ah, x0 : x0 + aw] = alpha
        cover = (lines * (1 - inked))[..., None]
        lit = np.float32(colour[::-1]) * (light[..., None].astype(np.float32) / 255)
        img = (img + cover * (lit - img)).clip(0, 255).astype(np.uint8)
    if desk:
        img[:, :band] = (np.float32([50, 60, 70]) * light[:, :band, None] / 255).astype(np.uint8)
    for _ in range(int(rng.integers(0, 25)) if kind == "photo" else 0):  # ink specks and dust
        c = (int(rng.integers(band, w)), int(rng.integers(0, h)))
        cv2.circle(img, c, int(rng.integers(1, 3)), tuple(float(v) for v in paper[::-1] * 0.5), -1)
    if kind == "scan":
        ext = rng.choice([".png", ".png16", ".tiff", ".bmp", ".jpg"])
        gray = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        return _encode(gray.astype(np.uint16) * 257 if ext == ".png16" else gray, ext.replace("16", ""), rng)
    if kind == "photo" and rng.random() < 0.1:  # stored sideways, upright through EXIF orientation
        orientation = int(rng.choice([6, 8]))
        img = cv2.rotate(img, cv2.ROTATE_90_COUNTERCLOCKWISE if orientation == 6 else cv2.ROTATE_90_CLOCKWISE)
        return with_exif_orientation(_encode(img, ".jpg", rng), orientation)
    return _encode(img, ".jpg", rng)


def _encode(img, ext, rng):
    params = {
        ".jpg": [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(40, 96))],
        ".webp": [cv2.IMWRITE_WEBP_QUALITY, int(rng.integers(60, 96))],  # lossy: lossless is slow
        ".png": [cv2.IMWRITE_PNG_COMPRESSION, 1],
    }.get(ext, [])
    ok, buf = cv2.imencode(ext, img, params)
    assert ok, ext
    return buf.tobytes()


def with_exif_orientation(jpeg, orientation):
    """The JPEG with an EXIF block holding only the orientation tag (1..8)."""
    tiff = b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0) + b"\0" * 4
    app1 = b"Exif\x00\x00" + tiff
    return jpeg[:2] + b"\xff\xe1" + struct.pack(">H", len(app1) + 2) + app1 + jpeg[2:]


def single_digit_image(images, labels, seed, i):
    """(encoded image, label, MNIST index): the i-th single-digit image of a seed
    (the i-th digit of a shuffle of the set: no digit twice)."""
    k = int(np.random.default_rng(seed).permutation(len(images))[i])
    rng = np.random.default_rng([seed, i])
    height = rng.uniform(0.08, 0.5) * 900
    return compose(digit_alpha(images[k], height, rng, _stroke(rng)), rng), int(labels[k]), k


def number_image(images, labels, seed, i):
    """(encoded image, number as a string, MNIST indices): the i-th row of 2 to 6
    digits of a seed."""
    rng = np.random.default_rng([seed, i])
    picks = rng.choice(len(images), int(rng.integers(2, 7)), replace=False)
    alpha = row_alpha(images[picks], rng.uniform(50, 150), rng)
    return compose(alpha, rng), "".join(str(labels[k]) for k in picks), picks


LINE_INKS = np.array([[150, 180, 225], [110, 150, 210], [170, 170, 170], [90, 90, 95]], np.float32)  # RGB


def ruling(rng, height):
    """Ruled or squared paper for digits about `height` px tall (compose's `ruling`):
    blue, gray or dark lines 1-3 px, tilted up to 1.5 degrees, ruled 1.1-1.7 digit
    heights apart (sometimes with a margin line) or squared 0.35-0.7 apart."""
    squared = rng.random() < 0.4
    spacing = height * (rng.uniform(0.35, 0.7) if squared else rng.uniform(1.1, 1.7))
    colour, thick = LINE_INKS[rng.integers(len(LINE_INKS))], int(rng.integers(1, 4))
    tilt, phase = np.tan(np.radians(rng.uniform(-1.5, 1.5))), rng.uniform(0, spacing)
    margin = not squared and rng.random() < 0.3

    def draw(h, w):
        lines = np.zeros((h, w), np.float32)
        for k in range(-2, int((h + abs(tilt) * w) / spacing) + 3):  # along rows, tilted
            y = phase + k * spacing
            cv2.line(lines, (0, round(y - tilt * w / 2)), (w, round(y + tilt * w / 2)), 1.0, thick, cv2.LINE_AA)
        for k in range(-2, int((w + abs(tilt) * h) / spacing) + 3) if squared else []:
            x = phase + k * spacing
            cv2.line(lines, (round(x + tilt * h / 2), 0), (round(x - tilt * h / 2), h), 1.0, thick, cv2.LINE_AA)
        if margin:  # a red margin line down the left
            x = round(0.12 * w)
            cv2.line(lines, (x, 0), (x, h), 1.0, thick + 1, cv2.LINE_AA)
        return np.clip(lines, 0, 1), colour

    return draw


def ruled_digit_image(images, labels, seed, i):
    """(encoded image, label, MNIST index): the i-th single digit of a seed written on
    ruled or squared paper (a phone photo or a scan)."""
    k = int(np.random.default_rng(seed).permutation(len(images))[i])
    rng = np.random.default_rng([seed, i])
    height = rng.uniform(0.08, 0.3) * 900
    alpha = digit_alpha(images[k], height, rng, _stroke(rng))
    return compose(alpha, rng, rng.choice(["photo", "photo", "scan"]), ruling=ruling(rng, height)), int(labels[k]), k


def ruled_number_image(images, labels, seed, i):
    """(encoded image, number as a string, MNIST indices): the i-th row of 2 to 6
    digits of a seed on ruled or squared paper."""
    rng = np.random.default_rng([seed, i])
    picks = rng.choice(len(images), int(rng.integers(2, 7)), replace=False)
    height = rng.uniform(50, 150)
    alpha = row_alpha(images[picks], height, rng)
    kind = rng.choice(["photo", "photo", "scan"])
    return compose(alpha, rng, kind, ruling=ruling(rng, height)), "".join(str(labels[k]) for k in picks), picks


def blank_page_image(images, labels, seed, i):
    """(encoded image, kind): a page with no digit: a photo with the desk beside it
    (and uneven light, texture, specks, JPEG), or a scan, a drawing or a board."""
    rng = np.random.default_rng([seed, i])
    kind = ["photo", "photo", "scan", "paint", "chalk"][i % 5]
    return compose(np.zeros((1, 1), np.float32), rng, kind, desk=kind == "photo"), kind


def generate(make, images, labels, n, seed, workers=2):
    """[make(images, labels, seed, i) for i in range(n)], on `workers` threads
    (OpenCV releases the GIL)."""
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda i: make(images, labels, seed, i), range(n)))
