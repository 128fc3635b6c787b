"""Score models on the photo-like test set (tools/photoset/make.py).

    python tools/photoset/score.py                          # the shipped models
    python tools/photoset/score.py --weights a.h5 b.h5 --set tests/data/photoset

Per model: single digits read right (``infer``, the photo path), by kind; numbers read
whole (``read_number``), by kind; the expected calibration error of the single digits'
confidences; how sure the wrong answers were; and what an "unsure" threshold would
leave (``--unsure``: the share of answers kept, and their accuracy).
"""

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import lenet

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
from mnist_split import expected_calibration_error  # noqa: E402

DEFAULT_SET = Path(__file__).resolve().parents[2] / "tests" / "data" / "photoset"


def score(engine, directory):
    """{'singles': [(kind, label, digit, confidence)], 'numbers': [(kind, label, read, confidence)]}."""
    rows = list(csv.DictReader(open(directory / "manifest.csv")))
    singles = [r for r in rows if r["file"].startswith("digit-")]
    numbers = [r for r in rows if r["file"].startswith("number-")]
    out = {"singles": [], "numbers": []}
    # An image with no digit found is left out of infer's results: matched by source.
    results = {
        res.source: res for res in engine.infer([str(directory / r["file"]) for r in singles], on_error=lambda e: None)
    }
    for r in singles:
        res = results.get(str(directory / r["file"]))
        digit, conf = (str(res.digit), res.confidence) if res is not None else ("none", 0.0)
        out["singles"].append((r["kind"], r["label"], digit, conf, r["file"]))
    for r in numbers:
        try:
            n = engine.read_number(directory / r["file"])
            out["numbers"].append((r["kind"], r["label"], n.number, n.confidence, r["file"]))
        except lenet.InputError:
            out["numbers"].append((r["kind"], r["label"], "", 0.0, r["file"]))
    return out


def by_kind(items):
    counts = defaultdict(lambda: [0, 0])
    for kind, label, read, *_ in items:
        counts[kind][0] += label == read
        counts[kind][1] += 1
    return counts


def report(name, s, unsure):
    singles = s["singles"]
    right = np.array([label == read for _, label, read, *_ in singles], bool)
    conf = np.array([c for *_, c, _ in singles], float)
    numbers_right = sum(label == read for _, label, read, *_ in s["numbers"])
    if not singles:
        right, conf = np.ones(1, bool), np.ones(1)  # placeholders: the lines on single digits are replaced
    lines = [
        f"## {name}",
        f"single digits: {right.sum()}/{len(right)} ({100 * right.mean():.1f}%); "
        f"numbers read whole: {numbers_right}/{len(s['numbers'])}; "
        f"ECE {expected_calibration_error(conf, right):.3f}; wrong answers' confidence: median "
        f"{np.median(conf[~right]) if (~right).any() else float('nan'):.3f}, max "
        f"{conf[~right].max() if (~right).any() else float('nan'):.3f}",
        f"with 'unsure' below {unsure:.2f}: {100 * np.mean(conf >= unsure):.1f}% answered, "
        f"{100 * right[conf >= unsure].mean():.1f}% of them right",
        "",
        "| kind | right |",
        "|---|---:|",
    ]
    if not singles:  # a set of numbers only (make.py --kinds)
        lines[1:3] = [f"numbers read whole: {numbers_right}/{len(s['numbers'])}"]
    for kind, (ok, n) in list(by_kind(singles).items()) + list(by_kind(s["numbers"]).items()):
        lines.append(f"| {kind} | {ok}/{n} |")
    wrong = [
        f"{f}: {label} read as {read} ({c:.3f})" for _, label, read, c, f in singles + s["numbers"] if label != read
    ]
    return "\n".join(lines + ["", "misread:"] + ["  " + w for w in wrong])


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/photoset/score.py", description=__doc__.split("\n")[0])
    p.add_argument(
        "--weights",
        nargs="+",
        default=list(lenet.SHIPPED_MODELS),
        help="shipped model names or .h5 files (default: the shipped models)",
    )
    p.add_argument("--set", type=Path, default=DEFAULT_SET, help=f"the photo-like set (default {DEFAULT_SET})")
    p.add_argument("--unsure", type=float, default=0.6, help="the confidence threshold to report on (default 0.6)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    for w in args.weights:
        engine = lenet.Engine(w, device=args.device)
        print(report(w, score(engine, args.set), args.unsure), "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
