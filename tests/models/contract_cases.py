"""The models the precision contract is checked on (issue 74; docs/how-it-works.md#precision),
fed as their authors feed them, with the reference float32 engine's answer for each: the shipped
LeNets and the Keras zoo (Keras' model.predict), the ONNX zoo of tests/data/onnx (ONNX Runtime).
tests/models/test_exactness_contract.py holds lenet to the contract on them;
``python tools/precision/float64.py`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

import lenet
from lenet.bench import exactness, workload

REPO = Path(__file__).resolve().parents[2]
ONNX_ZOO = sorted((REPO / "tests" / "data" / "onnx").glob("*.onnx"))
SHIPPED = [REPO / "weights" / f"{name}.h5" for name in ("lenet5", "lenet-keras", "lenet-tf")]
# Users' Keras files fed as their authors feed them: {file: (framework, pixel scale)}.
# user_lenet_raw_pixels: Keras 2, trained on raw 0..255 pixels (tools/train/user_lenet_raw_pixels.py);
# its 16 -> 32 5x5 convolution on 7x7 runs as Winograd F(4x4, 5x5).
USERS = {REPO / "tests" / "data" / "keras" / "user_lenet_raw_pixels.h5": ("keras2", 1.0)}


@dataclass
class Case:
    name: str
    path: Path
    x: np.ndarray  # the model's input, as its author feeds it
    reference: str  # "Keras 3", "Keras 2" or "ONNX Runtime"
    # x -> the reference engine's probabilities, made in float32 as a float32 engine makes them
    run_reference: Callable[[np.ndarray], np.ndarray]


def mnist_pixels(n: int) -> np.ndarray:
    from keras_fixtures import load_mnist_test

    return load_mnist_test(n)[0]


def _keras_runner(path: Path, framework: str) -> Callable:
    if framework == "keras2":
        import tf_keras

        model = tf_keras.models.load_model(path, compile=False)
    else:
        from keras_fixtures import keras_model

        model = keras_model(path)
    kind = lenet.load(path).network.output_kind
    return lambda x: exactness.float32_probabilities(np.asarray(model(x, training=False)), kind)


def shipped_case(path: Path, rows: int) -> Case:
    """A shipped LeNet on MNIST digits, scaled as infer scales them."""
    x, _ = workload.to_model_input(mnist_pixels(rows), path)
    return Case(path.stem, path, x, "Keras 3", _keras_runner(path, "keras3"))


def shipped_cases(rows: int) -> list[Case]:
    return [shipped_case(path, rows) for path in SHIPPED]


def user_case(path: Path, rows: int) -> Case:
    """A user's Keras file (USERS) on MNIST digits scaled as its author scales them."""
    framework, scale = USERS[path]
    x = (mnist_pixels(rows).astype(np.float32) * np.float32(scale))[..., None]
    return Case(path.name, path, x, "Keras 2" if framework == "keras2" else "Keras 3", _keras_runner(path, framework))


def zoo_case(z) -> Case:
    """A Keras zoo model (keras_zoo.ZooModel) on its own inputs: MNIST digits and random rows,
    raw 0..255 pixels where it rescales them itself, else scaled to [0, 1]; Keras' answer is
    what the zoo recorded when it saved the model (model(x), float32)."""
    framework = "Keras 2" if z.framework == "keras2" else "Keras 3"
    kind = lenet.load(z.path, arch=z.arch).network.output_kind
    return Case(z.name, z.path, z.x, framework, lambda x: exactness.float32_probabilities(z.expected, kind))


def _onnx_runner(path: Path) -> Callable:
    """ONNX Runtime on the file: x in the graph's input shape (a whole batch, chunks of a fixed
    batch, or one sample at a time without a batch axis), its first output made probabilities
    in float32."""
    import onnx_reference

    session = onnx_reference.session(path)
    name, dims = session.get_inputs()[0].name, session.get_inputs()[0].shape
    kind = lenet.load(path).network.output_kind

    def run(x):
        per = [d if isinstance(d, int) else -1 for d in dims[1:]]
        if len(dims) == x.ndim - 1 or (len(dims) < x.ndim and np.prod(dims) == np.prod(x.shape[1:])):
            y = np.stack([session.run(None, {name: s.reshape(dims)})[0] for s in x])  # no batch axis
        else:
            xs = x.reshape(len(x), *per)
            step = dims[0] if isinstance(dims[0], int) else len(x)
            y = np.concatenate([session.run(None, {name: xs[i : i + step]})[0] for i in range(0, len(x), step)])
        return exactness.float32_probabilities(y.reshape(len(x), -1), kind)

    return run


def onnx_cases(rows: int, paths: Optional[list] = None) -> list[Case]:
    """The ONNX zoo's float graphs on MNIST digits, fed as infer feeds them (each file's size,
    layout and recorded normalization)."""
    import onnx_reference

    out = []
    for path in paths or ONNX_ZOO:
        if onnx_reference.is_quantized(path):  # held to their integer arithmetic (test_onnx_quantized.py)
            continue
        x, _ = workload.to_model_input(mnist_pixels(rows), path)
        out.append(Case(path.name, path, x, "ONNX Runtime", _onnx_runner(path)))
    return out


def measure(case: Case, kernel_sets: list[str], precision: str = "exact") -> dict:
    """{"reference": its distance, set: lenet's distance (at ``precision``), ...}, each
    exactness.distance's dict; None where the model has no float64 evaluation (a layer
    exactness.py does not evaluate): {"why": the reason}."""
    from lenet.bench.netgraph import NotRebuilt

    model = lenet.load(case.path)
    try:
        exact, sigma = exactness.float64_reference(model.spec, case.x)
    except NotRebuilt as e:
        return {"why": str(e)}
    out = {"reference": exactness.distance(case.run_reference(case.x), exact, sigma)}
    for kernels in kernel_sets:
        engine = lenet.Engine(model, device="cpu", cpu_kernels=kernels, precision=precision)
        out[kernels] = exactness.distance(engine.predict_proba(case.x), exact, sigma)
    return out
