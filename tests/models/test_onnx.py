"""ONNX files against ONNX Runtime (issue 35).

* The zoo (tests/data/onnx, written by tools/make-onnx-zoo with torch.onnx.export):
  the PyTorch example net, LeNet-5s, MLPs, a batch-normalized CNN with the input
  normalised in the graph, GELU, global pooling with a residual Add and a Concat, a
  second output, no batch axis, a fixed batch, three 32x32 channels.
* Every operator the loader claims, built with onnx.helper at every opset where its
  form changes (attributes becoming inputs, new defaults), from 7 to the newest that
  ONNX Runtime runs.
* Refusals: an unknown operator, another domain, no onnx package (UnsupportedModelError
  naming the operator, the node and the file; quantized graphs: test_onnx_quantized.py);
  corrupt and mutated files (ModelFileError or UnsupportedModelError, never anything else).

Parity: ``predict`` within 1e-5 of ONNX Runtime on the same array, the same argmax,
on the CPU's own kernels, the BLAS path and the GPU's NCHW layout; for the zoo's quantized
files, of the graph's own arithmetic (onnx_reference.graph_outputs: ONNX Runtime's integer
kernels give another answer on CPUs without VNNI, issue 61).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import onnx_reference  # noqa: E402
from keras_fixtures import decisive_rows, load_mnist_test  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lenet  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "onnx"
ZOO = sorted(DATA.glob("*.onnx"))
TOL = 1e-5
KERNELS = ["auto", "blas", "nchw"]
RNG = np.random.default_rng(35)


def ort_run(path, x):
    s = onnx_reference.session(path)
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def assert_parity(got, want, what):
    assert got.shape == want.shape, f"{what}: shape {got.shape}, ONNX Runtime {want.shape}"
    diff = float(np.abs(got.astype(np.float64) - want).max())
    assert diff <= TOL, f"{what}: max abs difference {diff:.3g}"
    if want.ndim == 2 and want.shape[1] > 1:
        decisive = decisive_rows(want, TOL)
        assert (got.argmax(1) == want.argmax(1))[decisive].all(), f"{what}: argmax differs"


def zoo_inputs(shape, nhwc=False):
    """MNIST test digits (/255) in the model's form, then random rows."""
    per = tuple(shape)
    digits = load_mnist_test(32)
    n_rand = 32
    rand = RNG.random((n_rand,) + per, dtype=np.float32)
    if digits is None:
        return rand
    d = digits[0].astype(np.float32) / 255.0
    if per[-2:] == (32, 32):
        d = np.pad(d, ((0, 0), (2, 2), (2, 2)))
    if nhwc:
        d = np.broadcast_to(d[..., None], (len(d),) + d.shape[1:] + (per[-1],))
    else:
        d = np.broadcast_to(d[:, None], (len(d), per[0]) + d.shape[1:]) if len(per) == 3 else d.reshape(len(d), -1)
    return np.concatenate([d.reshape((len(d),) + per), rand]).astype(np.float32)


