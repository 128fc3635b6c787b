"""What reading an unclear digit twice would buy: the three shipped networks combined,
or one network on test-time variants of the crop, measured on the photo-like set.

    python tools/photoset/combine.py                       # the shipped models
    python tools/photoset/combine.py --weights a.h5 b.h5 c.h5

A person who cannot read a digit looks again, or asks someone else. The photo path
can do either: the three networks disagree exactly where a digit is ambiguous, and a
crop shifted by a pixel or thinned is another look. This tool prepares every image
once (the photo path, as ``infer`` does) and then reads the rows (single digits) and
the numbers (``read_number``'s segmentation, which also asks the network) with:

- each network alone;
- ``mean``: the three networks' probabilities averaged;
- ``variants``: the first network on the crop and on its four one-pixel shifts,
  averaged.

It prints accuracy per reading and what each costs per image: the photo path's
preparation (decoding, finding and drawing the digit), which lenet-serve pays per
request whatever reads the rows, each network's time on the prepared rows (in one
batch, and one digit alone as a request has it), and lenet-serve's time per request
with one network: a combination would add its networks' time for one digit to it.
Nothing here changes the Engine: it stays one network.
"""

import argparse
import csv
import sys
import time
from pathlib import Path

import numpy as np

import lenet
from lenet.images.prepare import prepare, prepare_number

DEFAULT_SET = Path(__file__).resolve().parents[2] / "tests" / "data" / "photoset"
SHIFTS = ((0, 0), (1, 0), (-1, 0), (0, 1), (0, -1))


def shifted(rows, dy, dx):
    """Rows (n, h, w, c) moved by (dy, dx) pixels, zeros coming in."""
    out = np.zeros_like(rows)
    h, w = rows.shape[1:3]
    out[:, max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = rows[
        :, max(-dy, 0) : h + min(-dy, 0), max(-dx, 0) : w + min(-dx, 0)
    ]
    return out


def readers(engines):
    """name -> rows -> probabilities."""
    out = {Path(str(e.model.source)).stem: e.row_probabilities for e in engines}
    out["mean"] = lambda rows: np.mean([e.row_probabilities(rows) for e in engines], axis=0)
    first = engines[0]
    out["variants"] = lambda rows: np.mean(
        [first.row_probabilities(shifted(rows, dy, dx)) for dy, dx in SHIFTS], axis=0
    )
    return out


def timed(f, *args, repeat=5):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = f(*args)
        best = min(best, time.perf_counter() - t)
    return out, best


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/photoset/combine.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--weights",
        nargs=3,
        default=list(lenet.SHIPPED_MODELS),
        help="three models (the first is the one the variants use; default: the shipped ones)",
    )
    p.add_argument("--set", type=Path, default=DEFAULT_SET)
    p.add_argument(
        "--serve",
        type=int,
        default=100,
        metavar="N",
        help="time N requests of single digits to lenet-serve (in process) with the first model (0: skip)",
    )
    args = p.parse_args(argv)
    engines = [lenet.Engine(w, device="cpu", threads=1) for w in args.weights]
    rows = list(csv.DictReader(open(args.set / "manifest.csv")))
    singles = [r for r in rows if r["file"].startswith("digit-")]
    numbers = [r for r in rows if r["file"].startswith("number-")]
    shape = engines[0].image_shape
    paths = [str(args.set / r["file"]) for r in singles]
    t = time.perf_counter()
    prepared = prepare(paths, paths, shape, mode="photo")
    prep_ms = 1e3 * (time.perf_counter() - t) / len(paths)
    x = prepared.rows.x
    labels = np.array([int(singles[i]["label"]) for i in prepared.rows.item])
    print(
        f"{len(paths)} single digits ({len(paths) - len(x)} with no digit found, counted wrong), "
        f"{len(numbers)} numbers; photo path {prep_ms:.2f} ms per image (one thread)\n"
    )
    print(
        "| reading | single digits right | numbers read whole | network ms per digit, batch of all "
        "(one thread) | ms for one digit alone (a request) |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, read in readers(engines).items():
        probs, seconds = timed(read, x)
        _, alone = timed(lambda: [read(x[i : i + 1]) for i in range(50)])
        right = int(np.sum(probs.argmax(1) == labels))
        whole = 0
        for r in numbers:
            try:
                nrows, *_ = prepare_number(str(args.set / r["file"]), shape, read)
                whole += "".join(str(d) for d in read(nrows.x).argmax(1)) == r["label"]
            except lenet.InputError:
                pass
        print(
            f"| {name} | {right}/{len(paths)} ({100 * right / len(paths):.1f}%) | {whole}/{len(numbers)} | "
            f"{1e3 * seconds / len(x):.3f} | {1e3 * alone / 50:.3f} |"
        )
    if args.serve:
        print(
            f"\nlenet-serve, {Path(args.weights[0]).name}: "
            f"{serve_ms(engines[0], paths[: args.serve]):.2f} ms per request (median, in process; one JPEG "
            "of one digit as the raw body of POST /v1/classify)"
        )
    return 0


def serve_ms(engine, paths):
    """The median time of a POST /v1/classify of each image, through the app in process."""
    from fastapi.testclient import TestClient

    from lenet.serve import create_app

    times = []
    with TestClient(create_app(engine)) as client:
        for path in paths:
            data = Path(path).read_bytes()
            t = time.perf_counter()
            r = client.post("/v1/classify", content=data, headers={"Content-Type": "image/jpeg"})
            times.append(time.perf_counter() - t)
            assert r.status_code in (200, 422), r.text
    return 1e3 * float(np.median(times))


if __name__ == "__main__":
    sys.exit(main())
