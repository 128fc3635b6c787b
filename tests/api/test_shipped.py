"""The default model's .lenet copy (issue 54: lenet-cli's start): the file Model.save writes
from the shipped Keras file today, byte for byte, and the answers of that Keras file, bit for
bit; loading it needs neither h5py nor the Keras loader."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from conftest import REPO

import lenet
from lenet.shipped import LENET_FILES, shipped_model_file

REGENERATE = "python -c \"import lenet; lenet.load(lenet.shipped_weights('{name}')).save('weights/{name}.lenet')\""


def test_each_copy_is_what_save_writes_from_its_keras_file(tmp_path):
    for name in LENET_FILES:
        fresh = tmp_path / f"{name}.lenet"
        lenet.load(lenet.shipped_weights(name)).save(fresh)
        shipped = shipped_model_file(name)
        assert shipped is not None and shipped.read_bytes() == fresh.read_bytes(), (
            f"weights/{name}.lenet is stale: {REGENERATE.format(name=name)}"
        )


def test_the_default_model_loads_from_its_copy_with_the_same_answers(mnist_test):
    x = mnist_test[0][:500, :, :, None].astype(np.float32) / np.float32(255)
    for name in LENET_FILES:
        copy, keras_file = lenet.load(name), lenet.load(lenet.shipped_weights(name))
        assert copy.source == str(shipped_model_file(name)) and copy.spec.extra["saved_from"] == f"{name}.h5"
        assert copy.input_scale == keras_file.input_scale and copy.input_shape == keras_file.input_shape
        got = lenet.Engine(copy, device="cpu").predict_proba(x)
        want = lenet.Engine(keras_file, device="cpu").predict_proba(x)
        assert got.tobytes() == want.tobytes()
    assert lenet.load("lenet-tf").source.endswith("lenet-tf.h5")  # no copy: its Keras file
    assert lenet.load("lenet5", arch="lenet5").source.endswith("lenet5.h5")  # an arch: the Keras loader


def test_the_default_call_imports_no_hdf5():
    digit = REPO / "examples" / "digit-7.png"
    probe = f"import sys, lenet; r = lenet.infer({str(digit)!r}, device='cpu'); print(r.digit, 'h5py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7", "False"], out.stdout
