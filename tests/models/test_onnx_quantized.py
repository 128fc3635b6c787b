"""Quantized ONNX graphs (issues 43, 61): ONNX Runtime's dynamic quantization (DynamicQuantizeLinear,
ConvInteger, MatMulInteger) and static QDQ graphs, against the graphs' own arithmetic.

* The yardstick is the exact integer arithmetic the ONNX operators define, evaluated in NumPy
  (quantized_reference.py), never a library whose kernels the CPU picks: ONNX Runtime's integer
  kernels on x86 CPUs without VNNI sum pairs of uint8 x int8 products into 16 bits and saturate
  (issue 61: 0.035 on a probability of ort_dynamic_quantized_per_channel on an AVX2 AMD EPYC).
* The zoo's quantized files (tools/make-onnx-zoo/make_quantized_zoo.py: ORT's quantizer on
  normalized_mnist): 500 MNIST test digits as the author fed them, one at a time (a dynamic
  quantization's scale is the whole tensor's: the author's one image), on every CPU kernel set
  this CPU has; probabilities within 1e-5, the same argmax.
* ONNX Runtime kept beside it: on each CPU its answers are one of two, the exact arithmetic
  (VNNI, ARM) or the pair-saturated one (VPMADDUBSW), and the test says which.
* A batch: each image is quantized on its own, as if called alone.
* The quantization itself, on edge cases (all zeros, all negative, ties at half a step,
  values beyond the range), for uint8 and int8: bit for bit the operators' integers.
* Refusals: the QOperator format, mismatched scales, an integer tensor read by a float
  operator or given as the output (UnsupportedModelError naming the node and the file).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
import onnx_reference  # noqa: E402
import quantized_reference  # noqa: E402
from keras_fixtures import load_mnist_test  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lenet  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "onnx"
QUANTIZED = ["ort_dynamic_quantized", "ort_dynamic_quantized_per_channel", "ort_qdq_static"]
MEAN, STD = 0.1307, 0.3081  # the nets' author's Normalize
TOL = 1e-5
RNG = np.random.default_rng(46)


def author_digits(n):
    digits = load_mnist_test(n)
    assert digits is not None, "the MNIST test set is needed"
    x = digits[0].astype(np.float32) / np.float32(255)
    return ((x - np.float32(MEAN)) / np.float32(STD))[:, None], digits[0]


def ort_one_by_one(path, x):
    s = onnx_reference.session(path)
    name = s.get_inputs()[0].name
    return np.concatenate([s.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])


@lru_cache(maxsize=None)
def graph_runs(name, n=500, saturate=False):
    """The graph's arithmetic on the first n digits (saturate: MatMulInteger's pairs saturated)."""
    x, _ = author_digits(n)
    return quantized_reference.run(DATA / f"{name}.onnx", x, saturate_matmul_integer=saturate)


@pytest.mark.parametrize("name", QUANTIZED)
@pytest.mark.parametrize("kernels", lenet.cpu_kernel_sets())
def test_quantized_zoo_is_the_graphs_arithmetic_on_500_digits(name, kernels):
    path = DATA / f"{name}.onnx"
    x, _ = author_digits(500)
    eng = lenet.Engine(path, device="cpu", cpu_kernels=kernels)
    got = eng.predict_proba(x)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=TOL)
    runs = graph_runs(name)
    want = np.exp(np.concatenate([r.outputs[0] for r in runs]))  # the net ends in LogSoftmax
    off = np.flatnonzero(np.abs(got - want).max(1) > TOL)
    # Only a float sum within float32's reach of a rounding boundary may round the other way in
    # lenet (ort_qdq_static: 1 digit of 500 on the avx2, generic and blas kernels, none on nchw).
    admitted = np.exp(onnx_reference.graph_outputs(path, x[off], like=np.log(got[off]))) if len(off) else want[off]
    assert len(off) <= 2, f"{name} ({kernels}): {len(off)} digits differ from the graph's arithmetic"
    assert np.abs(got[off] - admitted).max(initial=0) <= TOL, f"{name} ({kernels}): digits {off.tolist()} differ"
    want[off] = admitted
    assert np.abs(got - want).max() <= TOL, f"{name} ({kernels}): {np.abs(got - want).max():.3g}"
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("name", QUANTIZED)
def test_onnx_runtime_gives_the_exact_or_the_pair_saturated_arithmetic(name):
    """What lenet computes where ONNX Runtime's kernels saturate (docs/model-files.md): ONNX
    Runtime's answer on this CPU is the exact arithmetic (VNNI: VPDPBUSD sums four products in
    32 bits; ARM's dot products) or the arithmetic with MatMulInteger's pairs of uint8 x int8
    products saturated to int16 (VPMADDUBSW on AVX2 or AVX-512 without VNNI), and lenet's is
    the exact one on every CPU. The distance between the two is the tolerance the saturation
    implies: 0.035 on a probability of the per-channel file, 0 on the others (their weights'
    pairs stay within int16 on these digits)."""
    path = DATA / f"{name}.onnx"
    x, _ = author_digits(500)
    ort_p = np.exp(ort_one_by_one(path, x).astype(np.float64))
    exact = np.exp(onnx_reference.graph_outputs(path, x, like=np.log(ort_p)))
    saturated = np.exp(np.concatenate([r.outputs[0] for r in graph_runs(name, saturate=True)]))
    off_exact, off_saturated = np.abs(ort_p - exact).max(), np.abs(ort_p - saturated).max()
    assert min(off_exact, off_saturated) <= TOL, (
        f"{name}: ONNX Runtime {off_exact:.3g} from the exact arithmetic, {off_saturated:.3g} from the saturated one"
    )
    lenet_p = lenet.Engine(path, device="cpu").predict_proba(x)
    assert np.abs(lenet_p - exact).max() <= TOL
    if name == "ort_dynamic_quantized_per_channel":  # the file whose pairs do saturate on these digits
        assert sum(r.saturated for r in graph_runs(name, saturate=True)) > 0
        assert 0.02 < np.abs(saturated - exact).max() < 0.05


def test_the_reference_is_onnx_s_own_evaluator_on_the_dynamic_graphs():
    """A second reading of the operators: onnx.reference's ReferenceEvaluator (exact int32 integer
    operators, float32 elementwise) on 100 digits agrees with quantized_reference.py."""
    from onnx.reference import ReferenceEvaluator

    x, _ = author_digits(100)
    for name in QUANTIZED[:2]:
        ev = ReferenceEvaluator(str(DATA / f"{name}.onnx"))
        theirs = np.concatenate([ev.run(None, {"input": x[i : i + 1]})[0] for i in range(len(x))])
        ours = np.concatenate([r.outputs[0] for r in graph_runs(name)[:100]])
        assert np.abs(theirs - ours).max() <= 2e-6  # their LogSoftmax in float32


def test_the_reference_refuses_a_rounding_that_is_not_a_near_tie():
    """The yardstick can fail: one integer of a digit moved a step where no float sum put it
    near a boundary is not admitted, while the near ties' flips are."""
    path = DATA / "ort_qdq_static.onnx"
    x, _ = author_digits(20)
    runs = graph_runs("ort_qdq_static", 20)
    i = next(k for k, r in enumerate(runs) if r.near_ties)
    near = runs[i].near_ties[0]
    last = 6  # the graph's seventh rounding: the scores' QuantizeLinear, which reaches the output
    far = next((last, j) for j in range(10) if (last, j) not in runs[i].near_ties)
    moved = quantized_reference.evaluate(path, x[i], flip=far).outputs[0]
    assert np.abs(moved - runs[i].outputs[0]).max() > 1e-3
    admitted = onnx_reference.graph_outputs(path, x[i : i + 1], like=moved)
    np.testing.assert_array_equal(admitted[0], runs[i].outputs[0][0])
    tie = quantized_reference.evaluate(path, x[i], flip=near).outputs[0]
    if np.abs(tie - runs[i].outputs[0]).max() > TOL:
        np.testing.assert_array_equal(onnx_reference.graph_outputs(path, x[i : i + 1], like=tie)[0], tie[0])


