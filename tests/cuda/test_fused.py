"""The CUDA backend's fused path: a whole LeNet-sized network as one kernel of lenet's
(csrc/backends/cuda/fused_program.h).

Without a GPU: which networks take it and why the others do not (the decision is
device-free), and the kernel's arithmetic and indexing, run on the host thread index by
thread index and phase by phase (`_cuda.fused_emulate`: the same code the kernel runs,
with its barriers' guarantee), against the CPU engine. With a GPU: the kernel itself
against the CPU and against cuDNN + cuBLAS, every path, from float32 and from uint8."""

import math

import numpy as np
import pytest
import test_ops

import lenet
from lenet import _native

built = pytest.mark.skipif(
    _native.cuda_module is None, reason=f"CUDA backend not loaded: {_native.cuda_missing_reason}"
)
L = test_ops.layer
RNG = np.random.default_rng(31)


def _f(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _he(kh, kw, ci, co):
    return _f(kh, kw, ci, co, scale=1 / math.sqrt(kh * kw * ci))


def _emulate(net, x, capacity, **kw):
    """The fused kernel's outputs on the host for x (n, *Keras input shape), rows as
    the CPU executor gives them (channels last)."""
    n = len(x)
    chw = x.transpose(0, 3, 1, 2) if x.ndim == 4 else x
    y = _native.cuda_module.fused_emulate(net, np.ascontiguousarray(chw), capacity, **kw)
    out = net.output_shape
    if len(out) == 3:  # the kernel writes C, H, W
        y = y.reshape(n, out[2], out[0], out[1]).transpose(0, 2, 3, 1)
    return y.reshape(n, -1)


def _cpu(net, x):
    return lenet._core.Executor(net, "cpu", 1).run(np.ascontiguousarray(x, np.float32)).reshape(len(x), -1)


# ---- the networks the fused path takes: small ones of every op it has ----------------------


def _cases():
    bn = {"gamma": _f(4) + 1, "beta": _f(4) * 40, "moving_mean": _f(4) * 30, "moving_variance": np.abs(_f(4)) + 0.5}
    cases = {
        # LeNet-5 as the shipped file has it, at a smaller size
        "lenet": (
            (16, 16, 1),
            [
                L(
                    "conv2d",
                    kernel=(5, 5),
                    filters=4,
                    same_padding=True,
                    activation="relu",
                    weights=_he(5, 5, 1, 4),
                    bias=_f(4),
                ),
                L("max_pool2d", kernel=(2, 2), strides=(2, 2)),
                L("conv2d", kernel=(3, 3), filters=6, activation="relu", weights=_he(3, 3, 4, 6), bias=_f(6)),
                L("max_pool2d", kernel=(2, 2), strides=(2, 2)),
                L("flatten"),
                L("dense", units=20, activation="tanh", weights=_f(54, 20, scale=0.2), bias=_f(20)),
                L("dense", units=10, activation="softmax", weights=_f(20, 10, scale=0.3), bias=_f(10)),
            ],
        ),
        # strides, rectangular kernels, TensorFlow's 'same' with the extra pixel after, no bias
        "strided_rect": (
            (9, 7, 3),
            [L("conv2d", kernel=(2, 3), strides=(2, 1), same_padding=True, filters=5, weights=_he(2, 3, 3, 5))],
        ),
        # horizontal stride 2 under a 5x5 kernel, 'same': column blocks (cuda_path "fast") whose
        # neighbours are two input columns apart, at every edge
        "strided_columns": (
            (9, 11, 2),
            [
                L(
                    "conv2d",
                    kernel=(5, 5),
                    strides=(1, 2),
                    same_padding=True,
                    filters=3,
                    activation="relu",
                    weights=_he(5, 5, 2, 3),
                    bias=_f(3),
                )
            ],
        ),
        "dilated": (
            (11, 10, 2),
            [
                L(
                    "conv2d",
                    kernel=(3, 3),
                    dilation=(2, 2),
                    filters=3,
                    activation="elu",
                    alpha=1.0,
                    weights=_he(3, 3, 2, 3),
                    bias=_f(3),
                )
            ],
        ),
        # a 'same' max pooling after a conv: windows that hang over the edge (absent pixels)
        "conv_pool_same": (
            (7, 7, 2),
            [
                L(
                    "conv2d",
                    kernel=(3, 3),
                    filters=3,
                    same_padding=True,
                    activation="tanh",
                    weights=_he(3, 3, 2, 3),
                    bias=_f(3),
                ),
                L("max_pool2d", kernel=(3, 3), strides=(2, 2), same_padding=True),
            ],
        ),
        # overlapping max pooling after a conv whose activation is not monotonic
        "conv_pool_gelu": (
            (9, 9, 1),
            [
                L("conv2d", kernel=(3, 3), filters=2, activation="gelu", weights=_he(3, 3, 1, 2), bias=_f(2)),
                L("max_pool2d", kernel=(3, 3), strides=(1, 1)),
            ],
        ),
        "avg_pool_same": (
            (7, 6, 3),
            [
                L("conv2d", kernel=(1, 1), filters=4, weights=_he(1, 1, 3, 4), bias=_f(4)),
                L("avg_pool2d", kernel=(2, 2), strides=(2, 2), same_padding=True),
            ],
        ),
        "max_pool_first": ((8, 8, 2), [L("max_pool2d", kernel=(2, 2), strides=(2, 2))]),
        "global_avg": ((5, 6, 3), [L("global_avg_pool2d"), L("dense", units=4, weights=_f(3, 4), bias=_f(4))]),
        # a batch norm with a large shift stays an affine step (network.cpp)
        "batch_norm": (
            (6, 6, 1),
            [
                L("conv2d", kernel=(3, 3), filters=4, weights=_he(3, 3, 1, 4), bias=_f(4)),
                L("batch_norm", named_weights=bn),
            ],
        ),
        "rescaling": ((5, 5, 2), [L("rescaling", scale=1 / 127.5, offset=-1.0), L("activation", activation="relu")]),
        # a dense layer wider than a block's threads, and a long one (partial sums)
        "wide_dense": ((1, 1, 40), [L("flatten"), L("dense", units=700, weights=_f(40, 700, scale=0.2), bias=_f(700))]),
        "long_dense": ((30, 30, 1), [L("flatten"), L("dense", units=3, weights=_f(900, 3, scale=0.05), bias=_f(3))]),
        "log_softmax": ((1, 1, 10), [L("flatten"), L("log_softmax")]),
    }
    return cases


CASES = _cases()


def _act_cases():
    """Every activation after a conv with a pool and after a dense layer."""
    out = {}
    for name, params in [("linear", {})] + test_ops.ACTIVATION_CASES:
        key = name + "".join(f",{k}={v:g}" for k, v in params.items())
        small = 0.2 if name == "exponential" else 1.0  # exp(exp(x)) overflows float32 past x = 4.5
        out[key] = (
            (6, 6, 2),
            [
                L(
                    "conv2d",
                    kernel=(3, 3),
                    filters=3,
                    activation=name,
                    weights=_he(3, 3, 2, 3) * small,
                    bias=_f(3) * small,
                    **params,
                ),
                L("max_pool2d", kernel=(2, 2), strides=(2, 2)),
                L("flatten"),
                L(
                    "dense",
                    units=5,
                    activation=name,
                    weights=_f(12, 5, scale=0.3 * small),
                    bias=_f(5) * small,
                    **params,
                ),
            ],
        )
    return out


ACT_CASES = _act_cases()


def _net(case):
    shape, layers = case
    return test_ops.network(layers, shape)


# ---- no GPU needed --------------------------------------------------------------


@built
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("capacity", [1, 600, 4096])
def test_the_kernel_arithmetic_matches_the_cpu(name, capacity):
    shape, _ = CASES[name]
    net = _net(CASES[name])
    plan = _native.cuda_module.fused_plan(net, capacity, path="fused")
    assert plan["fused"], plan["why"]
    x = _f(11, *shape) if name != "rescaling" else RNG.integers(0, 256, (11, *shape)).astype(np.float32)
    want = _cpu(net, x)
    got = _emulate(net, x, capacity)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


@built
@pytest.mark.parametrize("name", sorted(ACT_CASES))
def test_every_activation_on_the_fused_path(name):
    shape, _ = ACT_CASES[name]
    net = _net(ACT_CASES[name])
    x = _f(5, *shape)
    want = _cpu(net, x)
    got = _emulate(net, x, 5)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)


