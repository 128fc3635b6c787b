"""The CUDA backend. Without a GPU (CI): the planner's descriptors against the
engine's shape inference, the padding choices, versions, the error path and the
CPU fallback. With a GPU (`requires_cuda`): parity with the CPU backend and with
Keras, graphs against eager launches, batch sizes, threads, memory."""

import math
import subprocess
import warnings

import numpy as np
import pytest

import lenet
from lenet import _native

import test_ops
from conftest import check_concurrent_calls

built = pytest.mark.skipif(_native.cuda_module is None,
                           reason=f"CUDA backend not loaded: {_native.cuda_missing_reason}")


# ---- no GPU needed --------------------------------------------------------------

@built
@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
@pytest.mark.parametrize("batch", [1, 3, 64, 1000])
def test_planner_shapes_match_shape_inference(name, batch):
    model = lenet.load(name)
    plan = _native.cuda_module.plan(model._network, batch)
    assert [p["op"] for p in plan] == [s[0] for s in model._network.steps()]
    for p, step in zip(plan, model._network.steps()):
        h, w, c = step[3]
        assert p["out"] == (batch, c, h, w)
        if p["cudnn_out"] is not None:
            assert p["cudnn_out"] == p["out"], p["layers"]


def _net(layers, hwc=(28, 28, 1)):
    return lenet._core.Network(layers, hwc, lenet._core.DataFormat.channels_last, "test", classifier=False)


@built
@pytest.mark.parametrize("kernel,stride,hw,expect_pad,expect_prepad", [
    ((5, 5), (1, 1), 28, (2, 2), (0, 0, 0, 0)),      # symmetric: cuDNN pads itself
    ((3, 3), (2, 2), 28, (0, 0), (0, 1, 0, 1)),      # odd total: the extra pixel after
    ((4, 4), (1, 1), 14, (0, 0), (1, 2, 1, 2)),      # even kernel
    ((1, 1), (1, 1), 7, (0, 0), (0, 0, 0, 0)),
])
def test_planner_conv_padding(kernel, stride, hw, expect_pad, expect_prepad):
    w = np.zeros((*kernel, 1, 2), np.float32)
    net = _net([test_ops.layer("conv2d", kernel=kernel, strides=stride, same_padding=True, filters=2, weights=w)],
               (hw, hw, 1))
    (p,) = _native.cuda_module.plan(net, 2)
    assert p["cudnn_pad"] == expect_pad and p["prepad"] == expect_prepad
    out = math.ceil(hw / stride[0])
    assert p["cudnn_out"] == (2, 2, out, out)


@built
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_planner_pool_padding(kind):
    net = _net([test_ops.layer(f"{kind}_pool2d", kernel=(3, 3), strides=(2, 2), same_padding=True)], (7, 7, 3))
    (p,) = _native.cuda_module.plan(net, 1)
    assert p["prepad"] == (1, 1, 1, 1) and p["cudnn_pad"] == (0, 0)
    assert p["cudnn_out"] == (1, 3, 4, 4)
    if kind == "max":
        assert p["pad_value"] == -np.inf and p["avg_factor"] == []
    else:
        # Window size over real pixels, from an independent count.
        real = []
        for oy in range(4):
            for ox in range(4):
                rows = min(oy * 2 - 1 + 3, 7) - max(oy * 2 - 1, 0)
                cols = min(ox * 2 - 1 + 3, 7) - max(ox * 2 - 1, 0)
                real.append(9 / (rows * cols))
        np.testing.assert_allclose(p["avg_factor"], real, rtol=1e-6)


