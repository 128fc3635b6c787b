"""The core's Python surface: the stub mirrors the record and the module, the limits
are the core's, and the loader asks the core for weight shapes instead of computing
them."""

import ast
import pathlib

import numpy as np
import pytest

import lenet
from lenet import _core

STUB = pathlib.Path(lenet.__file__).with_name("_core.pyi")


def _stub_class(name):
    tree = ast.parse(STUB.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def test_the_stub_mirrors_the_layer_record():
    cls = _stub_class("LayerSpec")
    stub = [(a.target.id, ast.unparse(a.annotation)) for a in cls.body if isinstance(a, ast.AnnAssign)]
    assert stub == [(name, typ) for name, typ, _ in _core.LayerSpec.fields()]
    record = _core.LayerSpec()
    for name, typ, _ in _core.LayerSpec.fields():
        assert hasattr(record, name), name


def test_the_stub_names_every_public_name():
    tree = ast.parse(STUB.read_text())
    stubbed = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    stubbed |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and not n.target.id.startswith("_")}
    public = {n for n in dir(_core) if not n.startswith("_")}
    assert public == stubbed


def test_limits_are_the_cores():
    limits = _core.limits()
    assert limits["layers"] == 1000 and limits["kernel"] == 256 and limits["activation"] == 1 << 27
    l = _core.LayerSpec()
    l.kind, l.name, l.keras_class, l.inputs = "conv2d", "c", "Conv2D", [-1]
    l.kernel, l.filters = (limits["kernel"] + 1, 3), 4
    with pytest.raises(lenet.ModelFileError, match=f"kernel height = {limits['kernel'] + 1} is out of range"):
        _core.expected_weights([l], [300, 300, 1], "t")


def test_expected_weights_follow_the_options():
    def rec(kind, **kw):
        l = _core.LayerSpec()
        l.kind, l.name, l.keras_class, l.inputs = kind, kind, kind, [-1]
        for k, v in kw.items():
            setattr(l, k, v)
        return l

    got = _core.expected_weights([rec("conv2d", kernel=(3, 5), filters=8, groups=2)], [28, 28, 4], "t")
    assert got == [[("kernel", (3, 5, 2, 8), False, False), ("bias", (8,), False, False)]]
    got = _core.expected_weights([rec("batch_norm", bn_scale=False, axes=[-1])], [28, 28, 6], "t")
    assert [s[0] for s in got[0]] == ["beta", "moving_mean", "moving_variance"]
    conv = rec("conv2d", kernel=(3, 3), filters=6, data_format="channels_first")
    bn = rec("batch_norm", axes=[1])
    bn.inputs = [0]
    assert _core.expected_weights([conv, bn], [6, 28, 28], "t")[1][0] == ("gamma", (6,), False, False)
    got = _core.expected_weights([rec("prelu", axes=[1, 2])], [5, 7, 3], "t")
    assert got == [[("alpha", (1, 1, 3), False, False)]]
    got = _core.expected_weights([rec("dense", units=10, use_bias=False)], [28, 28], "t")
    assert got == [[("kernel", (28, 10), False, False)]]


def test_every_layer_kind_has_a_converter_or_is_internal():
    from lenet.keras import layers

    converted = set()
    for cls, convert in layers.CONVERTERS.items():
        try:
            converted.add(
                convert(
                    {
                        "kernel_size": 3,
                        "filters": 1,
                        "units": 1,
                        "target_shape": [1],
                        "dims": [1],
                        "height": 1,
                        "width": 1,
                    },
                    "w",
                    layers.Writer(),
                )["kind"]
            )
        except Exception as e:  # a converter this config cannot drive would hide its kind
            raise AssertionError(f"the {cls} converter fails on a minimal config: {e!r}") from e
    # ONNX's alone: LogSoftmax (PyTorch's log_softmax head), and the quantized graphs' quantize
    # and dequantize; Keras has no such layers.
    from lenet.onnx import ops, quantized

    onnx_only = {"log_softmax": ops, "quantize": quantized, "dequantize": quantized}
    assert set(_core.layer_kinds()) - converted == set(onnx_only)
    assert converted <= set(_core.layer_kinds())
    for kind, module in onnx_only.items():
        assert f'"{kind}"' in pathlib.Path(module.__file__).read_text()


def test_output_kinds():
    rng = np.random.default_rng(0)
    for act, kind in (("softmax", "softmax"), ("sigmoid", "sigmoid"), ("linear", "scores"), ("relu", "scores")):
        l = _core.LayerSpec()
        l.kind, l.name, l.keras_class, l.inputs, l.units, l.activation = "dense", "d", "Dense", [-1], 3, act
        l.set_weight("kernel", rng.standard_normal((4, 3)).astype(np.float32))
        l.set_weight("bias", np.zeros(3, np.float32))
        assert _core.Network([l], [4], "t").output_kind == kind