@built
def test_tiles_of_every_size_give_the_same_answers():
    """images_per_block 1, 2, 4, 8 and 1024 or 256 threads: the capacity chooses them; the
    answers are the same bits (each image's sums run in the same order)."""
    net = _net(CASES["lenet"])
    x = _f(37, 16, 16, 1)
    seen, outs = set(), []
    for capacity in [1, 300, 600, 1100, 4096]:
        plan = _native.cuda_module.fused_plan(net, capacity)
        seen.add((plan["images_per_block"], plan["threads_per_block"]))
        outs.append(_emulate(net, x, capacity))
    assert {ipb for ipb, _ in seen} == {1, 2, 4, 8}, seen
    assert {t for _, t in seen} == {256, 1024}, seen
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


@built
def test_pixels_are_scaled_as_the_host_scales_them():
    """uint8 in, times the scale in the kernel: the same float32 values as the host's
    float(p) * scale, so the same outputs to the bit."""
    model = lenet.load("lenet5")
    px = RNG.integers(0, 256, (9, 28 * 28)).astype(np.uint8)
    scale = np.float32(1 / 255)
    from_pixels = _native.cuda_module.fused_emulate(model.network, px, 9, scale=float(scale))
    from_values = _native.cuda_module.fused_emulate(model.network, px.astype(np.float32) * scale, 9)
    np.testing.assert_array_equal(from_pixels, from_values)


