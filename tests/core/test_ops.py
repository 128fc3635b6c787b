"""Each CPU op against an independent NumPy reference, over a table of shapes.

Single ops run through the core with `classifier=False`, so the network's output
is the op's output (NHWC, flattened per image).
"""

import math

import numpy as np
import pytest

import lenet
from lenet import _core

RNG = np.random.default_rng(1234)
# Every CPU kernel set this machine runs (hand-written per instruction set, the
# im2col + OpenBLAS reference, then "nchw": the CUDA backend's layout, weight
# forms, padding choices and element functions on the CPU): each op is checked on each.
KERNELS = _core.cpu_kernel_sets()


def tf_same(n, k, s):
    out = math.ceil(n / s)
    total = max((out - 1) * s + k - n, 0)
    return out, total // 2, total - total // 2


def ref_act(x, act):
    return {
        "linear": lambda v: v,
        "relu": lambda v: np.maximum(v, 0),
        "tanh": np.tanh,
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    }[act](x)


def ref_conv_general(x, w, b, stride, dilation, pads, groups):
    """Grouped, dilated convolution with explicit (top, bottom, left, right) zero pads, float64."""
    n, h, wd, ci = x.shape
    kh, kw, cig, co = w.shape
    t, bo, le, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (t, bo), (le, r), (0, 0)))
    eh, ew = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    oh, ow = (xp.shape[1] - eh) // stride[0] + 1, (xp.shape[2] - ew) // stride[1] + 1
    y = np.zeros((n, oh, ow, co))
    cog = co // groups
    for g in range(groups):
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = ky * dilation[0], kx * dilation[1]
                patch = xp[
                    :,
                    y0 : y0 + oh * stride[0] : stride[0],
                    x0 : x0 + ow * stride[1] : stride[1],
                    g * cig : (g + 1) * cig,
                ][:, :oh, :ow]
                y[..., g * cog : (g + 1) * cog] += patch @ w[ky, kx, :, g * cog : (g + 1) * cog].astype(np.float64)
    return y + (0 if b is None else b)


def ref_conv(x, w, b, stride, padding, act):
    n, h, wd, ci = x.shape
    kh, kw, _, co = w.shape
    if padding == "same":
        oh, pt, pb = tf_same(h, kh, stride[0])
        ow, pl, pr = tf_same(wd, kw, stride[1])
    else:
        pt = pb = pl = pr = 0
        oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    y = np.zeros((n, oh, ow, co))
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, ky : ky + oh * stride[0] : stride[0], kx : kx + ow * stride[1] : stride[1], :]
            y += patch[:, :oh, :ow, :] @ w[ky, kx].astype(np.float64)
    return ref_act(y + (0 if b is None else b), act)


def ref_pool(x, k, stride, padding, kind):
    n, h, wd, c = x.shape
    if padding == "same":
        oh, pt, _ = tf_same(h, k[0], stride[0])
        ow, pl, _ = tf_same(wd, k[1], stride[1])
    else:
        pt = pl = 0
        oh, ow = (h - k[0]) // stride[0] + 1, (wd - k[1]) // stride[1] + 1
    y = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * stride[0] - pt, j * stride[1] - pl
            win = x[:, max(y0, 0) : min(y0 + k[0], h), max(x0, 0) : min(x0 + k[1], wd), :].astype(np.float64)
            y[:, i, j] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return y


def layer(kind, inputs=None, **kw):
    """A core layer record. weights=/bias=: the kernel and bias of a conv or dense
    layer; other weights by name in named_weights={...}."""
    l = _core.LayerSpec()
    l.kind = kind
    l.name = kw.pop("name", kind)
    l.keras_class = kind
    weights, bias = kw.pop("weights", None), kw.pop("bias", None)
    named = kw.pop("named_weights", {})
    for k, v in kw.items():
        setattr(l, k, v)
    if inputs is not None:
        l.inputs = inputs
    if weights is not None:
        l.set_weight("kernel", weights)
    l.use_bias = bias is not None or "bias" in named
    if bias is not None:
        l.set_weight("bias", bias)
    for k, v in named.items():
        l.set_weight(k, np.asarray(v, np.float32))
    return l


def network(layers, shape):
    """A chain unless the records say otherwise; shape: the per-sample input shape."""
    for i, l in enumerate(layers):
        if not l.inputs:
            l.inputs = [i - 1]
    return _core.Network(layers, [int(v) for v in shape], "test")


def conv_inputs(rng, n, h, w, ci, co, k):
    """A convolution's test inputs: n images (h, w, ci), a k x k kernel to co channels
    scaled as trained weights are (He, so outputs stay O(1) for every fan-in), a bias."""
    x = rng.standard_normal((n, h, w, ci)).astype(np.float32)
    wt = (rng.standard_normal((k, k, ci, co)) / math.sqrt(k * k * ci)).astype(np.float32)
    return x, wt, rng.standard_normal(co).astype(np.float32)


def run(layers, x, threads=1, kernels="auto", tolerance=False):
    """The network's outputs on x (n, *input shape), one row per image; with
    `tolerance`, and the tolerance its kernels are held to (conv_tolerance)."""
    net = network(layers, x.shape[1:])
    ex = _core.Executor(net, "cpu", threads, cpu_kernels=kernels)
    got = ex.run(np.ascontiguousarray(x, dtype=np.float32)).reshape(len(x), -1)
    return (got, conv_tolerance(ex)) if tolerance else got


# Convolutions' outputs of O(1) against float64: within CONV_TOL, Winograd's too by default
# (precision="exact": its sums in double). Only the opt-in precision="fast" runs F(4, 5) and
# F(4, 3) in float32, held to F4_TOL: F(4, 5)'s transforms' 4.25 and 5.25 cancel, rounding
# about 5x F(2, 5)'s (the largest error seen: 2.5e-5 of 878,080 outputs, 14x14x32 -> 64;
# PERFORMANCE.md); F(4, 3)'s about 3x the direct kernel's (9.0e-6 of 294,912, 26x26x32 -> 64).
CONV_TOL = dict(atol=2e-5, rtol=1e-5)
F4_TOL = dict(atol=5e-5, rtol=2e-5)


def conv_tolerance(ex):
    """F4_TOL where a float32 F(4, r) ran (precision="fast"), else CONV_TOL."""
    fast4 = [
        node
        for plan in ex.describe()
        for node in plan["kernels"]
        if node.get("tile") == "4x4" and node.get("precision") == "fast"
    ]
    return F4_TOL if fast4 else CONV_TOL