def _ring_median_dark(stack):
    """The test's own reference: the median of each image's outermost pixels below 128."""
    out = []
    for img in stack.astype(np.float64):
        ring = np.concatenate([img[0], img[-1], img[1:-1, 0], img[1:-1, -1]])
        out.append(np.median(ring) < 128)
    return np.array(out)


@pytest.mark.parametrize("shape", [(200, 28, 28), (100, 2, 2), (100, 3, 7), (60, 32, 32), (50, 5, 2)])
def test_dark_ground_is_the_median_of_the_border(shape):
    rng = np.random.default_rng(sum(shape))
    stacks = [
        rng.integers(0, 256, shape, dtype=np.uint8),
        rng.integers(120, 136, shape, dtype=np.uint8),  # medians right at mid-gray
        np.where(rng.random(shape) < 0.5, 0, 255).astype(np.uint8),
    ]
    for s in stacks:
        want = _ring_median_dark(s)
        np.testing.assert_array_equal(_core.dark_ground(s), want)
        np.testing.assert_array_equal(_core.dark_ground(s[..., None]), want)
    with pytest.raises(ValueError):
        _core.dark_ground(np.zeros((3, 1, 5), np.uint8))


def test_pixels_converted_in_the_core_are_numpys_conversion():
    """pixel_probabilities(p, scale) is probabilities(p.astype(float32) * float32(scale)),
    bit for bit; a non-finite scale and a wrong shape are InputErrors."""
    eng = lenet.Engine("lenet5", device="cpu", threads=2)
    px = np.random.default_rng(5).integers(0, 256, (70, 28, 28, 1), dtype=np.uint8)
    for scale in (np.float32(1 / 255), np.float32(1.0), np.float32(0.5)):
        x = px.astype(np.float32)
        x *= scale
        np.testing.assert_array_equal(eng._executor.pixel_probabilities(px, scale), eng._executor.probabilities(x))
    with pytest.raises(lenet.InputError, match="scale"):
        eng._executor.pixel_probabilities(px, float("nan"))
    with pytest.raises(lenet.InputError, match="uint8 array of shape"):
        eng._executor.pixel_probabilities(px[:, :27], 1.0)


def _under_isa_cap(cap: str, code: str) -> str:
    """Runs ``code`` in a fresh interpreter with LENET_MAX_CPU_ISA=cap; returns its stdout."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "LENET_MAX_CPU_ISA": cap}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_max_cpu_isa_caps_the_kernel_sets_and_auto():
    have = [k for k in lenet.cpu_kernel_sets() if k not in ("blas", "nchw")]
    for cap in have:
        code = "import lenet\nprint(','.join(lenet.cpu_kernel_sets()), lenet.info()['cpu_kernels'])\n"
        sets, auto = _under_isa_cap(cap, code).split()
        assert sets.split(",") == have[have.index(cap) :] + ["blas", "nchw"]
        assert auto == cap
    # "auto" under the cap answers as the capped set named outright, bit for bit.
    x = np.random.default_rng(0).random((5, 28, 28, 1), dtype=np.float32)
    last = have[min(1, len(have) - 1)]  # below the widest where there is one
    want = lenet.Engine("lenet5", cpu_kernels=last).predict_proba(x)
    got = _under_isa_cap(
        last,
        "import lenet, numpy as np\n"
        "x = np.random.default_rng(0).random((5, 28, 28, 1), dtype=np.float32)\n"
        "print(lenet.Engine('lenet5').predict_proba(x).tobytes().hex())",
    )
    assert bytes.fromhex(got) == want.tobytes()


def test_max_cpu_isa_refuses_what_it_cannot_name():
    code = "import lenet\ntry:\n    lenet.cpu_kernel_sets()\nexcept lenet.InputError as e:\n    print('refused:', e)\n"
    out = _under_isa_cap("sse9", code)
    assert out.startswith("refused:") and "LENET_MAX_CPU_ISA='sse9'" in out and "avx2" in out
    if "avx512" in lenet.cpu_kernel_sets():
        code = (
            "import lenet\n"
            "try:\n"
            "    lenet.Engine('lenet5', cpu_kernels='avx512')\n"
            "except lenet.InputError as e:\n"
            "    print('refused:', e)\n"
        )
        out = _under_isa_cap("avx2", code)
        assert out.startswith("refused:") and "capped by LENET_MAX_CPU_ISA=avx2" in out
