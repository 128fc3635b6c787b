"""The precision contract, model by model (issue 74; docs/how-it-works.md#precision): each model
evaluated in float64 (lenet.bench.exactness), and how far lenet's default path (on every CPU
kernel set here) and the reference float32 engine (Keras for a Keras file, ONNX Runtime for an
ONNX one) land from it, in units of float32's rounding scale: root mean square / largest over
every row and class. A model is within the contract when lenet's figures are at most 1.5x the
reference's root mean square and 2x its largest (or within 1 unit / 8 where the reference lands
nearer than rounding every sum once predicts).

    python tools/precision/float64.py                  # the shipped LeNets
    python tools/precision/float64.py MODEL [MODEL...] # any Keras (.h5, .keras) or ONNX file
    python tools/precision/float64.py --zoo [CASE...]  # the Keras zoo (every case, or those named)
    python tools/precision/float64.py --onnx           # tests/data/onnx's float graphs
    ... [--rows 256] [--kernels auto,blas] [--precision fast]

Exits 1 when a model is outside the contract.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2] / "tests" / "models"
sys.path.insert(0, str(TESTS))

import contract_cases as cc  # noqa: E402

import lenet  # noqa: E402
from lenet.bench import exactness  # noqa: E402


def _cases(args) -> list:
    cases = []
    if not (args.files or args.zoo is not None or args.onnx):
        cases += cc.shipped_cases(args.rows)
    for path in args.files:
        if path.resolve() in cc.USERS:  # fed as its author feeds it
            cases.append(cc.user_case(path.resolve(), args.rows))
        elif path.suffix == ".onnx":
            cases += cc.onnx_cases(args.rows, [path])
        else:
            x, _ = cc.workload.to_model_input(cc.mnist_pixels(args.rows), path)
            cases.append(cc.Case(path.name, path, x, "Keras 3", cc._keras_runner(path, "keras3")))
    if args.zoo is not None:
        import keras_zoo as kz

        zoo = kz.build_zoo(Path(tempfile.mkdtemp()), only=set(args.zoo) or None, forms={"h5"})
        cases += [cc.zoo_case(z) for z in zoo.values()]
    if args.onnx:
        cases += cc.onnx_cases(args.rows)
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--zoo", nargs="*", metavar="CASE", help="the Keras zoo's models (all cases, or these)")
    ap.add_argument("--onnx", action="store_true", help="tests/data/onnx's float graphs")
    ap.add_argument("--rows", type=int, default=256, help="MNIST test digits (default 256)")
    ap.add_argument(
        "--kernels",
        help="comma-separated CPU kernel sets (default: every hand-written set this CPU runs, and blas; nchw, "
        "the GPU's layout on the CPU, when named)",
    )
    ap.add_argument("--precision", default="exact", choices=["exact", "fast"])
    args = ap.parse_args()
    kernels = args.kernels.split(",") if args.kernels else [k for k in lenet.cpu_kernel_sets() if k != "nchw"]
    print(
        f"{'model':34s} {'reference':13s} {'ref units':>11s}  "
        + "  ".join(f"{'lenet ' + k:>13s}" for k in kernels)
        + "  contract"
    )
    outside = 0
    for case in _cases(args):
        got = cc.measure(case, kernels, args.precision)
        if "why" in got:
            print(f"{case.name:34s} no float64 evaluation: {got['why']}")
            continue
        cells = [f"{d['f64_rms_units']:.2f} / {d['f64_max_units']:.1f}" for d in got.values()]
        ok = all(exactness.within_contract(got[k], got["reference"]) for k in kernels)
        outside += not ok
        print(
            f"{case.name:34s} {case.reference:13s} {cells[0]:>11s}  "
            + "  ".join(f"{c:>13s}" for c in cells[1:])
            + ("  within" if ok else "  OUTSIDE")
        )
    return 1 if outside else 0


if __name__ == "__main__":
    sys.exit(main())