CONV_CASES = [
    # h, w, ci, co, kernel, stride, padding, act, bias
    (28, 28, 1, 6, (5, 5), (1, 1), "same", "relu", True),
    (14, 14, 6, 16, (5, 5), (1, 1), "valid", "relu", True),
    (28, 28, 1, 4, (3, 3), (2, 2), "same", "linear", True),  # odd total: extra pixel after
    (14, 14, 4, 5, (4, 4), (1, 1), "same", "tanh", False),  # even kernel: (1, 2) padding
    (9, 7, 3, 2, (2, 3), (2, 1), "same", "sigmoid", True),  # rectangular everything
    (10, 10, 2, 3, (1, 1), (1, 1), "valid", "relu", True),  # 1x1: GEMM without im2col
    (5, 5, 1, 2, (5, 5), (1, 1), "valid", "linear", True),  # kernel as large as the input
    (8, 8, 3, 7, (3, 3), (3, 3), "valid", "relu", False),
    (1, 1, 5, 4, (3, 3), (1, 1), "same", "linear", True),  # all padding but the centre
    (14, 14, 32, 64, (5, 5), (1, 1), "same", "relu", True),  # lenet-tf conv2: 4 channel blocks
    (31, 30, 3, 33, (3, 3), (1, 1), "valid", "relu", True),  # 3 blocks, the last 1 channel; uneven tiles
    (6, 17, 2, 70, (2, 2), (1, 2), "same", "linear", True),  # 4 blocks + 1
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,co,k,s,pad,act,bias", CONV_CASES)
@pytest.mark.parametrize("n", [1, 3, 70])
def test_conv2d(h, w, ci, co, k, s, pad, act, bias, n, kernels):
    x = RNG.standard_normal((n, h, w, ci)).astype(np.float32)
    # Scaled as trained weights are (He), so outputs stay O(1) for every fan-in.
    wt = (RNG.standard_normal((k[0], k[1], ci, co)) / math.sqrt(k[0] * k[1] * ci)).astype(np.float32)
    b = RNG.standard_normal(co).astype(np.float32) if bias else None
    got, tol = run(
        [
            layer(
                "conv2d",
                kernel=k,
                strides=s,
                same_padding=pad == "same",
                filters=co,
                activation=act,
                weights=wt,
                bias=b,
            )
        ],
        x,
        threads=2,
        kernels=kernels,
        tolerance=True,
    )
    want = ref_conv(x, wt, b, s, pad, act).reshape(n, -1)
    np.testing.assert_allclose(got, want, **tol)


POOL_CASES = [
    (28, 28, 6, (2, 2), (2, 2), "valid"),
    (14, 14, 5, (3, 3), (2, 2), "same"),
    (7, 7, 5, (2, 2), (2, 2), "same"),  # odd input: last window half padding
    (9, 6, 2, (3, 2), (1, 2), "same"),
    (5, 5, 3, (5, 5), (1, 1), "same"),  # windows mostly padding
    (8, 8, 1, (3, 3), (3, 3), "valid"),
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,c,k,s,pad", POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d(h, w, c, k, s, pad, kind, kernels):
    x = RNG.standard_normal((5, h, w, c)).astype(np.float32)
    got = run([layer(f"{kind}_pool2d", kernel=k, strides=s, same_padding=pad == "same")], x, kernels=kernels)
    np.testing.assert_allclose(got, ref_pool(x, k, s, pad, kind).reshape(5, -1), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("n,units", [(1, 11), (2, 11), (16, 70), (17, 70), (65, 11), (3, 1024)])
@pytest.mark.parametrize("act", ["linear", "relu", "tanh", "sigmoid"])
def test_dense(n, units, act, kernels):
    # Image counts around the kernels' tile sizes; "blas": SGEMV for 1, else SGEMM.
    x = RNG.standard_normal((n, 1, 1, 37)).astype(np.float32)
    w = RNG.standard_normal((37, units)).astype(np.float32)
    b = RNG.standard_normal(units).astype(np.float32)
    got = run(
        [layer("flatten"), layer("dense", units=units, activation=act, weights=w, bias=b)],
        x,
        threads=1,
        kernels=kernels,
    )
    want = ref_act(x.reshape(n, 37).astype(np.float64) @ w + b, act)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


FUSED_CASES = [
    # h, w, ci, co, kernel, padding, act: a convolution then a 2x2 / 2 max pool,
    # which the direct kernels run as one (odd conv outputs drop their last row/column)
    (28, 28, 1, 6, 5, "same", "relu"),
    (14, 14, 6, 16, 5, "valid", "relu"),  # 10x10 -> 5x5
    (13, 11, 3, 5, 3, "valid", "tanh"),  # 11x9 -> 5x4
    (28, 28, 1, 32, 5, "same", "sigmoid"),
    (16, 16, 32, 70, 3, "same", "linear"),  # 4 blocks + 1, big enough to split
    (3, 3, 2, 4, 2, "valid", "relu"),  # 2x2 -> 1x1
    # one input channel: the kernel with vectors along the rows
    (13, 11, 1, 5, 3, "valid", "relu"),  # 11x9 -> 5x4
    (40, 70, 1, 9, 5, "same", "tanh"),  # several row chunks, channels in 2 groups
    (64, 64, 1, 32, 5, "same", "relu"),  # big enough to split rows over threads
    (2, 2, 1, 1, 1, "valid", "linear"),
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,co,k,pad,act", FUSED_CASES)
@pytest.mark.parametrize("n,threads", [(1, 1), (1, 2), (5, 2), (40, 1)])
def test_conv_then_max_pool(h, w, ci, co, k, pad, act, n, threads, kernels):
    x, wt, b = conv_inputs(RNG, n, h, w, ci, co, k)
    got = run(
        [
            layer("conv2d", kernel=(k, k), same_padding=pad == "same", filters=co, activation=act, weights=wt, bias=b),
            layer("max_pool2d", kernel=(2, 2), strides=(2, 2)),
        ],
        x,
        threads=threads,
        kernels=kernels,
    )
    conv = ref_conv(x, wt, b, (1, 1), pad, act)
    want = ref_pool(conv, (2, 2), (2, 2), "valid", "max").reshape(n, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


WINOGRAD_CASES = [
    # h, w, ci, co, kernel, padding, pooled, tile fast, tile exact: stride-1 3x3 and 5x5
    # convolutions with 16 or more input channels run as Winograd F(m x m, r x r) on the
    # hand-written sets; as F(4, r) but where F(2, r)'s tiles compute less (the smallest
    # outputs, 2 x n). With its sums in double (exact, the default) F(2, r) saves less than
    # it costs but on F(2, 5) over whole 16-channel blocks: 0, the direct kernel.
    (14, 14, 32, 64, 5, "same", True, 4, 4),  # lenet-tf's second layer
    (13, 11, 20, 33, 5, "same", False, 4, 4),  # odd output: edge tiles cut; 20 channels padded to 32; 3 blocks
    (10, 10, 16, 8, 5, "same", True, 4, 4),  # 5x5 pooled: the last tiles pool one row and column
    (15, 15, 16, 8, 5, "valid", True, 4, 4),  # 11x11 conv: the pool drops the odd row and column
    (9, 10, 17, 8, 5, "valid", False, 4, 4),  # 5x6 output
    (6, 9, 24, 16, 5, "valid", False, 2, 0),  # 2x5 output: F(2, 5)'s 3 tiles compute less than F(4, 5)'s 2
    (6, 9, 32, 16, 5, "valid", False, 2, 2),  # the same on 32 channels: F(2, 5) in double still pays
    (26, 26, 32, 64, 3, "valid", True, 4, 4),  # PyTorch's MNIST example's second layer
    (12, 9, 16, 16, 3, "valid", True, 4, 4),  # 10x7 conv: the pool drops the odd column
    (40, 41, 48, 24, 3, "same", False, 4, 4),  # 110 tiles an image: more than one pass
    (3, 3, 16, 5, 3, "same", False, 4, 4),  # one tile, mostly padding
    # 2x138 output: F(2, 3)'s 69 tiles compute less than F(4, 3)'s 35; more than one pass
    (4, 140, 16, 8, 3, "valid", False, 2, 0),
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,co,k,pad,pooled,tile_fast,tile_exact", WINOGRAD_CASES)
@pytest.mark.parametrize("n,threads", [(1, 1), (1, 2), (3, 1), (4, 2)])
@pytest.mark.parametrize("precision", ["exact", "fast"])
def test_winograd_convolutions(h, w, ci, co, k, pad, pooled, tile_fast, tile_exact, n, threads, kernels, precision):
    # n = 3: F(4, 5)'s passes take the tiles of several images (14x14: 2, 13x11: 4), the last pass fewer
    tile = tile_exact if precision == "exact" else tile_fast
    x, wt, b = conv_inputs(RNG, n, h, w, ci, co, k)
    layers = [
        layer("conv2d", kernel=(k, k), same_padding=pad == "same", filters=co, activation="relu", weights=wt, bias=b)
    ]
    want = ref_conv(x, wt, b, (1, 1), pad, "relu")
    if pooled:
        layers.append(layer("max_pool2d", kernel=(2, 2), strides=(2, 2)))
        want = ref_pool(want, (2, 2), (2, 2), "valid", "max")
    ex = _core.Executor(network(layers, x.shape[1:]), "cpu", threads, cpu_kernels=kernels, precision=precision)
    got = ex.run(x).reshape(n, -1)
    tolerance = F4_TOL if precision == "fast" and tile == 4 else CONV_TOL
    np.testing.assert_allclose(got, want.reshape(n, -1), **tolerance)
    first = ex.describe()[0]["kernels"][0]
    winograd = kernels not in ("blas", "nchw") and tile > 0
    assert first.get("algorithm") == ("winograd" if winograd else None)
    assert first.get("tile") == (f"{tile}x{tile}" if winograd else None)
    assert first.get("precision") == (precision if winograd else None)


@pytest.mark.parametrize("precision,qualify", [("exact", 48), ("fast", 52)])
def test_winograd_matches_the_blas_path_on_random_shapes(precision, qualify):
    # 60 seeded shapes around the tile edges (odd sizes, 1-pixel images, 'same' and
    # 'valid', pooled or not, channel counts on both sides of a 16-lane block).
    rng = np.random.default_rng(2026)
    chosen = 0
    for _ in range(60):
        k, same, pooled = int(rng.choice([3, 5])), bool(rng.integers(2)), bool(rng.integers(2))
        h, w = (int(rng.integers(1 if same else k, 20)) for _ in range(2))
        ci, co, n = int(rng.integers(16, 50)), int(rng.integers(1, 70)), int(rng.integers(1, 4))
        oh, ow = (h, w) if same else (h - k + 1, w - k + 1)
        pooled = pooled and oh >= 2 and ow >= 2
        x, wt, b = conv_inputs(rng, n, h, w, ci, co, k)

        def layers():
            conv = layer("conv2d", kernel=(k, k), same_padding=same, filters=co, activation="relu", weights=wt, bias=b)
            return [conv] + ([layer("max_pool2d", kernel=(2, 2), strides=(2, 2))] if pooled else [])

        ex = _core.Executor(network(layers(), x.shape[1:]), "cpu", 2, precision=precision)
        got = ex.run(x).reshape(n, -1)
        chosen += ex.describe()[0]["kernels"][0].get("algorithm") == "winograd"
        want = run(layers(), x, threads=1, kernels="blas")
        np.testing.assert_allclose(
            got,
            want,
            **conv_tolerance(ex),
            err_msg=f"h={h} w={w} ci={ci} co={co} k={k} same={same} pooled={pooled} n={n}",
        )
    # 56 of 60 qualify for fast (16+ channels; 3x3 wants few padded ones), 52 for exact (F(2, r)
    # in double rarely pays)
    assert chosen >= qualify, chosen


@pytest.mark.parametrize("h,ci,co,k,pad", [(14, 32, 64, 5, "same"), (26, 32, 64, 3, "valid")])
def test_exact_winograd_is_as_close_to_float64_as_the_blas_path(h, ci, co, k, pad):
    # Issue 74: lenet-tf's second layer and PyTorch's MNIST example's, on trained-like inputs
    # (ReLU outputs: non-negative, so the transforms' constants cancel). With its sums in double
    # the default Winograd is nearer float64 than im2col + SGEMM's float32 sums; the float32
    # one (fast) several times further.
    rng = np.random.default_rng(74)
    x, wt, b = conv_inputs(rng, 16, h, h, ci, co, k)
    x = np.maximum(x, 0)
    conv = lambda: [layer("conv2d", kernel=(k, k), same_padding=pad == "same", filters=co, weights=wt, bias=b)]  # noqa: E731
    want = ref_conv(x, wt, b, (1, 1), pad, "linear").reshape(16, -1)

    def error(**options):
        ex = _core.Executor(network(conv(), x.shape[1:]), "cpu", 1, **options)
        return np.sqrt(np.mean((ex.run(x).reshape(16, -1) - want) ** 2))

    blas, exact, fast = error(cpu_kernels="blas"), error(), error(precision="fast")
    assert exact <= blas < fast / 2, (exact, blas, fast)


@pytest.mark.parametrize(
    "ci,k,s,winograd",
    [
        (16, 3, 1, True),
        (15, 3, 1, False),
        (8, 5, 1, False),
        (17, 3, 1, False),
        (17, 5, 1, True),
        (32, 4, 1, False),
        (32, 3, 2, False),
        (32, 1, 1, False),
    ],
)
def test_winograd_is_chosen_where_it_pays(ci, k, s, winograd):
    # At least 16 input channels, stride 1, 3x3 or 5x5, and padding to 16 channels
    # wasting less than the products save (17 channels: 32 computed, a loss for 3x3).
    x = np.zeros((1, 10, 10, ci), np.float32)
    conv = layer(
        "conv2d",
        kernel=(k, k),
        strides=(s, s),
        same_padding=True,
        filters=8,
        weights=np.zeros((k, k, ci, 8), np.float32),
    )
    ex = _core.Executor(network([conv], x.shape[1:]), "cpu", 1)
    ex.run(x)
    assert ex.describe()[0]["kernels"][0].get("algorithm") == ("winograd" if winograd else None)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("threads", [2, 3])
def test_large_single_image_ops_split_over_threads(threads, kernels):
    # One image, threads idle: big kernels split their work (by channel slices for
    # a dense layer, by rows for a convolution); the answer must not change.
    x = RNG.standard_normal((1, 1, 1, 2100)).astype(np.float32)
    w = (RNG.standard_normal((2100, 1100)) / 45).astype(np.float32)
    b = RNG.standard_normal(1100).astype(np.float32)
    got = run(
        [layer("flatten"), layer("dense", units=1100, activation="relu", weights=w, bias=b)],
        x,
        threads=threads,
        kernels=kernels,
    )
    np.testing.assert_allclose(got, ref_act(x.reshape(1, -1).astype(np.float64) @ w + b, "relu"), atol=2e-5)
    x = RNG.standard_normal((1, 15, 15, 32)).astype(np.float32)
    w = (RNG.standard_normal((5, 5, 32, 40)) / 28).astype(np.float32)
    got, tol = run(
        [layer("conv2d", kernel=(5, 5), same_padding=True, filters=40, weights=w)],
        x,
        threads=threads,
        kernels=kernels,
        tolerance=True,
    )
    want = ref_conv(x, w, None, (1, 1), "same", "linear").reshape(1, -1)
    np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize(
    "fmt,flatten_df,order",
    [
        ("channels_last", "", (0, 1, 2, 3)),  # Keras flattens (h, w, c)
        ("channels_first", "channels_first", (0, 2, 3, 1)),  # Flatten(channels_first) moves c last first
        ("channels_first", "channels_last", (0, 1, 2, 3)),  # (c, h, w) as it is: rows in C, H, W order
        ("channels_last", "channels_first", (0, 2, 3, 1)),  # (h, w, c) read as (c, h, w): W, C, H order
    ],
)
def test_flatten_row_order(fmt, flatten_df, order):
    # A pool fixes the model's format; the Dense rows follow the Flatten's order.
    shape = (4, 6, 10, 2) if fmt == "channels_last" else (4, 2, 6, 10)
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal((30, 6)).astype(np.float32)
    layers = [
        layer("max_pool2d", kernel=(2, 2), strides=(2, 2), data_format=fmt),
        layer("flatten", data_format=flatten_df),
        layer("dense", units=6, weights=w),
    ]
    pooled = (
        x.reshape(4, 3, 2, 5, 2, 2).max(axis=(2, 4))
        if fmt == "channels_last"
        else x.reshape(4, 2, 3, 2, 5, 2).max(axis=(3, 5))
    )
    np.testing.assert_allclose(run(layers, x), pooled.transpose(order).reshape(4, 30) @ w, atol=1e-5, rtol=1e-5)


def test_softmax_activation_rescaling_padding():
    x = RNG.uniform(0, 255, (3, 4, 5, 2)).astype(np.float32)
    got = run(
        [
            layer("rescaling", scale=1 / 255, offset=-0.5),
            layer("zero_pad2d", pad=(1, 2, 0, 3)),
            layer("activation", activation="softmax"),
        ],
        x,
    )
    v = np.pad(x / 255 - 0.5, ((0, 0), (1, 2), (0, 3), (0, 0)))
    e = np.exp(v - v.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(-1, keepdims=True)).reshape(3, -1), atol=1e-6)


@pytest.mark.parametrize("kernels", ["auto", "blas", "nchw"])
@pytest.mark.parametrize("shape", [(10,), (3, 4, 7)])
def test_log_softmax(kernels, shape):
    """ONNX LogSoftmax (PyTorch's log_softmax head): over the channel axis, stable for large logits."""
    x = (RNG.standard_normal((5,) + shape) * 30).astype(np.float32)
    got = run([layer("log_softmax")], x, kernels=kernels)
    v = x.astype(np.float64)
    want = v - v.max(-1, keepdims=True) - np.log(np.exp(v - v.max(-1, keepdims=True)).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, want.reshape(5, -1), atol=1e-5)


def test_zero_padding_folds_into_conv():
    x = RNG.standard_normal((2, 28, 28, 1)).astype(np.float32)
    w = RNG.standard_normal((5, 5, 1, 3)).astype(np.float32)
    layers = [layer("zero_pad2d", pad=(2, 2, 2, 2)), layer("conv2d", kernel=(5, 5), filters=3, weights=w)]
    got = run(layers, x)
    assert [s[0] for s in network(layers, (28, 28, 1)).steps()] == ["conv2d"]
    want = ref_conv(np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0))), w, None, (1, 1), "valid", "linear")
    np.testing.assert_allclose(got, want.reshape(2, -1), atol=2e-5, rtol=1e-5)


def test_channels_first_input_and_output_keep_their_layout():
    x = RNG.standard_normal((3, 2, 6, 6)).astype(np.float32)  # (n, C, H, W)
    got = run([layer("max_pool2d", kernel=(2, 2), strides=(2, 2), data_format="channels_first")], x)
    want = ref_pool(x.transpose(0, 2, 3, 1), (2, 2), (2, 2), "valid", "max").transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want.reshape(3, -1))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_batch_split_matches_single_images(threads):
    x = RNG.standard_normal((131, 12, 12, 2)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 2, 4)).astype(np.float32)
    layers = [layer("conv2d", kernel=(3, 3), filters=4, activation="relu", weights=w)]
    whole = run(layers, x, threads=threads)
    one = np.concatenate([run(layers, x[i : i + 1]) for i in range(0, 131, 13)])
    np.testing.assert_allclose(whole[::13], one, atol=1e-6, rtol=1e-6)


