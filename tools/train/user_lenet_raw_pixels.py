"""Writes tests/data/keras/user_lenet_raw_pixels.h5: a Keras 2 LeNet as a real user writes it
with tf_keras, trained on raw 0..255 pixels (float32, not divided by 255, no Rescaling layer:
its author feeds raw pixels), like the user's model of issue 74. Its last convolution, 16 -> 32
channels at 5x5 on 7x7, runs as lenet's Winograd F(4x4, 5x5), and the raw pixels give it large
activations: the precision contract's case of a model fed as its author feeds it
(tests/models/test_exactness_contract.py).

    Input (28, 28, 1) -> Conv2D(6, 5, same, relu) -> MaxPooling2D(2)
    -> Conv2D(16, 5, same, relu) -> MaxPooling2D(2) -> Conv2D(32, 5, same, relu)
    -> Flatten -> Dense(120, relu) -> Dense(84, relu) -> Dense(10, softmax)

Seeded (tf_keras.utils.set_random_seed(0)), Adam from 1e-3 cosine-decayed to 0 (a constant
rate, 1e-4 to 1e-3, stops at 96.2 to 97.9% in 3 epochs on raw pixels), batch 128, 3 epochs on
the 60,000 MNIST training digits only, on the CPU: 98.4% on the test set, which is only
measured. Saved by ``model.save`` in Keras 2's legacy HDF5 layout, without the optimizer's
state (three times the weights' size).

    python tools/train/user_lenet_raw_pixels.py [OUT]   # ~2 minutes on 2 cores

MNIST is read from $LENET_MNIST_DIR, or ../shared/mnist beside the repository.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from mnist_split import default_mnist_dir, load_idx_pair  # noqa: E402

SEED = 0
LEARNING_RATE = 1e-3  # at the start, cosine-decayed to 0 over the run
BATCH = 128
EPOCHS = 3


def build(K):
    L = K.layers
    return K.Sequential(
        [
            K.Input(shape=(28, 28, 1)),
            L.Conv2D(6, 5, padding="same", activation="relu"),
            L.MaxPooling2D(2),
            L.Conv2D(16, 5, padding="same", activation="relu"),
            L.MaxPooling2D(2),
            L.Conv2D(32, 5, padding="same", activation="relu"),  # 16 -> 32 at 5x5 on 7x7
            L.Flatten(),
            L.Dense(120, activation="relu"),
            L.Dense(84, activation="relu"),
            L.Dense(10, activation="softmax"),
        ]
    )


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "keras" / "user_lenet_raw_pixels.h5"
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # the CPU, always
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tf_keras

    mnist = default_mnist_dir("train")
    if mnist is None:
        sys.exit("no MNIST training set: set LENET_MNIST_DIR or put it in ../shared/mnist")
    x, y = load_idx_pair(mnist, "train")
    x = x.astype(np.float32)[..., None]  # raw 0..255 pixels, as the author feeds them

    tf_keras.utils.set_random_seed(SEED)
    model = build(tf_keras)
    steps = EPOCHS * -(-len(x) // BATCH)
    model.compile(
        optimizer=tf_keras.optimizers.Adam(tf_keras.optimizers.schedules.CosineDecay(LEARNING_RATE, steps)),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    start = time.perf_counter()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=True, verbose=2)
    seconds = time.perf_counter() - start

    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out, include_optimizer=False)  # the .h5 extension: Keras 2's HDF5 layout
    line = f"{out}: {out.stat().st_size:,} bytes, trained in {seconds:.0f} s"
    test = default_mnist_dir("t10k")
    if test is not None:
        xt, yt = load_idx_pair(test, "t10k")
        p = model.predict(xt.astype(np.float32)[..., None], batch_size=1000, verbose=0)
        line += f", test accuracy {np.mean(p.argmax(axis=1) == yt):.2%}"
    print(line)


if __name__ == "__main__":
    main()