def test_the_quantized_zoo_reads_digits_from_pngs_with_the_authors_preprocessing(tmp_path):
    import cv2

    path = DATA / "ort_dynamic_quantized.onnx"
    x, pixels = author_digits(8)
    pngs = []
    for i, img in enumerate(pixels):
        pngs.append(tmp_path / f"d{i}.png")
        cv2.imwrite(str(pngs[-1]), img)
    got = lenet.Engine(path, device="cpu", mean=MEAN, std=STD).infer(pngs, mode="mnist")
    want = np.exp(onnx_reference.graph_outputs(path, x))
    assert [r.digit for r in got] == list(want.argmax(1))
    assert max(abs(r.confidence - w.max()) for r, w in zip(got, want)) <= TOL


def _dynamic_model(tmp_path, batch):
    """x (batch, 6) -> DynamicQuantizeLinear -> MatMulInteger by int8 weights -> Cast -> Mul by
    the scales -> Add a bias: ORT's quantize_dynamic of a Linear layer, written by hand."""
    w = RNG.integers(-127, 128, (6, 4)).astype(np.int8)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quant"),
        helper.make_node("Mul", ["s", "w_scale"], ["scales"], name="scales"),
        helper.make_node("MatMulInteger", ["q", "w", "z", "w_zero"], ["sums"], name="matmul"),
        helper.make_node("Cast", ["sums"], ["sums_f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["sums_f", "scales"], ["scaled"], name="scale"),
        helper.make_node("Add", ["scaled", "bias"], ["y"], name="bias"),
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.int8(3), "w_zero"),
        numpy_helper.from_array(np.float32(0.0123), "w_scale"),
        numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "bias"),
    ]
    g = helper.make_graph(
        nodes,
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        inits,
    )
    p = tmp_path / "dyn.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(p))
    return p