def test_cpu_kernel_sets(monkeypatch):
    assert KERNELS[-2:] == ["blas", "nchw"] and "generic" in KERNELS
    assert lenet.cpu_kernel_sets() == KERNELS
    pool = [layer("max_pool2d", kernel=(2, 2), strides=(2, 2))]
    with pytest.raises(lenet.InputError, match=r"unknown CPU kernels 'sse9' \(expected 'auto', 'avx512', 'avx2'"):
        run(pool, np.zeros((1, 4, 4, 1), np.float32), kernels="sse9")
    # A set this CPU does not run (here: capped away) is refused when the engine is made.
    monkeypatch.setenv("LENET_MAX_CPU_ISA", "generic")
    with pytest.raises(lenet.InputError, match="CPU kernels 'avx2' are not available on this CPU"):
        run(pool, np.zeros((1, 4, 4, 1), np.float32), kernels="avx2")


def test_a_network_that_computes_nothing_is_refused():
    with pytest.raises(lenet.UnsupportedModelError, match="computes nothing"):
        run([layer("flatten")], np.zeros((1, 4), np.float32))


# ------------------------------------------------------------------ the layers of issue 13

GROUPED_CASES = [
    # h, w, ci, co, kernel, stride, dilation, same, groups
    (12, 12, 4, 6, (3, 3), (1, 1), (2, 2), False, 1),  # dilated
    (11, 9, 3, 4, (3, 2), (2, 1), (2, 3), True, 1),  # dilated, strided, 'same'
    (10, 10, 4, 8, (3, 3), (1, 1), (1, 1), True, 2),  # grouped
    (9, 9, 6, 6, (3, 3), (1, 1), (1, 1), True, 6),  # depthwise
    (9, 8, 5, 10, (3, 3), (2, 2), (1, 1), True, 5),  # depthwise, multiplier 2, strided
    (13, 13, 4, 8, (5, 5), (1, 1), (2, 2), False, 4),  # depthwise, dilated
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,co,k,s,d,same,groups", GROUPED_CASES)
def test_grouped_dilated_depthwise_conv(h, w, ci, co, k, s, d, same, groups, kernels):
    x = RNG.standard_normal((3, h, w, ci)).astype(np.float32)
    wt = RNG.standard_normal((k[0], k[1], ci // groups, co)) / math.sqrt(k[0] * k[1] * ci / groups)
    wt = wt.astype(np.float32)
    b = RNG.standard_normal(co).astype(np.float32)
    got = run(
        [
            layer(
                "conv2d",
                kernel=k,
                strides=s,
                dilation=d,
                same_padding=same,
                filters=co,
                groups=groups,
                activation="relu",
                weights=wt,
                bias=b,
            )
        ],
        x,
        threads=2,
        kernels=kernels,
    )
    eh, ew = (k[0] - 1) * d[0] + 1, (k[1] - 1) * d[1] + 1
    pads = (0, 0, 0, 0)
    if same:
        _, t, bo = tf_same(h, eh, s[0])
        _, le, r = tf_same(w, ew, s[1])
        pads = (t, bo, le, r)
    want = np.maximum(ref_conv_general(x, wt, b, s, d, pads, groups), 0).reshape(3, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


def test_depthwise_and_separable_records():
    """DepthwiseConv2D's (kh, kw, c, m) kernel is the grouped HWIO kernel as stored; SeparableConv2D is
    a depthwise then a 1x1 convolution."""
    x = RNG.standard_normal((2, 8, 8, 3)).astype(np.float32)
    dw = RNG.standard_normal((3, 3, 3, 2)).astype(np.float32)
    pw = RNG.standard_normal((1, 1, 6, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    got = run(
        [
            layer(
                "separable_conv2d",
                kernel=(3, 3),
                filters=4,
                depth_multiplier=2,
                same_padding=True,
                named_weights={"depthwise_kernel": dw, "pointwise_kernel": pw, "bias": b},
            )
        ],
        x,
    )
    mid = ref_conv_general(x, dw.reshape(3, 3, 1, 6), None, (1, 1), (1, 1), (1, 1, 1, 1), 3)
    want = mid @ pw[0, 0].astype(np.float64) + b
    np.testing.assert_allclose(got, want.reshape(2, -1), atol=2e-5, rtol=1e-5)


def ref_activation(x, name, alpha=0.0, beta=0.0, max_value=np.inf, threshold=0.0):
    x = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    softplus = np.logaddexp(x, 0)
    return {
        "linear": x,
        "relu": np.where(x > threshold, np.minimum(x, max_value), alpha * (x - threshold)),
        "elu": np.where(x > 0, x, alpha * np.expm1(x)),
        "selu": 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
        "gelu": 0.5 * x * (1 + erf(x / math.sqrt(2))),
        "gelu_tanh": 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
        "tanh": np.tanh(x),
        "sigmoid": 1 / (1 + np.exp(-x)),
        "hard_sigmoid": np.clip(alpha * x + beta, 0, 1),
        "hard_swish": x * np.clip(alpha * x + beta, 0, 1),
        "swish": x / (1 + np.exp(-x)),
        "softplus": softplus,
        "softsign": x / (1 + np.abs(x)),
        "exponential": np.exp(x),
        "mish": x * np.tanh(softplus),
    }[name]


ACTIVATION_CASES = [
    ("relu", {}),
    ("relu", {"max_value": 6.0}),
    ("relu", {"alpha": 0.1, "threshold": 0.5}),
    ("relu", {"alpha": 0.3}),
    ("elu", {"alpha": 1.0}),
    ("elu", {"alpha": 0.5}),
    ("selu", {}),
    ("gelu", {}),
    ("gelu_tanh", {}),
    ("tanh", {}),
    ("sigmoid", {}),
    ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    ("hard_sigmoid", {"alpha": 1 / 6, "beta": 0.5}),
    ("hard_swish", {"alpha": 1 / 6, "beta": 0.5}),
    ("swish", {}),
    ("softplus", {}),
    ("softsign", {}),
    ("exponential", {}),
    ("mish", {}),
]


def test_every_activation_is_tested():
    assert {a for a, _ in ACTIVATION_CASES} | {"linear", "softmax", "log_softmax"} == set(_core.activations())


@pytest.mark.parametrize("name", [a for a in _core.activations() if a not in ("softmax", "log_softmax")])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0, -0.5])
def test_every_activation_declares_its_monotonicity_truly(name, alpha):
    """LENET_ACTIVATIONS' column (no default: a new activation must say), checked on a grid:
    one said to never decrease does not (the conv + max pool fusion pools first for it),
    and one said to decrease somewhere does (hard_swish with slope 0 is x / 2)."""
    if name == "linear":  # the identity: a network of it alone computes nothing
        assert _core.activation_monotonic(name, alpha)
        return
    x = np.linspace(-8, 8, 4001, dtype=np.float32)[None]
    params = {"alpha": alpha, "beta": 0.5} if name in ("hard_sigmoid", "hard_swish") else {"alpha": alpha}
    y = run([layer("activation", activation=name, **params)], x).reshape(-1)
    falls = bool(np.any(np.diff(y.astype(np.float64)) < -1e-6))
    if _core.activation_monotonic(name, alpha):
        assert not falls, f"{name}(alpha={alpha}) is declared monotonic and decreases"
    elif not (name == "hard_swish" and alpha == 0):
        assert falls, f"{name}(alpha={alpha}) is declared non-monotonic and never decreases"


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("name,params", ACTIVATION_CASES)
def test_activations(name, params, kernels):
    """Alone, and fused into a conv and a dense layer."""
    x = (RNG.standard_normal((3, 5, 6, 4)) * 3).astype(np.float32)
    got = run([layer("activation", activation=name, **params)], x, kernels=kernels)
    np.testing.assert_allclose(got, ref_activation(x, name, **params).reshape(3, -1), atol=2e-6, rtol=2e-6)
    w = (RNG.standard_normal((3, 3, 4, 5)) / 3).astype(np.float32)
    b = RNG.standard_normal(5).astype(np.float32)
    got = run(
        [
            layer("conv2d", kernel=(3, 3), filters=5, weights=w, bias=b, activation=name, **params),
            layer("max_pool2d", kernel=(2, 2), strides=(2, 2)),
        ],
        x,
        kernels=kernels,
    )
    conv = ref_activation(ref_conv(x, w, b, (1, 1), "valid", "linear"), name, **params)
    want = ref_pool(conv, (2, 2), (2, 2), "valid", "max")
    np.testing.assert_allclose(got, want.reshape(3, -1), atol=2e-5, rtol=2e-5)


def test_bn_after_a_linear_conv_folds_and_after_relu_stays():
    x = RNG.standard_normal((2, 8, 8, 2)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 2, 4)).astype(np.float32)
    g, be, m, v = (RNG.uniform(0.5, 1.5, 4), RNG.normal(0, 0.1, 4), RNG.normal(0, 0.2, 4), RNG.uniform(0.5, 1.5, 4))
    bn = dict(named_weights={"gamma": g, "beta": be, "moving_mean": m, "moving_variance": v}, epsilon=1e-3)
    conv = ref_conv(x, w, None, (1, 1), "valid", "linear")
    normed = (conv - m) / np.sqrt(v + 1e-3) * g + be
    for act, want in (
        ("linear", np.maximum(normed, 0)),
        ("relu", (np.maximum(conv, 0) - m) / np.sqrt(v + 1e-3) * g + be),
    ):
        layers = [layer("conv2d", kernel=(3, 3), filters=4, weights=w, activation=act), layer("batch_norm", **bn)]
        if act == "linear":
            layers.append(layer("activation", activation="relu"))
        steps = [s[0] for s in network(layers, (8, 8, 2)).steps()]
        assert steps == (["conv2d"] if act == "linear" else ["conv2d", "affine"]), steps
        np.testing.assert_allclose(run(layers, x), want.reshape(2, -1), atol=2e-5, rtol=1e-5)


def test_affine_before_a_valid_conv_folds_but_not_before_a_padded_one():
    x = RNG.uniform(0, 255, (2, 8, 8, 1)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 1, 2)).astype(np.float32)
    for same in (False, True):
        layers = [
            layer("rescaling", scale=1 / 127.5, offset=-1.0),
            layer("conv2d", kernel=(3, 3), filters=2, same_padding=same, weights=w),
        ]
        steps = [s[0] for s in network(layers, (8, 8, 1)).steps()]
        assert steps == (["affine", "conv2d"] if same else ["conv2d"])
        want = ref_conv(x / 127.5 - 1, w, None, (1, 1), "same" if same else "valid", "linear")
        np.testing.assert_allclose(run(layers, x), want.reshape(2, -1), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kernels", ["auto", "blas", "nchw"])
def test_bn_with_a_large_shift_stays_unfolded_before_a_conv(kernels):
    """Conv(relu) -> BN -> Conv: the BN folds into the next conv while its shift
    (mean * gamma / sqrt(var + eps)) is small; a trained-like one (here 300) would make the
    conv sum terms that large and lose that much precision: it stays an affine step,
    and the result is the float64 reference's within float32's rounding of the BN output."""
    x = RNG.standard_normal((4, 8, 8, 2)).astype(np.float32)
    w1 = (RNG.standard_normal((3, 3, 2, 16)) / 4).astype(np.float32)
    b1 = np.full(16, 60.0, np.float32)  # channels always on, far from 0
    w2 = (RNG.standard_normal((3, 3, 16, 4)) / 12).astype(np.float32)
    h = np.maximum(ref_conv(x, w1, b1, (1, 1), "valid", "linear"), 0)
    mean, var = h.mean((0, 1, 2)), h.var((0, 1, 2))
    for shift_mean, folded in ((0.0, True), (1.0, False)):
        m = (mean * shift_mean).astype(np.float32)
        bn = dict(
            named_weights={
                "gamma": np.ones(16),
                "beta": np.zeros(16),
                "moving_mean": m,
                "moving_variance": var.astype(np.float32),
            },
            epsilon=1e-5,
        )
        layers = [
            layer("conv2d", kernel=(3, 3), filters=16, weights=w1, bias=b1, activation="relu"),
            layer("batch_norm", **bn),
            layer("conv2d", kernel=(3, 3), filters=4, weights=w2),
        ]
        steps = [s[0] for s in network(layers, (8, 8, 2)).steps()]
        assert steps == (["conv2d", "conv2d"] if folded else ["conv2d", "affine", "conv2d"]), steps
        if not folded:
            want = ref_conv((h - m) / np.sqrt(var + 1e-5), w2, None, (1, 1), "valid", "linear")
            np.testing.assert_allclose(run(layers, x, kernels=kernels), want.reshape(4, -1), atol=2e-5)


def test_prelu_normalization_crop():
    x = RNG.standard_normal((3, 7, 6, 2)).astype(np.float32)
    alpha = RNG.uniform(0.05, 0.5, (1, 1, 2)).astype(np.float32)  # shared_axes (1, 2)
    mean, var = np.array([0.3, -0.2], np.float32), np.array([2.0, 0.5], np.float32)
    got = run(
        [
            layer("prelu", axes=[1, 2], named_weights={"alpha": alpha}),
            layer("normalization", axes=[-1], epsilon=1e-7, named_weights={"mean": mean, "variance": var}),
            layer("crop2d", pad=(1, 2, 0, 3)),
        ],
        x,
    )
    y = np.where(x > 0, x, alpha * x)
    y = (y - mean) / np.sqrt(var)
    np.testing.assert_allclose(got, y[:, 1:5, 0:3].reshape(3, -1), atol=1e-5, rtol=1e-5)


def ref_resize(x, oh, ow, nearest, crop=None):
    """tf.image.resize (half-pixel centres), float64, of the window crop = (y, x, h, w)."""
    n, h, w, c = x.shape
    y0, x0, ch, cw = crop or (0, 0, h, w)

    def taps(out, size, first):
        scale = size / out
        if nearest:
            at = np.clip(np.floor((np.arange(out) + 0.5) * scale).astype(int), 0, size - 1)
            return first + at, first + at, np.zeros(out)
        v = (np.arange(out) + 0.5) * scale - 0.5
        lo = np.maximum(np.floor(v), 0).astype(int)
        hi = np.minimum(np.ceil(v), size - 1).astype(int)
        return first + lo, first + hi, v - np.floor(v)

    ylo, yhi, ly = taps(oh, ch, y0)
    xlo, xhi, lx = taps(ow, cw, x0)
    x = x.astype(np.float64)
    top = x[:, ylo][:, :, xlo] + (x[:, ylo][:, :, xhi] - x[:, ylo][:, :, xlo]) * lx[None, None, :, None]
    bottom = x[:, yhi][:, :, xlo] + (x[:, yhi][:, :, xhi] - x[:, yhi][:, :, xlo]) * lx[None, None, :, None]
    return top + (bottom - top) * ly[None, :, None, None]


@pytest.mark.parametrize(
    "h,w,oh,ow,interp",
    [
        (28, 28, 32, 32, "bilinear"),
        (28, 28, 14, 14, "bilinear"),
        (28, 28, 32, 32, "nearest"),
        (10, 7, 5, 12, "bilinear"),
        (10, 7, 21, 3, "nearest"),
    ],
)
def test_resizing(h, w, oh, ow, interp):
    x = RNG.standard_normal((2, h, w, 3)).astype(np.float32)
    got = run([layer("resizing", size=(oh, ow), interpolation=interp)], x)
    np.testing.assert_allclose(got, ref_resize(x, oh, ow, interp == "nearest").reshape(2, -1), atol=1e-5)


def test_resizing_crop_to_aspect_ratio_and_upsampling():
    x = RNG.standard_normal((2, 10, 16, 1)).astype(np.float32)
    got = run([layer("resizing", size=(8, 8), crop_to_aspect_ratio=True)], x)
    np.testing.assert_allclose(got, ref_resize(x, 8, 8, False, crop=(0, 3, 10, 10)).reshape(2, -1), atol=1e-5)
    got = run([layer("upsampling2d", size=(2, 3), interpolation="nearest")], x)
    np.testing.assert_allclose(got, x.repeat(2, axis=1).repeat(3, axis=2).reshape(2, -1))


@pytest.mark.parametrize("kind", ["add", "subtract", "multiply", "average", "maximum", "minimum"])
def test_merges(kind):
    x = RNG.standard_normal((3, 4, 5, 2)).astype(np.float32)
    w1, w2 = (RNG.standard_normal((1, 1, 2, 2)).astype(np.float32) for _ in range(2))
    branches = [
        layer("conv2d", kernel=(1, 1), filters=2, weights=w1, inputs=[-1], name="a"),
        layer("conv2d", kernel=(1, 1), filters=2, weights=w2, inputs=[-1], name="b"),
    ]
    inputs = [0, 1] if kind == "subtract" else [0, 1, -1]
    got = run(branches + [layer(kind, inputs=inputs)], x)
    vals = [x @ w1[0, 0], x @ w2[0, 0], x][: len(inputs)]
    want = {
        "add": sum(vals),
        "subtract": vals[0] - vals[1],
        "multiply": np.prod(vals, axis=0),
        "average": sum(vals) / len(vals),
        "maximum": np.max(vals, axis=0),
        "minimum": np.min(vals, axis=0),
    }[kind]
    np.testing.assert_allclose(got, want.reshape(3, -1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("axis", [1, 2, 3, -1])
def test_concatenate(axis):
    x = RNG.standard_normal((2, 4, 5, 3)).astype(np.float32)
    w = RNG.standard_normal((1, 1, 3, 3)).astype(np.float32)
    got = run(
        [
            layer("conv2d", kernel=(1, 1), filters=3, weights=w, inputs=[-1]),
            layer("concatenate", inputs=[0, -1, 0], axes=[axis]),
        ],
        x,
    )
    c = x @ w[0, 0]
    np.testing.assert_allclose(got, np.concatenate([c, x, c], axis=axis).reshape(2, -1), atol=1e-5)


@pytest.mark.parametrize(
    "target,input_shape",
    [((28, 28, 1), (784,)), ((7, 7, 16), (784,)), ((28, 28), (784,)), ((4, 49), (14, 14, 1)), ((-1,), (3, 4, 5))],
)
def test_reshape(target, input_shape):
    x = RNG.standard_normal((2,) + input_shape).astype(np.float32)
    got = run([layer("reshape", target_shape=list(target)), layer("activation", activation="tanh")], x)
    np.testing.assert_allclose(got, np.tanh(x.reshape((2,) + tuple(target))).reshape(2, -1), atol=1e-6)


def test_reshape_and_permute_in_a_channels_first_model():
    """Keras reshapes in its own memory order: a channels_first model's (c, h, w)."""
    x = RNG.standard_normal((2, 48)).astype(np.float32)
    layers = [
        layer("reshape", target_shape=[3, 4, 4]),
        layer("max_pool2d", kernel=(2, 2), strides=(2, 2), data_format="channels_first"),
        layer("permute", axes=[2, 3, 1]),
        layer("flatten"),
    ]
    pooled = x.reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5))  # (n, c, h, w)
    np.testing.assert_allclose(run(layers, x), pooled.transpose(0, 2, 3, 1).reshape(2, -1))


@pytest.mark.parametrize("kind,keepdims", [("global_avg_pool2d", False), ("global_max_pool2d", True)])
def test_global_pooling(kind, keepdims):
    x = RNG.standard_normal((3, 5, 7, 4)).astype(np.float32)
    net = network([layer(kind, keepdims=keepdims)], x.shape[1:])
    assert net.output_shape == ((1, 1, 4) if keepdims else (4,))
    want = x.mean(axis=(1, 2)) if kind == "global_avg_pool2d" else x.max(axis=(1, 2))
    np.testing.assert_allclose(run([layer(kind, keepdims=keepdims)], x), want, atol=1e-6)


def test_dense_on_an_image_acts_on_channels():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 6)).astype(np.float32)
    np.testing.assert_allclose(run([layer("dense", units=6, weights=w)], x), (x @ w).reshape(2, -1), atol=1e-5)


@pytest.mark.parametrize("shape", [(5, 6, 7), (33,), (4, 9)])
def test_layer_norm(shape):
    x = (RNG.standard_normal((3,) + shape) * 4 + 2).astype(np.float32)
    c = shape[-1]
    g, b = RNG.uniform(0.5, 1.5, c).astype(np.float32), RNG.normal(0, 0.3, c).astype(np.float32)
    got = run([layer("layer_norm", epsilon=1e-3, named_weights={"gamma": g, "beta": b})], x)
    x64 = x.astype(np.float64)
    want = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-3) * g + b
    np.testing.assert_allclose(got, want.reshape(3, -1), atol=2e-5, rtol=1e-5)


