"""The MNIST training set and its held-out split, shared by the tools that must agree
on which training digits were never trained on (train.py, ../photoset/make.py), and
the calibration measure they all report (train.py, report.py, ../photoset/score.py).
No TensorFlow here: the photo-set tools must not need it."""

import os
from pathlib import Path

import numpy as np

from lenet.bench.workload import idx_file, read_idx  # one IDX reader, shared with lenet-bench

SIDE = 28
HELD_OUT_PER_CLASS = 500


def default_mnist_dir(prefix):
    """$LENET_MNIST_DIR, or ../shared/mnist beside the repository, if it has <prefix> files."""
    repo = Path(__file__).resolve().parents[2]
    candidates = [Path(os.environ["LENET_MNIST_DIR"])] if os.environ.get("LENET_MNIST_DIR") else []
    candidates += [repo.parent / "shared" / "mnist", Path.cwd().parent / "shared" / "mnist"]
    for candidate in candidates:
        if idx_file(candidate, f"{prefix}-images-idx3-ubyte") and idx_file(candidate, f"{prefix}-labels-idx1-ubyte"):
            return candidate
    return None


def load_idx_pair(directory, prefix):
    """Load (images, labels) from DIR/<prefix>-{images-idx3,labels-idx1}-ubyte[.gz]."""
    images = idx_file(Path(directory), f"{prefix}-images-idx3-ubyte")
    labels = idx_file(Path(directory), f"{prefix}-labels-idx1-ubyte")
    if images is None or labels is None:
        raise FileNotFoundError(f"no {prefix}-*-ubyte[.gz] IDX files in {directory}")
    x, y = read_idx(images), read_idx(labels)
    if x.shape[1:] != (SIDE, SIDE) or len(x) != len(y):
        raise ValueError(f"{directory}: unexpected shapes {x.shape}, {y.shape}")
    return x, y.astype(np.int64)


def stratified_split(y, per_class, rng):
    """Indices (train, held-out) with `per_class` held-out samples of every class (a
    tenth of the class at most)."""
    held = np.concatenate(
        [
            rng.choice(np.flatnonzero(y == c), min(per_class, int(np.sum(y == c)) // 10), replace=False)
            for c in range(10)
        ]
    )
    train = np.setdiff1d(np.arange(len(y)), held)
    return train, np.sort(held)


def held_out_digits(seed=0, mnist_dir=None):
    """(images, labels, indices into the training set) of the digits train.py holds out
    with `seed` from the full MNIST training set."""
    mnist_dir = mnist_dir or default_mnist_dir("train")
    if mnist_dir is None:
        raise FileNotFoundError("the MNIST training set is not here: set LENET_MNIST_DIR or put it in ../shared/mnist")
    x, y = load_idx_pair(mnist_dir, "train")
    _, held = stratified_split(y, HELD_OUT_PER_CLASS, np.random.default_rng(seed))
    return x[held], y[held], held


def expected_calibration_error(confidence, right, bins=15):
    """ECE: the mean |accuracy - confidence| over equal-width confidence bins, weighted
    by their share of the answers; ``confidence`` and ``right`` (bool) per answer."""
    edges = np.linspace(0, 1, bins + 1)
    which = np.clip(np.digitize(confidence, edges[1:-1]), 0, bins - 1)
    return float(
        sum(
            abs(right[which == k].mean() - confidence[which == k].mean()) * np.mean(which == k)
            for k in range(bins)
            if np.any(which == k)
        )
    )