@built
def test_versions_are_reported():
    # In a fresh process, as `lenet-cli --version` runs: in a process that imported
    # TensorFlow first, cuBLAS calls can bind to TF's stubs (see the issue-3 note).
    import json
    import sys
    out = subprocess.run([sys.executable, "-c", "import json, lenet; print(json.dumps(lenet.info()))"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout.strip().splitlines()[-1])
    assert "cuda" in info["backends_built"]
    for key in ("cuda_runtime", "cudnn_linked", "cudnn_loaded", "cublas_linked", "cublas_loaded"):
        assert info[key], key
    # Linked and loaded cuDNN / cuBLAS share their major version.
    assert info["cudnn_linked"].split(".")[0] == info["cudnn_loaded"].split(".")[0] == "9"
    assert info["cublas_linked"].split(".")[0] == info["cublas_loaded"].split(".")[0]
    out = subprocess.run(["lenet-cli", "--version"], capture_output=True, text=True)
    assert "cudnn_loaded" in out.stdout


@built
def test_module_finds_the_wheels_without_ld_library_path():
    out = subprocess.run(["readelf", "-d", _native.cuda_module.__file__], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("readelf not available")
    assert "nvidia/cudnn/lib" in out.stdout and "nvidia/cu13/lib" in out.stdout


def test_no_gpu_error_and_auto_fallback():
    if lenet.cuda_available():
        pytest.skip("a GPU is available")
    assert lenet.cuda_available() is False   # never raises
    with pytest.raises(lenet.CudaError, match="CUDA"):
        lenet.Engine(device="cuda")
    with pytest.raises(lenet.CudaError):
        lenet._core.Executor(lenet.load()._network, "cuda", 1)   # below the Python check too
    # auto falls back to the CPU, saying once why when the backend is built.
    lenet.engine._auto_warned = False
    if lenet.cuda_built():
        with pytest.warns(RuntimeWarning, match="using the CPU"):
            assert lenet.Engine(device="auto").device == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lenet.Engine(device="auto").device == "cpu"   # once: no second warning


# ---- GPU needed ------------------------------------------------------------------

@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", test_ops.CONV_CASES)
@pytest.mark.parametrize("n", [1, 5, 70])
def test_conv_matches_cpu(case, n):
    h, w, ci, co, k, s, pad, act, bias = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, h, w, ci)).astype(np.float32)
    wt = rng.standard_normal((k[0], k[1], ci, co)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32) if bias else None
    layers = [test_ops.layer("conv2d", kernel=k, strides=s, same_padding=pad == "same", filters=co, activation=act,
                             weights=wt, bias=b), test_ops.layer("flatten")]
    _compare(layers, x)


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", test_ops.POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_matches_cpu(case, kind):
    h, w, c, k, s, pad = case
    x = np.random.default_rng(8).standard_normal((6, h, w, c)).astype(np.float32)
    _compare([test_ops.layer(f"{kind}_pool2d", kernel=k, strides=s, same_padding=pad == "same"),
              test_ops.layer("flatten")], x)


@pytest.mark.requires_cuda
@pytest.mark.parametrize("act", ["linear", "relu", "tanh", "sigmoid", "softmax"])
def test_dense_flatten_activation_match_cpu(act):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((9, 3, 4, 5)).astype(np.float32)
    # (3, 4, 5) -> pad -> (4, 7, 5) -> pool -> (2, 3, 5) -> 30 features
    layers = [test_ops.layer("rescaling", scale=0.5, offset=0.1), test_ops.layer("zero_pad2d", pad=(1, 0, 2, 1)),
              test_ops.layer("max_pool2d", kernel=(2, 2), strides=(2, 2)), test_ops.layer("flatten"),
              test_ops.layer("dense", units=13, activation=act, weights=rng.standard_normal((30, 13)).astype(np.float32),
                             bias=rng.standard_normal(13).astype(np.float32))]
    _compare(layers, x)


def _compare(layers, x):
    net = lenet._core.Network(layers, tuple(x.shape[1:]), lenet._core.DataFormat.channels_last, "t", classifier=False)
    cpu = lenet._core.Executor(net, "cpu", 1).run(x)
    gpu = lenet._core.Executor(net, "cuda", 1).run(x)
    np.testing.assert_allclose(gpu, cpu, atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def mnist_x(mnist_test):
    return mnist_test[0][:1000, :, :, None].astype(np.float32) / 255


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
def test_shipped_models_match_cpu(name, mnist_x):
    cpu = lenet.Engine(name, device="cpu").predict_proba(mnist_x)
    gpu = lenet.Engine(name, device="cuda").predict_proba(mnist_x)
    assert np.abs(gpu - cpu).max() <= 1e-5
    assert (gpu.argmax(1) == cpu.argmax(1)).all()


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
def test_shipped_models_match_keras(name, mnist_x):
    keras = pytest.importorskip("keras")
    ref = keras.models.load_model(lenet.shipped_weights(name), compile=False).predict(mnist_x, verbose=0)
    gpu = lenet.Engine(name, device="cuda").predict_proba(mnist_x)
    assert np.abs(gpu - ref).max() <= 1e-5
    assert (gpu.argmax(1) == ref.argmax(1)).all()


@pytest.mark.requires_cuda
def test_graph_replay_equals_eager_and_batch_sizes(mnist_x):
    graph = lenet.Engine("lenet-tf", device="cuda")
    eager = lenet.Engine("lenet-tf", device="cuda", cuda_graphs=False)
    x = np.concatenate([mnist_x] * 5)  # 5000 images: past the largest plan
    for n in (1, 2, 63, 64, 65, 1000, 5000):
        a, b = graph.predict_proba(x[:n]), eager.predict_proba(x[:n])
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(graph.predict_proba(x[:n]), a)  # replay of a captured graph


@pytest.mark.requires_cuda
def test_concurrent_callers(mnist_x):
    eng = lenet.Engine(device="cuda")
    check_concurrent_calls(eng.predict_proba, mnist_x, [1, 7, 64, 100, 3, 1, 250, 32], 50,
                           np.testing.assert_array_equal)


@pytest.mark.requires_cuda
def test_no_memory_growth(mnist_x):
    eng = lenet.Engine(device="cuda")
    for _ in range(100):
        eng.predict_proba(mnist_x[:1])
    before = _native.cuda_module.memory_used()
    for i in range(10_000):
        eng.predict_proba(mnist_x[i % 1000:i % 1000 + 1])
    assert _native.cuda_module.memory_used() - before <= 1 << 20
