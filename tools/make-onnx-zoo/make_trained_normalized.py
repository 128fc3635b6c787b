"""Writes examples/mnist_normalized.onnx: make_user_zoo.py's ``normalized`` graph (pytorch/
examples' MNIST net at a quarter of its widths, as torch.onnx.export writes it, ending in
log_softmax) with weights trained here on MNIST pixels normalized as that example
normalizes them, ``Normalize((0.1307,), (0.3081,))``, and a file that does not say so (as in
the wild): the docs' example of a PyTorch user's model, which answers what it should.

torch has no CPU-only build on PyPI for this environment (make_user_zoo.py), so the net is
trained in Keras (the same layers: valid 3x3 convolutions, a 2x2 max-pool, the flatten in
PyTorch's channel-first order) and its weights are written in PyTorch's layouts.

    python tools/make-onnx-zoo/make_trained_normalized.py [OUT_DIR]   # ~2 minutes on 2 cores
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tools" / "train")]

import make_user_zoo  # noqa: E402
from mnist_split import default_mnist_dir, load_idx_pair  # noqa: E402

MEAN, STD = 0.1307, 0.3081
EPOCHS = 3


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "examples"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    from keras import layers

    keras.utils.set_random_seed(64)
    mnist = default_mnist_dir("train")
    x, y = load_idx_pair(mnist, "train")
    xt, yt = load_idx_pair(mnist, "t10k")

    def normalized(images):
        return ((images.astype(np.float32) / 255 - MEAN) / STD)[..., None]

    net = keras.Sequential(
        [
            keras.Input((28, 28, 1)),
            layers.Conv2D(8, 3, activation="relu"),
            layers.Conv2D(16, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Permute((3, 1, 2)),  # (16, 12, 12): flattened in PyTorch's order
            layers.Flatten(),
            layers.Dense(32, activation="relu"),
            layers.Dense(10),
        ]
    )
    net.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    net.fit(normalized(x), y, batch_size=128, epochs=EPOCHS, verbose=2)
    _, accuracy = net.evaluate(normalized(xt), yt, verbose=0)
    print(f"MNIST test accuracy: {accuracy:.4f}")
    conv1, conv2, fc1, fc2 = (layer for layer in net.layers if layer.weights)
    weights = {
        "conv1.weight": conv1.kernel.numpy().transpose(3, 2, 0, 1),  # (kh, kw, in, out) -> (out, in, kh, kw)
        "conv1.bias": conv1.bias.numpy(),
        "conv2.weight": conv2.kernel.numpy().transpose(3, 2, 0, 1),
        "conv2.bias": conv2.bias.numpy(),
        "fc1.weight": fc1.kernel.numpy().T,  # Gemm(transB=1): (out, in)
        "fc1.bias": fc1.bias.numpy(),
        "fc2.weight": fc2.kernel.numpy().T,
        "fc2.bias": fc2.bias.numpy(),
    }
    make_user_zoo.OUT = out
    make_user_zoo.normalized("mnist_normalized", weights=weights)
    print(f"wrote {out / 'mnist_normalized.onnx'}")


if __name__ == "__main__":
    main()