@built
@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
def test_shipped_models_on_the_fused_kernel_agree_with_the_cpu_on_mnist(name, mnist_test):
    images, _ = mnist_test
    n = 24 if name == "lenet-tf" else 200  # the host emulation is one thread index at a time
    px = images[:n]
    engine = lenet.Engine(name, device="cpu", threads=1)
    want = engine.row_probabilities(px[..., None])
    got = _native.cuda_module.fused_emulate(
        engine.model.network, px.reshape(n, -1), 64, scale=float(engine.input_scale)
    )
    assert (got.argmax(1) == want.argmax(1)).all()
    assert np.abs(got - want).max() <= 1e-5


@built
@pytest.mark.parametrize("capacity", [1, 64, 4096])
def test_which_shipped_models_take_the_fused_path(capacity):
    """auto: lenet5 and lenet-keras (under 0.5 M multiply-adds an image) run as one
    kernel; lenet-tf (13.9 M, 12.8 MB of dense weights) stays on cuDNN + cuBLAS, saying
    why. cuda_path='fused' takes it anyway."""
    for name in lenet.SHIPPED_MODELS:
        net = lenet.load(name).network
        auto = _native.cuda_module.fused_plan(net, capacity)
        forced = _native.cuda_module.fused_plan(net, capacity, path="fused")
        assert forced["fused"], forced["why"]
        if name == "lenet-tf":
            assert not auto["fused"]
            assert "13,883,904 multiply-adds per image" in auto["why"]
        else:
            assert auto["fused"], auto["why"]
            codes = [op["code"] for op in auto["ops"]]
            if capacity < 264:  # one image a block: pooling apart, every conv position a thread's work
                assert codes[:4] == ["conv", "max_pool", "conv", "max_pool"], codes
            else:  # a tile of images: each max pooling inside its conv
                assert codes[:2] == ["conv", "conv"] and all(op["pooled"] for op in auto["ops"][:2]), codes
            assert codes[-1] == "softmax"
            assert auto["shared_bytes"] <= 232448