@pytest.mark.parametrize("path", ZOO, ids=[p.stem for p in ZOO])
def test_zoo_against_onnx_runtime(path):
    sess = onnx_reference.session(path)
    dims = sess.get_inputs()[0].shape
    for kernels in KERNELS:
        eng = lenet.Engine(path, device="cpu", cpu_kernels=kernels)
        per = eng.input_shape[1:]
        x = zoo_inputs(per, eng.model.spec.extra["input_layout"] == "nhwc")
        if onnx_reference.is_quantized(path):  # the graph's arithmetic, one sample at a time
            want = onnx_reference.graph_outputs(path, x, like=eng.predict(x), tol=TOL).astype(np.float32)
        elif not eng.model.spec.extra["batch_axis"]:  # no batch axis: ONNX Runtime takes one sample at a time
            want = np.stack([ort_run(path, s) for s in x])
        elif all(isinstance(d, int) for d in dims):  # a fixed batch
            x = x[: (len(x) // dims[0]) * dims[0]]
            want = np.concatenate([ort_run(path, x[i : i + dims[0]]) for i in range(0, len(x), dims[0])])
        else:
            want = ort_run(path, x)
        assert_parity(eng.predict(x), want, f"{path.name} ({kernels})")


def test_zoo_models_classify_digits_end_to_end(tmp_path):
    """infer on 28x28 digits and lenet-cli --weights model.onnx: the model's own input form."""
    digits = load_mnist_test(8)
    if digits is None:
        pytest.skip("MNIST test set not found")
    eng = lenet.Engine(DATA / "example_net.onnx", device="cpu")
    results = eng.infer(digits[0], mode="mnist")
    got = np.stack([r.probabilities for r in results])
    np.testing.assert_allclose(got, eng.predict_proba(digits[0][:, None].astype(np.float32) / 255), atol=1e-6)
    import cv2

    png = tmp_path / "digit.png"
    cv2.imwrite(str(png), digits[0][0])
    out = subprocess.run(
        [sys.executable, "-m", "lenet", "--weights", str(DATA / "mlp.onnx"), "--device", "cpu", str(png)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    mlp = lenet.Engine(DATA / "mlp.onnx", device="cpu").infer(digits[0][0], mode="mnist")
    assert out.stdout.startswith(f"{png}: {mlp.digit} "), out.stdout


def test_loader_decides_by_content_not_extension(tmp_path):
    p = tmp_path / "model.bin"
    p.write_bytes((DATA / "mlp.onnx").read_bytes())
    assert lenet.Engine(p, device="cpu").model.spec.extra["format"] == "onnx"


# ------------------------------------------------------------------ every operator, every opset

ORT_MAX = 21  # the newest opset every ONNX Runtime >= 1.16 runs


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a, np.float32), name)


def _model(nodes, inits, in_shape, out_name, opset, out_shape=None):
    g = helper.make_graph(
        nodes,
        "case",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_shape)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="onnx.helper")
    m.ir_version = 7 if opset < 15 else 8
    return m


def _w(*shape, scale=None):
    fan = int(np.prod(shape[1:])) or 1
    return (RNG.standard_normal(shape) * (scale or 1 / np.sqrt(fan))).astype(np.float32)


def _ints_input(name, v):
    return numpy_helper.from_array(np.asarray(v, np.int64), name)


def c_conv(opset, **kw):
    group = kw.pop("group", 1)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["y"], group=group, **kw)]
    return nodes, [_init("W", _w(8, 4 // group, 3, 3)), _init("B", _w(8, scale=0.1))], ["N", 4, 9, 8]


def c_gemm(opset):
    nodes = [helper.make_node("Gemm", ["x", "B", "C"], ["y"], transB=1, alpha=0.5, beta=2.0)]
    return nodes, [_init("B", _w(10, 12)), _init("C", _w(10, scale=0.1))], ["N", 12]


def c_matmul_add(opset):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    return nodes, [_init("W", _w(12, 10)), _init("b", _w(10, scale=0.1))], ["N", 12]


def c_act(op, **attrs):
    def build(opset):
        return [helper.make_node(op, ["x"], ["y"], **attrs)], [], ["N", 3, 5, 5]

    return build


def c_clip(opset):
    if opset < 11:
        return [helper.make_node("Clip", ["x"], ["y"], min=0.0, max=6.0)], [], ["N", 3, 5, 5]
    return (
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [_init("lo", np.float32(0)), _init("hi", np.float32(6))],
        ["N", 3, 5, 5],
    )


def c_softmax(op):
    def build(opset):
        return [helper.make_node(op, ["x"], ["y"])], [], ["N", 10]

    return build


def c_pool(op, **attrs):
    def build(opset):
        return [helper.make_node(op, ["x"], ["y"], **attrs)], [], ["N", 3, 9, 8]

    return build


def c_flatten_chain(opset):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the flatten torch writes for x.view(x.size(0), -1)."""
    unsq = (
        helper.make_node("Unsqueeze", ["n"], ["n1"], axes=[0])
        if opset < 13
        else helper.make_node("Unsqueeze", ["n", "ax"], ["n1"])
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        unsq,
        helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "W", "C"], ["y"], transB=1),
    ]
    inits = [
        _ints_input("i0", np.int64(0)),
        _ints_input("m1", [-1]),
        _init("W", _w(10, 60)),
        _init("C", _w(10, scale=0.1)),
    ]
    if opset >= 13:
        inits.append(_ints_input("ax", [0]))
    return nodes, inits, ["N", 3, 5, 4]


def c_flatten(opset):
    return (
        [helper.make_node("Flatten", ["x"], ["f"], axis=1), helper.make_node("Gemm", ["f", "W", "C"], ["y"])],
        [_init("W", _w(60, 10)), _init("C", _w(10, scale=0.1))],
        ["N", 3, 5, 4],
    )


def c_bn(opset):
    c = 4
    attrs = {"epsilon": 1e-5}
    if opset < 9:
        attrs["spatial"] = 1
    mean = RNG.normal(0, 50, c)
    var = RNG.uniform(1e-3, 1e3, c)
    return (
        [helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["y"], **attrs)],
        [_init("g", RNG.uniform(0.5, 2, c)), _init("b", RNG.normal(0, 1, c)), _init("m", mean), _init("v", var)],
        ["N", c, 5, 5],
    )


def c_norm_in_graph(opset):
    """(x - mean) / std per channel, * and + scalars: the normalisation exporters keep in the graph."""
    nodes = [
        helper.make_node("Sub", ["x", "mu"], ["a"]),
        helper.make_node("Div", ["a", "sd"], ["b"]),
        helper.make_node("Mul", ["b", "k"], ["c"]),
        helper.make_node("Add", ["c", "o"], ["y"]),
    ]
    return (
        nodes,
        [
            _init("mu", [[[0.485]], [[0.456]], [[0.406]]]),
            _init("sd", [[[0.229]], [[0.224]], [[0.225]]]),
            _init("k", np.float32(2.0)),
            _init("o", np.float32(-1.0)),
        ],
        ["N", 3, 5, 5],
    )


def c_branches(opset):
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Conv", ["r", "W2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "b"], ["s"]),
        helper.make_node("Concat", ["s", "r"], ["y"], axis=1),
    ]
    return nodes, [_init("W1", _w(4, 2, 3, 3)), _init("W2", _w(4, 4, 3, 3))], ["N", 2, 6, 6]


def c_pad(opset):
    if opset < 11:
        return [helper.make_node("Pad", ["x"], ["y"], pads=[0, 0, 2, 1, 0, 0, 0, 3])], [], ["N", 2, 5, 5]
    return (
        [helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")],
        [_ints_input("p", [0, 0, 2, 1, 0, 0, 0, 3])],
        ["N", 2, 5, 5],
    )


def c_dropout_identity_cast(opset):
    nodes = [
        helper.make_node("Dropout", ["x"], ["d"]),
        helper.make_node("Identity", ["d"], ["i"]),
        helper.make_node("Cast", ["i"], ["c"], to=TensorProto.FLOAT),
        helper.make_node("Tanh", ["c"], ["y"]),
    ]
    return nodes, [], ["N", 7]


def c_nhwc(opset):
    """tf2onnx's form of a Keras NHWC model: Transpose in, Conv, Transpose back, Reshape, MatMul + Add."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["t", "W", "B"], ["c"], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Transpose", ["r"], ["h"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["h", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "D"], ["m"]),
        helper.make_node("Add", ["m", "db"], ["y"]),
    ]
    return (
        nodes,
        [
            _init("W", _w(4, 1, 3, 3)),
            _init("B", _w(4, scale=0.1)),
            _ints_input("shape", [-1, 144]),
            _init("D", _w(144, 10)),
            _init("db", _w(10, scale=0.1)),
        ],
        ["N", 8, 8, 1],
    )


def c_squeeze(opset):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"])]
    if opset < 13:
        nodes.append(helper.make_node("Squeeze", ["g"], ["y"], axes=[2, 3]))
        return nodes, [], ["N", 5, 4, 4]
    nodes.append(helper.make_node("Squeeze", ["g", "ax"], ["y"]))
    return nodes, [_ints_input("ax", [2, 3])], ["N", 5, 4, 4]


def c_constant_node(opset):
    k = helper.make_tensor("k", TensorProto.FLOAT, [1], [0.5])
    nodes = [helper.make_node("Constant", [], ["c"], value=k), helper.make_node("Mul", ["x", "c"], ["y"])]
    return nodes, [], ["N", 6]


def c_gelu_erf(opset):
    nodes = [
        helper.make_node("Div", ["x", "r2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]),
        helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    return (
        nodes,
        [_init("r2", np.float32(np.sqrt(2))), _init("one", np.float32(1)), _init("half", np.float32(0.5))],
        ["N", 9],
    )


def c_gelu(opset):
    return [helper.make_node("Gelu", ["x"], ["y"])], [], ["N", 9]


OPSETS = [7, 9, 11, 13, 17, ORT_MAX]
CEIL_OPSETS = [o for o in OPSETS if o >= 10]  # ceil_mode is an attribute from opset 10
CASES = {
    "Conv_pads_strides_group": (lambda o: c_conv(o, pads=[1, 0, 2, 1], strides=[2, 1], group=2), OPSETS),
    "Conv_same_upper": (lambda o: c_conv(o, auto_pad="SAME_UPPER", strides=[2, 2]), OPSETS),
    "Conv_same_lower": (lambda o: c_conv(o, auto_pad="SAME_LOWER", strides=[2, 2]), OPSETS),
    "Conv_dilated": (lambda o: c_conv(o, dilations=[2, 2]), OPSETS),
    "Gemm_transB_alpha_beta": (c_gemm, OPSETS),
    "MatMul_Add": (c_matmul_add, OPSETS),
    "Relu": (c_act("Relu"), OPSETS),
    "Tanh": (c_act("Tanh"), OPSETS),
    "Sigmoid": (c_act("Sigmoid"), OPSETS),
    "LeakyRelu": (c_act("LeakyRelu", alpha=0.2), OPSETS),
    "Elu": (c_act("Elu", alpha=0.7), OPSETS),
    "Softplus": (c_act("Softplus"), OPSETS),
    "Softsign": (c_act("Softsign"), OPSETS),
    "HardSigmoid": (c_act("HardSigmoid", alpha=0.3, beta=0.4), OPSETS),
    "Clip_relu6": (c_clip, OPSETS),
    "Softmax": (c_softmax("Softmax"), OPSETS),
    "LogSoftmax": (c_softmax("LogSoftmax"), OPSETS),
    "MaxPool_k2": (c_pool("MaxPool", kernel_shape=[2, 2], strides=[2, 2]), OPSETS),
    "MaxPool_k3s2_same": (c_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), OPSETS),
    "MaxPool_tf_pads": (c_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 1]), OPSETS),
    "AveragePool_pads_included": (
        c_pool("AveragePool", kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        OPSETS,
    ),
    "AveragePool_pads_excluded": (
        c_pool("AveragePool", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 0]),
        OPSETS,
    ),
    # Explicit pads and ceil_mode's partial windows (issue 43): Chainer's cover_all writes [0, 0, 1, 1]
    "MaxPool_asymmetric_pads": (c_pool("MaxPool", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]), OPSETS),
    "MaxPool_pads_k3s1": (c_pool("MaxPool", kernel_shape=[3, 3], pads=[2, 0, 0, 1]), OPSETS),
    "MaxPool_ceil_mode": (c_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), CEIL_OPSETS),
    "MaxPool_ceil_mode_pads": (
        c_pool("MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        CEIL_OPSETS,
    ),
    "AveragePool_asymmetric_pads_excluded": (c_pool("AveragePool", kernel_shape=[3, 3], pads=[2, 0, 0, 1]), OPSETS),
    "AveragePool_ceil_mode": (c_pool("AveragePool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1), CEIL_OPSETS),
    "AveragePool_ceil_mode_pads_included": (
        c_pool("AveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0], count_include_pad=1, ceil_mode=1),
        CEIL_OPSETS,
    ),
    "GlobalAveragePool": (c_pool("GlobalAveragePool"), OPSETS),
    "GlobalMaxPool": (c_pool("GlobalMaxPool"), OPSETS),
    "Flatten_Gemm": (c_flatten, OPSETS),
    "Shape_Gather_Unsqueeze_Concat_Reshape": (c_flatten_chain, OPSETS),
    "BatchNormalization_trained_stats": (c_bn, OPSETS),
    "Sub_Div_Mul_Add_constants": (c_norm_in_graph, OPSETS),
    "Add_Concat_branches": (c_branches, OPSETS),
    "Pad": (c_pad, OPSETS),
    "Dropout_Identity_Cast": (c_dropout_identity_cast, [o for o in OPSETS if o >= 9]),
    "Transpose_MatMul_nhwc": (c_nhwc, OPSETS),
    "GlobalAveragePool_Squeeze": (c_squeeze, OPSETS),
    "Constant": (c_constant_node, [o for o in OPSETS if o >= 9]),
    "Gelu_as_Erf": (c_gelu_erf, [o for o in OPSETS if o >= 9]),
    "Gelu": (c_gelu, [20, ORT_MAX]),
}


# Normalisations see pixels in [0, 1] (merged into one affine, their rounding grows with |x|).
PIXELS = {"Sub_Div_Mul_Add_constants"}


@pytest.mark.parametrize("case", list(CASES))
def test_every_operator_at_every_opset(case, tmp_path):
    build, opsets = CASES[case]
    for opset in opsets:
        nodes, inits, shape = build(opset)
        m = _model(nodes, inits, shape, nodes[-1].output[0], opset)
        p = tmp_path / f"{case}_{opset}.onnx"
        onnx.save(m, str(p))
        x = RNG.standard_normal((5,) + tuple(shape[1:])).astype(np.float32) * 3
        if case in PIXELS:
            x = RNG.random((5,) + tuple(shape[1:]), dtype=np.float32)
        want = ort_run(p, x).reshape(5, -1)
        for kernels in KERNELS:
            got = lenet.Engine(p, device="cpu", cpu_kernels=kernels).predict(x).reshape(5, -1)
            assert_parity(got, want, f"{case} opset {opset} ({kernels})")


# ------------------------------------------------------------------ refusals


def _save(tmp_path, nodes, inits=(), shape=("N", 4), opset=13, name="m.onnx", domain_opsets=()):
    m = _model(nodes, list(inits), list(shape), nodes[-1].output[0], opset)
    for d, v in domain_opsets:
        m.opset_import.append(helper.make_opsetid(d, v))
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


def test_an_unknown_operator_is_refused_naming_it_the_node_and_the_file(tmp_path):
    p = _save(tmp_path, [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sin", ["r"], ["y"], name="sine")])
    with pytest.raises(lenet.UnsupportedModelError) as e:
        lenet.Engine(p, device="cpu")
    for frag in ("Sin", "'sine'", str(p)):
        assert frag in str(e.value)


def test_another_domain_is_refused(tmp_path):
    p = _save(
        tmp_path,
        [helper.make_node("FusedGemm", ["x"], ["y"], domain="com.microsoft", name="fg")],
        domain_opsets=[("com.microsoft", 1)],
    )
    with pytest.raises(lenet.UnsupportedModelError, match="com.microsoft"):
        lenet.Engine(p, device="cpu")


def test_an_opset_too_old_is_refused(tmp_path):
    p = _save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], opset=6)
    with pytest.raises(lenet.UnsupportedModelError, match="opset 6"):
        lenet.Engine(p, device="cpu")


def test_without_the_onnx_package_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(lenet.UnsupportedModelError, match=r'pip install "lenet\[onnx\]"'):
        lenet.Engine(DATA / "mlp.onnx", device="cpu")


def test_a_corrupt_onnx_file_is_a_model_file_error(tmp_path):
    p = tmp_path / "broken.onnx"
    p.write_bytes((DATA / "mlp.onnx").read_bytes()[:1000])
    with pytest.raises(lenet.ModelFileError):
        lenet.Engine(p, device="cpu")


# ------------------------------------------------------------------ fuzzing (seeded, bounded)


def _mutants(seed_bytes, count, rng):
    """Byte-level mutants of a file: flips, truncations, splices of its own bytes."""
    for _ in range(count):
        b = bytearray(seed_bytes)
        for _ in range(int(rng.integers(1, 8))):
            kind = rng.integers(3)
            i = int(rng.integers(len(b)))
            if kind == 0:
                b[i] = int(rng.integers(256))
            elif kind == 1:
                del b[i : i + int(rng.integers(1, 64))]
            else:
                j = int(rng.integers(len(b)))
                b[i:i] = b[j : j + int(rng.integers(1, 64))]
        yield bytes(b)


def _structural_mutants(model, count, rng):
    """Model-level mutants: attributes, dims and initializers set to absurd values."""
    values = [0, -1, 1, 2, 3, 1000, 2**31 - 1, -(2**31), 2**40]
    for _ in range(count):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for _ in range(int(rng.integers(1, 4))):
            what = rng.integers(6)
            nodes = m.graph.node
            if what == 0 and nodes:
                n = nodes[int(rng.integers(len(nodes)))]
                ints = [a for a in n.attribute if a.ints or a.type == onnx.AttributeProto.INT]
                if ints:
                    a = ints[int(rng.integers(len(ints)))]
                    if a.ints:
                        a.ints[int(rng.integers(len(a.ints)))] = int(rng.choice(values))
                    else:
                        a.i = int(rng.choice(values))
            elif what == 1 and m.graph.initializer:
                t = m.graph.initializer[int(rng.integers(len(m.graph.initializer)))]
                if t.dims:
                    t.dims[int(rng.integers(len(t.dims)))] = int(rng.choice(values[:7]))
            elif what == 2 and nodes:
                n = nodes[int(rng.integers(len(nodes)))]
                if n.input:
                    n.input[int(rng.integers(len(n.input)))] = str(rng.choice(["", "x", "nothing", n.output[0]]))
            elif what == 3:
                d = m.graph.input[0].type.tensor_type.shape.dim
                if d:
                    d[int(rng.integers(len(d)))].dim_value = int(rng.choice(values[:7]))
            elif what == 4:  # the preprocessing a file records (issue 43)
                del m.metadata_props[:]
                key = str(rng.choice(["lenet_input_scale", "lenet_mean", "lenet_std"]))
                value = str(rng.choice(["", "x", "1e999", "-1", "0", "0.5,0.5,0.5,0.5,0.5", "nan", "1,2,3", "0.3"]))
                m.metadata_props.append(onnx.StringStringEntryProto(key=key, value=value))
            elif what == 5:  # an axis of the input made symbolic, or the input's rank changed
                d = m.graph.input[0].type.tensor_type.shape.dim
                if d and rng.integers(2):
                    d[int(rng.integers(len(d)))].dim_param = "s"
                elif d:
                    del d[int(rng.integers(len(d)))]
        yield m.SerializeToString()


@pytest.mark.parametrize(
    "seed",
    ["bn_cnn", "example_net_opset9", "no_batch_axis", "gap_residual", "dynamo_no_batch", "tf2onnx_nhwc"]
    + ["flatten_first_softmax", "normalized_half_recorded"],
)
def test_fuzzed_onnx_files_raise_only_lenet_errors(seed, tmp_path):
    """Each mutant loads (and then predicts) or raises a lenet.Error; never another exception or a crash."""
    rng = np.random.default_rng(sum(seed.encode()))
    data = (DATA / f"{seed}.onnx").read_bytes()
    model = onnx.load_model_from_string(data)
    p = tmp_path / "m.onnx"
    outcomes = {"loaded": 0, "refused": 0}
    for blob in list(_mutants(data, 40, rng)) + list(_structural_mutants(model, 60, rng)):
        p.write_bytes(blob)
        try:
            eng = lenet.Engine(p, device="cpu")
        except lenet.Error:
            outcomes["refused"] += 1
            continue
        eng.predict(np.zeros((2,) + eng.input_shape[1:], np.float32))
        try:
            shape = eng.image_shape
        except lenet.InputError:  # not an image model: predict serves it
            shape = None
        if shape is not None:
            eng.infer(np.zeros(shape, np.uint8), mode="mnist")
        outcomes["loaded"] += 1
    assert outcomes["refused"] > 0


@pytest.mark.requires_cuda
@pytest.mark.parametrize("path", ZOO, ids=[p.stem for p in ZOO])
def test_zoo_on_the_gpu(path):
    """The same files on the CUDA backend (cuDNN's CUDNN_SOFTMAX_LOG for LogSoftmax included)."""
    cpu = lenet.Engine(path, device="cpu")
    x = zoo_inputs(cpu.input_shape[1:], cpu.model.spec.extra["input_layout"] == "nhwc")
    assert_parity(
        lenet.Engine(path, device="cuda").predict(x), cpu.predict(x).astype(np.float64), f"{path.name} (cuda)"
    )