def test_a_batch_is_quantized_image_by_image(tmp_path):
    """ONNX Runtime takes one scale for the whole tensor it is given; lenet one per sample, as
    the graph's author got calling it on each image: the rows differ in range on purpose."""
    p = _dynamic_model(tmp_path, "N")
    x = RNG.standard_normal((7, 6)).astype(np.float32) * np.float32([[0.01], [1], [100], [-5], [0], [3], [1e4]])
    x[4] = 0.0  # all zeros: a scale of 1
    want = onnx_reference.graph_outputs(p, x)
    together = onnx_reference.session(p).run(None, {"x": x})[0]
    assert np.abs(together - want).max() > 1e-3  # what a batched ONNX Runtime call does instead
    for kernels in ("auto", "nchw"):
        got = lenet.Engine(p, device="cpu", cpu_kernels=kernels).predict(x)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5 * np.abs(want).max())


def _qdq_model(tmp_path, dtype, scale, zero):
    """x -> QuantizeLinear -> DequantizeLinear (static scale and zero point of `dtype`)."""
    zin = ["z"] if zero is not None else []  # no zero point: uint8, 0
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s"] + zin, ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "s"] + zin, ["y"], name="dequant"),
    ]
    inits = [numpy_helper.from_array(np.float32(scale), "s")]
    if zero is not None:
        inits.append(numpy_helper.from_array(np.array(zero, dtype), "z"))
    g = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        inits,
    )
    p = tmp_path / f"qdq_{np.dtype(dtype).name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(p))
    return p


def _edge_rows(scale):
    """Ties at half a step (rounded to even), values past the range, zeros, negatives."""
    half = (np.arange(16, dtype=np.float32) - 8 + 0.5) * np.float32(scale)
    return np.stack(
        [
            half,
            half * 300,
            np.zeros(16, np.float32),
            -np.abs(RNG.standard_normal(16).astype(np.float32)),
            RNG.standard_normal(16).astype(np.float32) * 3,
            np.full(16, 0.7, np.float32),
        ]
    ).astype(np.float32)


@pytest.mark.parametrize("dtype,zero", [(np.uint8, 128), (np.uint8, 0), (np.uint8, None), (np.int8, 0), (np.int8, -5)])
def test_static_quantization_is_the_operators_bit_for_bit(tmp_path, dtype, zero):
    p = _qdq_model(tmp_path, dtype, 0.05, zero)
    x = _edge_rows(0.05)
    want = onnx_reference.graph_outputs(p, x).astype(np.float32)
    for kernels in ("auto", "nchw"):
        got = lenet.Engine(p, device="cpu", cpu_kernels=kernels).predict(x)
        np.testing.assert_array_equal(got, want)


