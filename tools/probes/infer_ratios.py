"""The two ratios of issue 64, each timed in one process, alternating, the best of several
rounds: ``Engine.infer`` on a (64, 28, 28) uint8 batch against ``predict_proba`` on the same
digits as the float32 batch it prepares; ``infer`` on a 28x28 digit drawn dark on light
against the same digit light on dark, as an array and as a PNG file.

    python tools/probes/infer_ratios.py [--rounds 15] [--models lenet5,lenet-keras]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

import lenet

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("digit-*.png"))


def best(calls: dict, rounds: int, number: int) -> dict:
    """Per call, the best mean over ``number`` runs among ``rounds`` rounds; the calls alternate."""
    out = {name: float("inf") for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            for _ in range(number):
                call()
            out[name] = min(out[name], (time.perf_counter() - started) / number)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--models", default="lenet5,lenet-keras")
    args = ap.parse_args()
    digits = np.stack([cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in EXAMPLES])
    batch = np.ascontiguousarray(np.resize(digits, (64, 28, 28)))
    for name in args.models.split(","):
        eng = lenet.Engine(name, device="cpu")
        x = eng.model_input(batch[..., None])
        assert [r.digit for r in eng.infer(batch)] == eng.predict_proba(x).argmax(1).tolist()
        t = best({"infer": lambda: eng.infer(batch), "predict_proba": lambda: eng.predict_proba(x)}, args.rounds, 200)
        print(
            f"{name} b64: infer {t['infer'] * 1e6:.1f} us, predict_proba {t['predict_proba'] * 1e6:.1f} us: "
            f"{t['infer'] / t['predict_proba']:.2f}x"
        )
        light, dark = digits[7], np.ascontiguousarray(255 - digits[7])
        with tempfile.TemporaryDirectory() as tmp:
            light_png, dark_png = f"{tmp}/light.png", f"{tmp}/dark.png"
            cv2.imwrite(light_png, light)
            cv2.imwrite(dark_png, dark)
            for what, a, b in (("array", dark, light), ("PNG file", dark_png, light_png)):
                assert eng.infer(a).digit == eng.infer(b).digit == 7
                t = best({"dark": lambda: eng.infer(a), "light": lambda: eng.infer(b)}, args.rounds, 200)
                print(
                    f"{name} 28x28 drawing, {what}: dark on light {t['dark'] * 1e6:.1f} us, light on dark "
                    f"{t['light'] * 1e6:.1f} us: {t['dark'] / t['light']:.2f}x"
                )
    print(f"cpu_kernels: {lenet.cpu_kernel_sets()[0]}, threads: {eng.threads}")


if __name__ == "__main__":
    main()
