"""Accuracy of the shipped models on the canonical MNIST test set (10,000 digits)."""

import numpy as np
import pytest

import lenet

# The README's accuracy table; the default model must reach 98%.
MIN_ACCURACY = {"lenet5": 0.98, "lenet-keras": 0.97, "lenet-tf": 0.97}


@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
def test_shipped_model_accuracy(name, mnist_test):
    images, labels = mnist_test
    engine = lenet.Engine(name, device="cpu")
    probs = engine.predict_proba(images[..., None].astype(np.float32) * np.float32(engine.input_scale))
    accuracy = float(np.mean(probs.argmax(1) == labels))
    print(f"{name}: {accuracy:.4f} on {len(labels)} MNIST test digits")
    assert accuracy >= MIN_ACCURACY[name]
