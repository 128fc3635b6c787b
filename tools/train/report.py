"""The shipped models on the MNIST test set, measured by the engine: accuracy, expected
calibration error, the attributes train.py recorded, and a confusion matrix per model.

    python tools/train/report.py                # the shipped models -> docs/confusion-<model>.png
    python tools/train/report.py --weights build/train/weights/lenet5.h5 --out /tmp
    python tools/train/report.py --keras        # and the argmax of Keras on the same file, all 10,000

The test set is only reported on here, never used for a choice.
"""

import argparse
import sys
from pathlib import Path

import h5py
import numpy as np

import lenet

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist_split import default_mnist_dir, expected_calibration_error, load_idx_pair  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def plot(confusion, title, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 4.6), dpi=110)
    off = confusion.astype(float)
    np.fill_diagonal(off, np.nan)  # the errors are what the eye should find
    im = ax.imshow(off, cmap="Reds", vmin=0)
    for t in range(10):
        for p in range(10):
            v = confusion[t, p]
            if v:
                ax.text(
                    p,
                    t,
                    str(v),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if t != p else "#1f4e79",
                    fontweight="bold" if t == p else None,
                )
    ax.set_xticks(range(10))
    ax.set_yticks(range(10))
    ax.set_xlabel("read as")
    ax.set_ylabel("true digit")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046, label="errors")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def keras_differs(path, x, scale, read):
    """How many of the digits x Keras, loading the file itself, reads otherwise than ``read``."""
    import os

    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    model = keras.models.load_model(path, compile=False)
    p = model.predict(x[..., None].astype(np.float32) * np.float32(scale), batch_size=1000, verbose=0)
    return int(np.sum(p.argmax(1) != read))


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/train/report.py", description=__doc__.split("\n")[0])
    p.add_argument("--weights", nargs="+", default=[str(REPO / "weights" / f"{m}.h5") for m in lenet.SHIPPED_MODELS])
    p.add_argument("--out", type=Path, default=REPO / "docs")
    p.add_argument("--test-dir", type=Path, default=default_mnist_dir("t10k"))
    p.add_argument(
        "--keras",
        action="store_true",
        help="also load each file in Keras and count the test digits whose argmax differs from the engine's",
    )
    args = p.parse_args(argv)
    if args.test_dir is None:
        p.error("no MNIST test set here: pass --test-dir or set LENET_MNIST_DIR")
    x, y = load_idx_pair(args.test_dir, "t10k")
    print(
        "| model | trained on | held-out accuracy | T | test accuracy | test errors | test ECE |"
        + (" argmax differing from Keras |" if args.keras else "")
    )
    print("|---|---|---:|---:|---:|---:|---:|" + ("---:|" if args.keras else ""))
    for w in args.weights:
        name = Path(w).stem
        engine = lenet.Engine(w, device="cpu")
        probs = engine.predict_proba(x[..., None].astype(np.float32) * np.float32(engine.input_scale))
        read = probs.argmax(1)
        acc = float(np.mean(read == y))
        ece = expected_calibration_error(probs.max(1), read == y)
        confusion = np.zeros((10, 10), np.int64)
        np.add.at(confusion, (y, read), 1)
        args.out.mkdir(parents=True, exist_ok=True)
        plot(
            confusion,
            f"{name}: {100 * acc:.2f}% of 10,000 MNIST test digits ({int((read != y).sum())} errors)",
            args.out / f"confusion-{name}.png",
        )
        with h5py.File(w) as f:
            a = dict(f.attrs)
        held = a.get("lenet_held_out_accuracy")
        t = a.get("lenet_temperature")
        trained = str(a.get("lenet_trained_on", "?")).split(":")[0]
        print(
            f"| `{name}` | {trained} | {f'{100 * held:.2f}%' if held is not None else '-'} | "
            f"{f'{t:.2f}' if t is not None else '-'} | **{100 * acc:.2f}%** | {int((read != y).sum())} | {ece:.4f} |"
            + (f" {keras_differs(w, x, engine.input_scale, read)} of {len(y)} |" if args.keras else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