def test_conv1d_is_a_conv_of_height_one():
    x = RNG.standard_normal((2, 20, 3)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    layers = [
        layer("conv1d", kernel=(1, 4), strides=(1, 2), same_padding=True, filters=5, weights=w),
        layer("max_pool1d", kernel=(1, 2), strides=(1, 2)),
        layer("global_avg_pool1d"),
    ]
    conv = ref_conv(x[:, None], w[None], None, (1, 2), "same", "linear")[:, 0]  # (2, 10, 5)
    want = conv.reshape(2, 5, 2, 5).max(axis=2).mean(axis=1)
    np.testing.assert_allclose(run(layers, x), want, atol=2e-5, rtol=1e-5)


# ------------------------------------------------------------------ the direct kernels' fast paths (issue 54)

CHAIN_CASES = [
    # h, w, ci, (co, k, padding, pooled) per convolution, act: convolutions back to back,
    # which the direct sets hand over row-planar where the first runs vectors along the rows
    (28, 28, 1, [(6, 5, "same", True), (16, 5, "valid", True)], "relu"),  # lenet5: rows -> channels
    (28, 28, 1, [(5, 5, "valid", True), (12, 5, "valid", True)], "relu"),  # lenet-keras: 24 wide, then 8 wide
    (20, 20, 1, [(4, 3, "valid", True), (3, 3, "same", True)], "tanh"),  # 'same' after: a row-planar border copy
    (19, 17, 1, [(7, 4, "valid", True), (20, 3, "valid", False)], "relu"),  # unpooled after: channels, one row a tile
    (18, 90, 1, [(3, 3, "valid", True), (5, 3, "valid", True), (9, 2, "valid", True)], "linear"),  # three, wide rows
    (16, 16, 2, [(9, 3, "same", True), (17, 3, "valid", True)], "relu"),  # 9 channels: two groups; 17: two blocks
    (6, 6, 1, [(2, 3, "valid", True), (3, 1, "valid", True)], "relu"),  # 2x2 conv outputs: a pair in a vector
    (13, 11, 1, [(5, 3, "valid", True), (4, 2, "valid", True)], "tanh"),  # odd sizes: pools drop a row, a column
    (12, 12, 1, [(4, 3, "valid", True), (40, 3, "valid", False)], "relu"),  # 40 channels after: no images in lanes
]


def _chain(ci, convs, act, rng):
    """Per convolution: a function making its layers (the conv, and the pool when pooled),
    and its weights, bias, padding and pooling for the NumPy reference."""
    parts = []
    for co, k, pad, pooled in convs:
        wt = (rng.standard_normal((k, k, ci, co)) / math.sqrt(k * k * ci)).astype(np.float32)
        b = rng.standard_normal(co).astype(np.float32)

        def make(wt=wt, b=b, k=k, co=co, pad=pad, pooled=pooled):
            conv = layer(
                "conv2d", kernel=(k, k), same_padding=pad == "same", filters=co, activation=act, weights=wt, bias=b
            )
            return [conv] + ([layer("max_pool2d", kernel=(2, 2), strides=(2, 2))] if pooled else [])

        parts.append((make, (wt, b, pad, pooled)))
        ci = co
    return parts


def _chain_reference(x, parts, act):
    for _, (wt, b, pad, pooled) in parts:
        x = ref_conv(x, wt, b, (1, 1), pad, act)
        if pooled:
            x = ref_pool(x, (2, 2), (2, 2), "valid", "max")
    return x


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,convs,act", CHAIN_CASES)
@pytest.mark.parametrize("n,threads", [(1, 1), (1, 2), (5, 2), (70, 2)])
def test_convolutions_back_to_back(h, w, ci, convs, act, n, threads, kernels):
    rng = np.random.default_rng(54)
    parts = _chain(ci, convs, act, rng)
    x = rng.standard_normal((n, h, w, ci)).astype(np.float32)
    got = run([l for make, _ in parts for l in make()], x, threads=threads, kernels=kernels)
    np.testing.assert_allclose(got, _chain_reference(x, parts, act).reshape(n, -1), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kernels", [k for k in KERNELS if k not in ("blas", "nchw")])
@pytest.mark.parametrize("h,w,ci,convs,act", CHAIN_CASES)
def test_convolutions_give_the_same_bits_on_every_path(h, w, ci, convs, act, kernels):
    # Every direct kernel sums a convolution's terms in one order (ky, kx, then the input
    # channel), whichever way it vectorizes: a chain whose convolutions hand their values
    # over row-planar or interleaved answers, to the bit, as its layers run one network
    # each on NHWC, and as each image alone (images in lanes for the whole groups of 35:
    # two of 16 on AVX-512, then 3 alone).
    rng = np.random.default_rng(5)
    parts = _chain(ci, convs, act, rng)
    x = rng.standard_normal((35, h, w, ci)).astype(np.float32)
    ex = _core.Executor(network([l for make, _ in parts for l in make()], x.shape[1:]), "cpu", 1, cpu_kernels=kernels)
    chained = ex.run(x).reshape(35, -1)
    facts = [k for plan in ex.describe() for k in plan["kernels"]]
    assert facts[1].get("input") == facts[0].get("output")
    # One input channel: the first convolution runs vectors along the rows, and hands over
    # to a row kernel, or to a channel kernel where that reads row-planar faster (AVX-512).
    isa = KERNELS[0] if kernels == "auto" else kernels
    linked = ci == 1 and (facts[1]["vectors"] == "rows" or isa == "avx512")
    assert (facts[0].get("output") == "row-planar") == linked
    # Images in lanes on AVX-512 for convolutions of up to 32 output channels.
    lanes = isa == "avx512" and convs[0][0] <= 32 and convs[1][0] <= 32
    assert (facts[0].get("interleaved") == "out") == lanes
    y = x
    for make, _ in parts:
        shape = _chain_reference(y[:1].astype(np.float64), [(make, _)], act).shape[1:]
        y = run(make(), y, kernels=kernels).reshape((len(y),) + shape)
    np.testing.assert_array_equal(chained, y.reshape(35, -1))
    alone = np.concatenate([ex.run(x[i : i + 1]).reshape(1, -1) for i in range(0, 35, 4)])
    np.testing.assert_array_equal(chained[::4], alone)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("inputs,units", [(1, 10), (2, 16), (7, 17), (37, 84), (400, 120), (131, 130), (192, 1024)])
def test_dense_on_few_images(inputs, units, n, kernels):
    # One to three images: the inputs summed in runs apart (lengths not a multiple of
    # the runs, fewer inputs than runs), four vectors of channels a pass, then the rest.
    x = RNG.standard_normal((n, inputs)).astype(np.float32)
    w = (RNG.standard_normal((inputs, units)) / math.sqrt(inputs)).astype(np.float32)
    b = RNG.standard_normal(units).astype(np.float32)
    got = run([layer("dense", units=units, activation="relu", weights=w, bias=b)], x, kernels=kernels)
    want = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


# The direct kernel sets ("blas" and "nchw", the GPU's layout, take SGEMV for one image
# and SGEMM for more, which sum apart, as cuBLAS does).
DIRECT_KERNELS = [k for k in KERNELS if k not in ("blas", "nchw")]


@pytest.mark.parametrize("kernels", DIRECT_KERNELS)
@pytest.mark.parametrize("inputs,units", [(1, 10), (7, 17), (400, 120), (131, 130), (3136, 40)])
def test_dense_rows_are_the_same_bits_in_any_batch(inputs, units, kernels):
    # A row's sums take the same order whatever tile, pass or thread split computes them:
    # alone, in a batch of few images (runs apart) or of many (runs one after another).
    x = RNG.standard_normal((37, inputs)).astype(np.float32)
    w = (RNG.standard_normal((inputs, units)) / math.sqrt(inputs)).astype(np.float32)
    b = RNG.standard_normal(units).astype(np.float32)
    layers = [layer("dense", units=units, activation="relu", weights=w, bias=b)]
    alone = np.concatenate([run(layers, x[i : i + 1], kernels=kernels) for i in range(37)])
    for n, threads in [(2, 1), (3, 2), (4, 1), (16, 2), (37, 1), (37, 2)]:
        np.testing.assert_array_equal(run(layers, x[:n], kernels=kernels, threads=threads), alone[:n])


@pytest.mark.parametrize("kernels", DIRECT_KERNELS)
@pytest.mark.parametrize("name", ["lenet5", "lenet-keras", "lenet-tf"])
def test_shipped_models_answer_an_image_alone_as_in_a_batch(name, kernels):
    engine = lenet.Engine(lenet.shipped_weights(name), device="cpu", threads=2, cpu_kernels=kernels)
    x = RNG.random((20, 28, 28, 1), dtype=np.float32)
    alone = np.concatenate([engine.predict_proba(x[i : i + 1]) for i in range(20)])
    for n in (2, 3, 17, 20):
        np.testing.assert_array_equal(engine.predict_proba(x[:n]), alone[:n])
