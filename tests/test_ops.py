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
# Every CPU kernel set this machine runs (hand-written per instruction set, then
# the im2col + OpenBLAS reference): each op is checked on each.
KERNELS = _core.cpu_kernel_sets()


def tf_same(n, k, s):
    out = math.ceil(n / s)
    total = max((out - 1) * s + k - n, 0)
    return out, total // 2, total - total // 2


def ref_act(x, act):
    return {"linear": lambda v: v, "relu": lambda v: np.maximum(v, 0), "tanh": np.tanh,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[act](x)


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
            patch = xp[:, ky:ky + oh * stride[0]:stride[0], kx:kx + ow * stride[1]:stride[1], :]
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
            win = x[:, max(y0, 0):min(y0 + k[0], h), max(x0, 0):min(x0 + k[1], wd), :].astype(np.float64)
            y[:, i, j] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return y


def layer(kind, **kw):
    l = _core.LayerSpec()
    l.kind = getattr(_core.LayerKind, kind)
    l.name = kw.pop("name", kind)
    l.keras_class = kind
    weights, bias = kw.pop("weights", None), kw.pop("bias", None)
    for k, v in kw.items():
        if k == "activation":
            v = getattr(_core.Act, v)
        if k == "flatten_order":
            v = getattr(_core.FlattenOrder, v)
        setattr(l, k, v)
    if weights is not None:
        l.set_weights(weights)
    if bias is not None:
        l.set_bias(bias)
    return l


def run(layers, x, threads=1, channels_first=False, kernels="auto"):
    hwc = x.shape[1:] if not channels_first else (x.shape[2], x.shape[3], x.shape[1])
    fmt = _core.DataFormat.channels_first if channels_first else _core.DataFormat.channels_last
    net = _core.Network(layers, tuple(int(v) for v in hwc), fmt, "test", classifier=False)
    ex = _core.Executor(net, "cpu", threads, cpu_kernels=kernels)
    return ex.run(np.ascontiguousarray(x, dtype=np.float32))


CONV_CASES = [
    # h, w, ci, co, kernel, stride, padding, act, bias
    (28, 28, 1, 6, (5, 5), (1, 1), "same", "relu", True),
    (14, 14, 6, 16, (5, 5), (1, 1), "valid", "relu", True),
    (28, 28, 1, 4, (3, 3), (2, 2), "same", "linear", True),     # odd total: extra pixel after
    (14, 14, 4, 5, (4, 4), (1, 1), "same", "tanh", False),      # even kernel: (1, 2) padding
    (9, 7, 3, 2, (2, 3), (2, 1), "same", "sigmoid", True),      # rectangular everything
    (10, 10, 2, 3, (1, 1), (1, 1), "valid", "relu", True),      # 1x1: GEMM without im2col
    (5, 5, 1, 2, (5, 5), (1, 1), "valid", "linear", True),      # kernel as large as the input
    (8, 8, 3, 7, (3, 3), (3, 3), "valid", "relu", False),
    (1, 1, 5, 4, (3, 3), (1, 1), "same", "linear", True),       # all padding but the centre
    (14, 14, 32, 64, (5, 5), (1, 1), "same", "relu", True),     # lenet-tf conv2: 4 channel blocks
    (31, 30, 3, 33, (3, 3), (1, 1), "valid", "relu", True),     # 3 blocks, the last 1 channel; uneven tiles
    (6, 17, 2, 70, (2, 2), (1, 2), "same", "linear", True),     # 4 blocks + 1
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,co,k,s,pad,act,bias", CONV_CASES)
@pytest.mark.parametrize("n", [1, 3, 70])
def test_conv2d(h, w, ci, co, k, s, pad, act, bias, n, kernels):
    x = RNG.standard_normal((n, h, w, ci)).astype(np.float32)
    # Scaled as trained weights are (He), so outputs stay O(1) for every fan-in.
    wt = (RNG.standard_normal((k[0], k[1], ci, co)) / math.sqrt(k[0] * k[1] * ci)).astype(np.float32)
    b = RNG.standard_normal(co).astype(np.float32) if bias else None
    got = run([layer("conv2d", kernel=k, strides=s, same_padding=pad == "same", filters=co, activation=act,
                     weights=wt, bias=b)], x, threads=2, kernels=kernels)
    want = ref_conv(x, wt, b, s, pad, act).reshape(n, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


POOL_CASES = [
    (28, 28, 6, (2, 2), (2, 2), "valid"),
    (14, 14, 5, (3, 3), (2, 2), "same"),
    (7, 7, 5, (2, 2), (2, 2), "same"),        # odd input: last window half padding
    (9, 6, 2, (3, 2), (1, 2), "same"),
    (5, 5, 3, (5, 5), (1, 1), "same"),        # windows mostly padding
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
    got = run([layer("flatten"), layer("dense", units=units, activation=act, weights=w, bias=b)], x, threads=1,
              kernels=kernels)
    want = ref_act(x.reshape(n, 37).astype(np.float64) @ w + b, act)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


FUSED_CASES = [
    # h, w, ci, co, kernel, padding, act: a convolution then a 2x2 / 2 max pool,
    # which the direct kernels run as one (odd conv outputs drop their last row/column)
    (28, 28, 1, 6, 5, "same", "relu"),
    (14, 14, 6, 16, 5, "valid", "relu"),      # 10x10 -> 5x5
    (13, 11, 3, 5, 3, "valid", "tanh"),       # 11x9 -> 5x4
    (28, 28, 1, 32, 5, "same", "sigmoid"),
    (16, 16, 32, 70, 3, "same", "linear"),    # 4 blocks + 1, big enough to split
    (3, 3, 2, 4, 2, "valid", "relu"),         # 2x2 -> 1x1
    # one input channel: the kernel with vectors along the rows
    (13, 11, 1, 5, 3, "valid", "relu"),       # 11x9 -> 5x4
    (40, 70, 1, 9, 5, "same", "tanh"),        # several row chunks, channels in 2 groups
    (64, 64, 1, 32, 5, "same", "relu"),       # big enough to split rows over threads
    (2, 2, 1, 1, 1, "valid", "linear"),
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("h,w,ci,co,k,pad,act", FUSED_CASES)
@pytest.mark.parametrize("n,threads", [(1, 1), (1, 2), (5, 2)])
def test_conv_then_max_pool(h, w, ci, co, k, pad, act, n, threads, kernels):
    x = RNG.standard_normal((n, h, w, ci)).astype(np.float32)
    wt = (RNG.standard_normal((k, k, ci, co)) / math.sqrt(k * k * ci)).astype(np.float32)
    b = RNG.standard_normal(co).astype(np.float32)
    got = run([layer("conv2d", kernel=(k, k), same_padding=pad == "same", filters=co, activation=act, weights=wt,
                     bias=b),
               layer("max_pool2d", kernel=(2, 2), strides=(2, 2))], x, threads=threads, kernels=kernels)
    conv = ref_conv(x, wt, b, (1, 1), pad, act)
    want = ref_pool(conv, (2, 2), (2, 2), "valid", "max").reshape(n, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("threads", [2, 3])
def test_large_single_image_ops_split_over_threads(threads, kernels):
    # One image, threads idle: big kernels split their work (by channel slices for
    # a dense layer, by rows for a convolution); the answer must not change.
    x = RNG.standard_normal((1, 1, 1, 2100)).astype(np.float32)
    w = (RNG.standard_normal((2100, 1100)) / 45).astype(np.float32)
    b = RNG.standard_normal(1100).astype(np.float32)
    got = run([layer("flatten"), layer("dense", units=1100, activation="relu", weights=w, bias=b)], x,
              threads=threads, kernels=kernels)
    np.testing.assert_allclose(got, ref_act(x.reshape(1, -1).astype(np.float64) @ w + b, "relu"), atol=2e-5)
    x = RNG.standard_normal((1, 15, 15, 32)).astype(np.float32)
    w = (RNG.standard_normal((5, 5, 32, 40)) / 28).astype(np.float32)
    got = run([layer("conv2d", kernel=(5, 5), same_padding=True, filters=40, weights=w)], x, threads=threads,
              kernels=kernels)
    want = ref_conv(x, w, None, (1, 1), "same", "linear").reshape(1, -1)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("order", ["hwc", "chw"])
def test_flatten_row_order(order):
    # The Dense rows of a file follow the Flatten's order; the engine runs NHWC.
    x = RNG.standard_normal((4, 3, 5, 2)).astype(np.float32)
    w = RNG.standard_normal((30, 6)).astype(np.float32)
    got = run([layer("flatten", flatten_order=order), layer("dense", units=6, weights=w)], x)
    feats = x if order == "hwc" else x.transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, feats.reshape(4, 30) @ w, atol=1e-5, rtol=1e-5)


def test_softmax_activation_rescaling_padding():
    x = RNG.uniform(0, 255, (3, 4, 5, 2)).astype(np.float32)
    got = run([layer("rescaling", scale=1 / 255, offset=-0.5), layer("zero_pad2d", pad=(1, 2, 0, 3)),
               layer("activation", activation="softmax")], x)
    v = np.pad(x / 255 - 0.5, ((0, 0), (1, 2), (0, 3), (0, 0)))
    e = np.exp(v - v.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (e / e.sum(-1, keepdims=True)).reshape(3, -1), atol=1e-6)


def test_zero_padding_folds_into_conv():
    x = RNG.standard_normal((2, 28, 28, 1)).astype(np.float32)
    w = RNG.standard_normal((5, 5, 1, 3)).astype(np.float32)
    layers = [layer("zero_pad2d", pad=(2, 2, 2, 2)), layer("conv2d", kernel=(5, 5), filters=3, weights=w)]
    got = run(layers, x)
    want = ref_conv(np.pad(x, ((0, 0), (2, 2), (2, 2), (0, 0))), w, None, (1, 1), "valid", "linear")
    np.testing.assert_allclose(got, want.reshape(2, -1), atol=2e-5, rtol=1e-5)


def test_channels_first_input_is_transposed():
    x = RNG.standard_normal((3, 2, 6, 6)).astype(np.float32)   # (n, C, H, W)
    got = run([layer("max_pool2d", kernel=(2, 2), strides=(2, 2))], x, channels_first=True)
    want = ref_pool(x.transpose(0, 2, 3, 1), (2, 2), (2, 2), "valid", "max")
    np.testing.assert_allclose(got, want.reshape(3, -1))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_batch_split_matches_single_images(threads):
    x = RNG.standard_normal((131, 12, 12, 2)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 2, 4)).astype(np.float32)
    layers = [layer("conv2d", kernel=(3, 3), filters=4, activation="relu", weights=w)]
    whole = run(layers, x, threads=threads)
    one = np.concatenate([run(layers, x[i:i + 1]) for i in range(0, 131, 13)])
    np.testing.assert_allclose(whole[::13], one, atol=1e-6, rtol=1e-6)


def test_cpu_kernel_sets():
    assert KERNELS[-1] == "blas" and "generic" in KERNELS
    assert lenet.cpu_kernel_sets() == KERNELS
    with pytest.raises(lenet.InputError, match="not available"):
        run([layer("max_pool2d", kernel=(2, 2), strides=(2, 2))], np.zeros((1, 4, 4, 1), np.float32),
            kernels="neon")


def test_a_network_that_computes_nothing_is_refused():
    with pytest.raises(lenet.UnsupportedModelError, match="computes nothing"):
        run([layer("flatten")], np.zeros((1, 2, 2, 1), np.float32))