@built
@pytest.mark.parametrize(
    "layers,shape,why",
    [
        (
            [L("conv2d", kernel=(3, 3), filters=4, groups=2, weights=_he(3, 3, 2, 4), bias=_f(4))],
            (8, 8, 4),
            "grouped or depthwise convolution",
        ),
        ([L("zero_pad2d", pad=[1, 1, 1, 1])], (8, 8, 1), "no fused form of pad2d"),
        ([L("activation", activation="relu"), L("add", inputs=[-1, 0])], (4, 4, 2), "does not read the step before"),
        ([L("softmax", axes=[-1])], (3, 3, 4), "a softmax over the channels of an image"),
    ],
    ids=["grouped", "padding", "not_a_chain", "pixel_softmax"],
)
def test_networks_off_the_fused_path_say_why(layers, shape, why):
    plan = _native.cuda_module.fused_plan(test_ops.network(layers, shape), 8, path="fused")
    assert not plan["fused"]
    assert why in plan["why"]


@built
def test_activations_too_large_for_shared_memory_say_so():
    net = _net(CASES["lenet"])
    plan = _native.cuda_module.fused_plan(net, 1, shared_bytes=2048, path="fused")
    assert not plan["fused"]
    assert "bytes of shared memory per image" in plan["why"]


def test_cuda_path_is_checked_on_every_device():
    with pytest.raises(lenet.InputError, match="cuda_path must be 'auto', 'fused', 'library' or 'fast'"):
        lenet.Engine("lenet5", device="cpu", cuda_path="faster")


def test_describe_says_which_kernels_a_cpu_plan_runs():
    plans = lenet.Engine("lenet5", device="cpu").describe()["plans"]
    assert plans and all(p["kernels"] == "steps" and p["kernels_why"] == "" for p in plans)


