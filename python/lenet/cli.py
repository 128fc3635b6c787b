"""lenet-cli: classify image files from a shell.

    lenet-cli digit.png more/*.png [--weights FILE] [--device auto|cpu|cuda]
              [--mode auto|mnist|photo] [--digits] [--debug-dir DIR]
              [--top-k K] [--json] [--threads N] [--version]

Prints one line per image, ``path: 7 (99.2%)``; with ``--digits``, the number the
image holds, ``path: 4071 (93.1%)  [4: 99.0%, 0: 98.2%, 7: 97.5%, 1: 98.9%]``. All
readable images are classified in one batch (with ``--digits``, one batch per
image); an image that cannot be read, or holds no digit, gets a one-line error on
stderr, the others are still classified, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lenet-cli",
        description="Classify images of handwritten digits with a LeNet (Keras HDF5 weights) on lenet's C++ engine.",
        epilog="Exit status: 0 when every image was classified, 1 when some could not be read or held no digit, "
               "2 for a usage error or an unusable model.")
    p.add_argument("images", nargs="*", help="image files (PNG, JPEG, BMP, TIFF, WebP, ...)")
    p.add_argument("--weights", metavar="FILE",
                   help="Keras .h5 model, or a shipped model name (lenet5, lenet-keras, lenet-tf); default lenet5")
    p.add_argument("--arch", metavar="JSON", help="architecture (Keras JSON file or shipped name) for a weights-only file")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all available)")
    p.add_argument("--mode", default="auto", choices=["auto", "mnist", "photo"],
                   help="preprocessing: photo (a photo, scan or drawing of a digit anywhere in the image), "
                        "mnist (already MNIST-like: only resized), auto (mnist for images of the model's size "
                        "on a dark background, else photo; the default)")
    p.add_argument("--digits", action="store_true",
                   help="read each image as a number written left to right and print it, with each digit's "
                        "confidence (the digits are always found as in photo mode)")
    p.add_argument("--debug-dir", metavar="DIR",
                   help="write the 28x28 image the network received, per input (with --digits, per digit)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="also show the K most probable digits")
    p.add_argument("--json", action="store_true", help="print one JSON object per image (JSON lines)")
    p.add_argument("--summary", action="store_true", help="print the model's layers before the results")
    p.add_argument("--version", action="store_true", help="print version, backends and libraries, then exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import lenet

    if args.version:
        for k, v in lenet.info().items():
            print(f"{k}: {v}")
        return 0
    if not args.images:
        _parser().print_usage(sys.stderr)
        print("lenet-cli: error: give at least one image", file=sys.stderr)
        return 2
    if args.top_k < 1:
        print("lenet-cli: error: --top-k must be at least 1", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", RuntimeWarning)  # the CUDA fallback: one line, below
            engine = lenet.Engine(args.weights, device=args.device, threads=args.threads, arch=args.arch)
    except lenet.Error as e:
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"lenet-cli: note: {str(note.message).removeprefix('lenet: ')}", file=sys.stderr)
    if args.summary:
        print(engine.summary())

    if args.debug_dir:
        try:
            os.makedirs(args.debug_dir, exist_ok=True)
        except OSError as e:
            print(f"lenet-cli: error: --debug-dir {args.debug_dir}: {e.strerror or e}", file=sys.stderr)
            return 2
    failed = 0

    def report(e):
        nonlocal failed
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        failed += 1

    seen = _DebugWriter(args.debug_dir, report)

    if args.digits:
        for path in args.images:
            try:
                number = engine.read_number(path)
            except lenet.InputError as e:
                report(e)
                continue
            seen.write(path, [r.image for r in number.digits], numbered=True)
            _print_number(number, args)
        return 1 if failed else 0
    # Unreadable files and pages without a digit are reported; the rest is one batch.
    try:
        results = engine.infer(args.images, mode=args.mode, on_error=report)
    except lenet.Error as e:
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        return 2
    for r in results:
        seen.write(r.source, [r.image], numbered=False)
        top = r.top(args.top_k)
        if args.json:
            print(json.dumps({"path": r.source, "digit": r.digit, "confidence": r.confidence, "mode": r.mode,
                              "top": [{"digit": d, "probability": p} for d, p in top],
                              "probabilities": [float(p) for p in r.probabilities]}))
        else:
            line = f"{r.source}: {r.digit} ({100 * r.confidence:.1f}%)"
            if args.top_k > 1:
                line += "  [" + ", ".join(f"{d}: {100 * p:.1f}%" for d, p in top) + "]"
            print(line)
    return 1 if failed else 0


def _print_number(number, args) -> None:
    if args.json:
        print(json.dumps({"path": number.source, "number": number.number, "confidence": number.confidence,
                          "digits": [{"digit": r.digit, "confidence": r.confidence, "box": list(box),
                                      "top": [{"digit": d, "probability": p} for d, p in r.top(args.top_k)]}
                                     for r, box in zip(number.digits, number.boxes)]}))
    else:
        digits = ", ".join(f"{r.digit}: {100 * r.confidence:.1f}%" for r in number.digits)
        print(f"{number.source}: {number.number} ({100 * number.confidence:.1f}%)  [{digits}]")


class _DebugWriter:
    """Writes what the network saw: DIR/<name>.png per input, DIR/<name>-<k>.png per
    digit of a number (k from 1); <name> is the input's file name without its
    extension, made unique with _2, _3, ... when inputs share it."""

    def __init__(self, directory: str | None, report):
        self.directory, self.report = directory, report
        self.used: set[str] = set()

    def write(self, path: str, images: list, numbered: bool) -> None:
        if not self.directory:
            return
        import cv2

        stem = name = Path(path).stem
        k = 2
        while name in self.used:
            name, k = f"{stem}_{k}", k + 1
        self.used.add(name)
        for i, img in enumerate(images, 1):
            out = os.path.join(self.directory, f"{name}-{i}.png" if numbered else f"{name}.png")
            if img.ndim == 3:  # a colour model's input is RGB
                img = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
            if not cv2.imwrite(out, img):
                self.report(f"cannot write {out}")


if __name__ == "__main__":
    sys.exit(main())
