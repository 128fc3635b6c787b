"""lenet-cli: classify image files from a shell.

    lenet-cli digit.png more/*.png [--weights FILE] [--device auto|cpu|cuda]
              [--top-k K] [--json] [--threads N] [--version]

Prints one line per image, ``path: 7 (99.2%)``. All readable images are
classified in one batch; an unreadable one gets a one-line error on stderr,
the others are still classified, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lenet-cli",
        description="Classify images of handwritten digits with a LeNet (Keras HDF5 weights) on lenet's C++ engine.",
        epilog="Exit status: 0 when every image was classified, 1 when some could not be read, "
               "2 for a usage error or an unusable model.")
    p.add_argument("images", nargs="*", help="image files (PNG, JPEG, BMP, TIFF, WebP, ...)")
    p.add_argument("--weights", metavar="FILE",
                   help="Keras .h5 model, or a shipped model name (lenet5, lenet-keras, lenet-tf); default lenet5")
    p.add_argument("--arch", metavar="JSON", help="architecture (Keras JSON file or shipped name) for a weights-only file")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all available)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="also show the K most probable digits")
    p.add_argument("--json", action="store_true", help="print one JSON object per image (JSON lines)")
    p.add_argument("--summary", action="store_true", help="print the model's layers before the results")
    p.add_argument("--version", action="store_true", help="print version, backends and libraries, then exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import lenet
    from lenet.preprocess import read_file

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
        engine = lenet.Engine(args.weights, device=args.device, threads=args.threads, arch=args.arch)
    except lenet.Error as e:
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        return 2
    if args.summary:
        print(engine.summary())

    # Decode every file first, reporting the bad ones, then classify the rest at once.
    images, paths, failed = [], [], 0
    for path in args.images:
        try:
            images.append(read_file(path))
            paths.append(path)
        except lenet.Error as e:
            print(f"lenet-cli: error: {e}", file=sys.stderr)
            failed += 1
    if images:
        try:
            results = engine.infer(images)
        except lenet.Error as e:
            print(f"lenet-cli: error: {e}", file=sys.stderr)
            return 2
        for path, r in zip(paths, results):
            top = r.top(args.top_k)
            if args.json:
                print(json.dumps({"path": path, "digit": r.digit, "confidence": r.confidence,
                                  "top": [{"digit": d, "probability": p} for d, p in top],
                                  "probabilities": [float(p) for p in r.probabilities]}))
            else:
                line = f"{path}: {r.digit} ({100 * r.confidence:.1f}%)"
                if args.top_k > 1:
                    line += "  [" + ", ".join(f"{d}: {100 * p:.1f}%" for d, p in top) + "]"
                print(line)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