def test_dynamic_quantization_is_the_operators_bit_for_bit(tmp_path):
    """DynamicQuantizeLinear -> DequantizeLinear, one row per call (its scale is the row's)."""
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant"),
    ]
    g = helper.make_graph(
        nodes,
        "dq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    p = tmp_path / "dq.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(p))
    x = np.concatenate([_edge_rows(0.05), np.abs(_edge_rows(0.01)), RNG.standard_normal((20, 16)).astype(np.float32)])
    want = onnx_reference.graph_outputs(p, x).astype(np.float32)
    for kernels in ("auto", "nchw"):
        np.testing.assert_array_equal(lenet.Engine(p, device="cpu", cpu_kernels=kernels).predict(x), want)


def _refused(tmp_path, nodes, inits, match):
    g = helper.make_graph(
        nodes,
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        inits,
    )
    p = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(p))
    with pytest.raises(lenet.UnsupportedModelError) as e:
        lenet.Engine(p, device="cpu")
    for frag in (match, str(p)):
        assert frag in str(e.value)
    return str(e.value)


def test_the_qoperator_format_is_refused_saying_what_to_do(tmp_path):
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
        helper.make_node("QLinearMatMul", ["q", "s", "z", "w", "s", "z", "s", "z"], ["y"], name="qmm"),
    ]
    inits = [
        numpy_helper.from_array(np.float32(0.1), "s"),
        numpy_helper.from_array(np.uint8(0), "z"),
        numpy_helper.from_array(np.ones((6, 2), np.uint8), "w"),
    ]
    msg = _refused(tmp_path, nodes, inits, "'qmm'")
    assert "QDQ" in msg and "quantize_dynamic" in msg


def test_integers_read_by_a_float_operator_are_refused_naming_them(tmp_path):
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quant"),
        helper.make_node("Relu", ["q"], ["y"], name="relu_of_ints"),
    ]
    msg = _refused(tmp_path, nodes, [], "'relu_of_ints'")
    assert "'q'" in msg and "values of a quantization" in msg


def test_integer_sums_as_the_output_are_refused(tmp_path):
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="quant"),
        helper.make_node("MatMulInteger", ["q", "w", "z"], ["y"], name="mm"),
    ]
    msg = _refused(tmp_path, nodes, [numpy_helper.from_array(np.ones((6, 3), np.int8), "w")], "'y'")
    assert "sums of a quantization" in msg


def test_a_dequantization_by_another_scale_is_refused(tmp_path):
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
        helper.make_node("DequantizeLinear", ["q", "s2", "z"], ["y"], name="dequant"),
    ]
    inits = [
        numpy_helper.from_array(np.float32(0.1), "s"),
        numpy_helper.from_array(np.float32(0.2), "s2"),
        numpy_helper.from_array(np.uint8(0), "z"),
    ]
    _refused(tmp_path, nodes, inits, "'dequant'")


@pytest.mark.parametrize("name", QUANTIZED)
def test_a_quantized_model_saved_as_lenet_gives_the_same_numbers(name, tmp_path):
    eng = lenet.Engine(DATA / f"{name}.onnx", device="cpu")
    eng.save(tmp_path / "q.lenet")
    x, _ = author_digits(50)
    np.testing.assert_array_equal(lenet.Engine(tmp_path / "q.lenet", device="cpu").predict(x), eng.predict(x))


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", QUANTIZED + ["dyn"])
def test_quantized_graphs_on_the_gpu(name, tmp_path):
    """The CUDA kernels (quantize and dequantize reduce each sample's range in a block) and
    cuDNN restricted to exact algorithms for integer sums: ONNX Runtime's numbers."""
    if name == "dyn":
        path = _dynamic_model(tmp_path, "N")
        x = RNG.standard_normal((300, 6)).astype(np.float32) * np.float32(10)
        want = onnx_reference.graph_outputs(path, x)
        got = lenet.Engine(path, device="cuda").predict(x)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5 * np.abs(want).max())
        return
    path = DATA / f"{name}.onnx"
    x, _ = author_digits(500)
    got = lenet.Engine(path, device="cuda").predict_proba(x)
    want = np.exp(onnx_reference.graph_outputs(path, x, like=np.log(got)))
    assert np.abs(got - want).max() <= TOL
    assert (got.argmax(1) == want.argmax(1)).all()
