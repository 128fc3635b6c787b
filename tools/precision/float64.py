"""Which is closer to the exact answer where lenet and Keras differ: each file's model
evaluated by Keras in float64 (tests/models/float64_reference.py) against lenet's and
Keras' float32 probabilities, on each CPU kernel set.

    python tools/precision/float64.py MODEL.h5 [MODEL.keras ...] [--rows 128]
    python tools/precision/float64.py --zoo      # the Keras zoo's batch-norm models

A file's inputs: the first --rows MNIST test digits, scaled to [0, 1] unless the model
rescales its own pixels (as the zoo feeds them). Prints, per file and kernel set, the
largest |difference| in probabilities of lenet against Keras, and of each against float64;
then each one's error in units of float32's rounding scale (float64_reference.float32_rounding:
every sum rounded once at the magnitude of its terms), root mean square / largest. A layer the
scale has no model for prints '-' there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parents[2] / "tests" / "models"
sys.path.insert(0, str(TESTS))

import keras_zoo as kz  # noqa: E402
from float64_reference import closeness  # noqa: E402
from keras_fixtures import keras_model, load_mnist_test  # noqa: E402

import lenet  # noqa: E402

BN_CASES = ("bn_cnn", "bn_mlp", "bn_trained", "bn_input", "bn_center_scale", "bn_after_pool", "bn_branch")
KERNELS = ("auto", "blas", "nchw")


def _model(path: Path, framework: str):
    if framework == "keras2":
        import tf_keras

        return tf_keras.models.load_model(path, compile=False)
    return keras_model(path)


def _inputs(model, engine, rows: int) -> np.ndarray:
    digits = load_mnist_test(rows)[0].astype(np.float32)
    x = digits if kz.takes_raw_pixels(model) else digits / np.float32(255)
    return x.reshape((len(x),) + tuple(engine.input_shape[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--zoo", action="store_true", help="the Keras zoo's batch-norm models (full-model forms)")
    ap.add_argument("--rows", type=int, default=128)
    args = ap.parse_args()
    cases = []
    if args.zoo:
        import tempfile

        zoo = kz.build_zoo(Path(tempfile.mkdtemp()), only=set(BN_CASES))
        cases += [(z.name, z.path, z.framework, z.x) for z in zoo.values() if z.form in ("h5", "keras")]
    cases += [(p.name, p, "keras3", None) for p in args.files]
    print(
        f"{'file':28s} {'kernels':7s} {'lenet-Keras':>11s} {'lenet-f64':>10s} {'Keras-f64':>10s}  closer  "
        f"{'lenet units':>11s} {'Keras units':>11s}"
    )
    for name, path, framework, x in cases:
        model = _model(path, framework)
        for kernels in KERNELS:
            eng = lenet.Engine(path, device="cpu", cpu_kernels=kernels)
            c = closeness(model, eng, _inputs(model, eng, args.rows) if x is None else x)
            if "no_rounding_scale" in c:
                print(f"{name}: {c['no_rounding_scale']}", file=sys.stderr)
            closer = "lenet" if c["lenet_vs_float64"] < c["keras_vs_float64"] else "Keras"
            units = [
                "-" if "no_rounding_scale" in c else f"{c[f'{who}_rounding_rms']:.2f} / {c[f'{who}_rounding_max']:.1f}"
                for who in ("lenet", "keras")
            ]
            print(
                f"{name:28s} {kernels:7s} {c['lenet_vs_keras']:11.2e} {c['lenet_vs_float64']:10.2e} "
                f"{c['keras_vs_float64']:10.2e}  {closer:6s}  {units[0]:>11s} {units[1]:>11s}"
            )


if __name__ == "__main__":
    main()