# ---- on the GPU ------------------------------------------------------------------------


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
@pytest.mark.parametrize("path", ["auto", "fused", "library"])
@pytest.mark.parametrize("batch", [1, 7, 300, 5000])
def test_every_path_agrees_with_the_cpu_on_mnist(name, path, batch, mnist_test):
    images, _ = mnist_test
    px = images[:batch, :, :, None]
    want = lenet.Engine(name, device="cpu").row_probabilities(px)
    with lenet.Engine(name, device="cuda", cuda_path=path) as gpu:
        from_pixels = gpu.row_probabilities(px)
        from_values = gpu.predict_proba(px.astype(np.float32) * np.float32(gpu.input_scale))
        plans = gpu.describe()["plans"]
    for got in (from_pixels, from_values):
        assert (got.argmax(1) == want.argmax(1)).all()
        assert np.abs(got - want).max() <= 1e-5
    # uint8 scaled on the device: the float32 input's values, so the same answers
    np.testing.assert_array_equal(from_pixels, from_values)
    for p in plans:
        if path == "fused":
            assert p["kernels"] == "network", p
        elif path == "library":
            assert p["kernels"] == "steps" and p["kernels_why"] == "cuda_path='library'", p
        elif name == "lenet-tf":  # beyond the fused path's size rule
            assert p["kernels"] == "steps" and "multiply-adds per image" in p["kernels_why"], p
        else:  # timed against a kernel per layer, the faster kept
            assert " us a call with a kernel per layer" in p["kernels_why"], p
            assert (p["kernels"] == "network") == p["kernels_why"].startswith("faster"), p


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", sorted(CASES) + sorted(ACT_CASES)[:6])
@pytest.mark.parametrize("batch", [1, 33])
def test_the_kernel_matches_the_cpu_and_its_emulation(name, batch):
    case = CASES.get(name) or ACT_CASES[name]
    net = _net(case)
    x = _f(batch, *case[0])
    want = _cpu(net, x)
    got = lenet._core.Executor(net, "cuda", 1, cuda_path="fused").run(x).reshape(batch, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(got, _emulate(net, x, batch if batch > 1 else 1), atol=1e-6, rtol=1e-6)


@pytest.mark.requires_cuda
def test_describe_names_the_fused_kernel(mnist_test):
    with lenet.Engine("lenet5", device="cuda", cuda_path="fused") as eng:
        eng.row_probabilities(mnist_test[0][:1, :, :, None])
        d = eng.describe()
    (plan,) = d["plans"]
    assert plan["kernels"] == "network" and plan["kernels_why"] == "" and plan["execution"] == "graph", plan
    (step,) = d["steps"]
    assert step["algorithm"] == "fused" and step["layers"].startswith("conv2d"), step
    assert step["program"].startswith("conv 6x28x28, max_pool 6x14x14, conv 16x10x10, max_pool 16x5x5, dense 120"), step
    with lenet.Engine("lenet-tf", device="cuda") as eng:
        eng.predict_proba(np.zeros((1, 28, 28, 1), np.float32))
        plan = eng.describe()["plans"][0]
    assert plan["kernels"] == "steps" and "multiply-adds per image" in plan["kernels_why"], plan


# ---- cuda_path="fast": column-blocked convolutions (no GPU needed) ------------------------


@built
@pytest.mark.parametrize("name", sorted(CASES))
def test_column_blocked_convolutions_give_the_verified_kernels_bits(name):
    """cuda_path="fast" at one image a block: each thread 4 adjacent outputs of a conv column
    (square kernels 3 and 5, vertical stride and dilation 1); rows and columns outside the
    image as zeros. The same sums in the same order as the verified kernel's, so the same bits."""
    shape, _ = CASES[name]
    net = _net(CASES[name])
    fast = _native.cuda_module.fused_plan(net, 1, path="fast")
    if not fast["fused"]:
        pytest.skip(f"not on the fast path: {fast['why']}")
    x = _f(5, *shape) if name != "rescaling" else RNG.integers(0, 256, (5, *shape)).astype(np.float32)
    got = _emulate(net, x, 1, path="fast")
    np.testing.assert_array_equal(got, _emulate(net, x, 1))
    np.testing.assert_allclose(got, _cpu(net, x), atol=2e-5, rtol=2e-5)


@built
def test_which_convolutions_are_column_blocked():
    plan = _native.cuda_module.fused_plan
    for name in ("lenet5", "lenet-keras"):  # every conv 5x5, stride 1
        net = lenet.load(name).network
        convs = [op for op in plan(net, 1, path="fast")["ops"] if op["code"] == "conv"]
        assert len(convs) == 2 and all(op["column_block"] == 4 for op in convs)
        assert "(columns of 4)" in plan(net, 1, path="fast")["summary"]
        # the verified paths, and tiles of several images (pooling inside the conv), are not
        assert not any(op["column_block"] for op in plan(net, 1, path="fused")["ops"])
        assert not any(op["column_block"] for op in plan(net, 4096, path="fused")["ops"])
        # on 'fast', tiles of several images where a chunk's launch still fills a GPU (of 4 SMs here)
        assert plan(net, 4096, min_blocks=8, path="fast")["images_per_block"] == 8
        assert not any(op["column_block"] for op in plan(net, 4096, min_blocks=8, path="fast")["ops"])
    # (2, 3) kernel with strides (2, 1): not square, vertical stride 2; dilation 2; 3x3; 5x5, strides (1, 2)
    cases = {"strided_rect": 0, "dilated": 0, "conv_pool_same": 4, "strided_columns": 4}
    for case, block in cases.items():
        ops = plan(_net(CASES[case]), 1, path="fast")["ops"]
        assert [op["column_block"] for op in ops if op["code"] == "conv"] == [block], (case, ops)


@built
@pytest.mark.parametrize("name", ["lenet5", "lenet-keras"])
def test_column_blocked_shipped_models_on_mnist(name, mnist_test):
    px = mnist_test[0][:64]
    engine = lenet.Engine(name, device="cpu", threads=1)
    scale = float(engine.input_scale)
    fast = _native.cuda_module.fused_emulate(engine.model.network, px.reshape(64, -1), 1, scale=scale, path="fast")
    verified = _native.cuda_module.fused_emulate(engine.model.network, px.reshape(64, -1), 1, scale=scale)
    np.testing.assert_array_equal(fast, verified)
    assert np.abs(fast - engine.row_probabilities(px[..., None])).max() <= 1e-5
