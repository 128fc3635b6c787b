"""The CUDA backend. Without a GPU (CI): the planner's descriptors against the
engine's shape inference, the padding choices, versions, the error path and the
CPU fallback. With a GPU (`requires_cuda`): parity with the CPU backend and with
Keras, graphs against eager launches, batch sizes, threads, memory."""

import math
import re
import subprocess
import warnings

import numpy as np
import pytest
import test_ops
from conftest import check_concurrent_calls

import lenet
from lenet import _native

built = pytest.mark.skipif(
    _native.cuda_module is None, reason=f"CUDA backend not loaded: {_native.cuda_missing_reason}"
)


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


def _net(layers, shape=(28, 28, 1)):
    return test_ops.network(layers, shape)


@built
@pytest.mark.parametrize("case", test_ops.GROUPED_CASES)
@pytest.mark.parametrize("batch", [1, 7])
def test_planner_grouped_and_dilated_conv_shapes(case, batch):
    """cuDNN's output shape for grouped and dilated convolutions is the network's."""
    h, w, ci, co, k, s, d, same, groups = case
    wt = np.zeros((k[0], k[1], ci // groups, co), np.float32)
    net = _net(
        [
            test_ops.layer(
                "conv2d", kernel=k, strides=s, dilation=d, same_padding=same, filters=co, groups=groups, weights=wt
            )
        ],
        (h, w, ci),
    )
    (p,) = _native.cuda_module.plan(net, batch)
    h, w, c = net.steps()[0][3]
    assert p["cudnn_out"] == p["out"] == (batch, c, h, w)


@built
@pytest.mark.parametrize(
    "kernel,stride,hw,expect_pad,expect_prepad",
    [
        ((5, 5), (1, 1), 28, (2, 2), (0, 0, 0, 0)),  # symmetric: cuDNN pads itself
        ((3, 3), (2, 2), 28, (0, 0), (0, 1, 0, 1)),  # odd total: the extra pixel after
        ((4, 4), (1, 1), 14, (0, 0), (1, 2, 1, 2)),  # even kernel
        ((1, 1), (1, 1), 7, (0, 0), (0, 0, 0, 0)),
    ],
)
def test_planner_conv_padding(kernel, stride, hw, expect_pad, expect_prepad):
    w = np.zeros((*kernel, 1, 2), np.float32)
    net = _net(
        [test_ops.layer("conv2d", kernel=kernel, strides=stride, same_padding=True, filters=2, weights=w)], (hw, hw, 1)
    )
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


def _info_in_fresh_process(first: str = "") -> dict:
    """lenet.info() in a new interpreter that imported `first` (a module list) before lenet."""
    import json
    import sys

    code = (f"import {first}\n" if first else "") + (
        "import json, lenet\n"
        "from lenet import _native\n"
        "d = lenet.info()\n"
        "d['bound'] = {s: _native.cuda_module.symbol_library(s) for s in "
        "('cublasCreate_v2', 'cublasGetProperty', 'cudnnCreate', 'cudnnGetVersion')}\n"
        "print(json.dumps(d))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@built
def test_versions_are_reported():
    info = _info_in_fresh_process()
    assert "cuda" in info["backends_built"]
    for key in ("cuda_runtime", "cudnn_linked", "cudnn_loaded", "cublas_linked", "cublas_loaded"):
        assert info[key], key
    # Linked and loaded cuDNN / cuBLAS share their major version, and are the wheels'.
    assert info["cudnn_linked"].split(".")[0] == info["cudnn_loaded"].split(".")[0] == "9"
    assert info["cublas_linked"].split(".")[0] == info["cublas_loaded"].split(".")[0]
    assert "/nvidia/cudnn/lib/libcudnn" in info["cudnn_path"], info["cudnn_path"]
    assert "/nvidia/cu13/lib/libcublas.so" in info["cublas_path"], info["cublas_path"]
    out = subprocess.run(["lenet-cli", "--version"], capture_output=True, text=True)
    assert "cudnn_loaded" in out.stdout


def _frameworks() -> list[str]:
    import importlib.util

    return [m for m in ("tensorflow", "torch", "jax") if importlib.util.find_spec(m) is not None]


@built
@pytest.mark.parametrize("first", ["tensorflow", "torch", "all"])
def test_frameworks_imported_first_do_not_change_what_lenet_binds(first):
    """TensorFlow's libtensorflow_framework exports stubs of the cuBLAS, cuDNN and CUDA
    runtime APIs (forwarding to the CUDA 12 libraries it looks for): a module linked
    the ordinary way bound the engine's cuBLAS calls to them (cublas_loaded '0.0.0').
    Through the table (csrc/backends/cuda/libraries.h) every call reaches the wheels."""
    present = _frameworks()
    wanted = present if first == "all" else [first]
    if not set(wanted) <= set(present) or not wanted:
        pytest.skip(f"{first} is not installed")
    alone = _info_in_fresh_process()
    after = _info_in_fresh_process(", ".join(wanted))
    assert alone["cuda_isolation"] == "none"
    for key in ("cublas_loaded", "cudnn_loaded", "cublas_path", "cudnn_path", "bound"):
        assert after[key] == alone[key], (key, after[key], alone[key])
    lib = {"cublas": alone["cublas_path"], "cudnn": alone["cudnn_path"]}
    for symbol, path in after["bound"].items():
        assert path == lib["cublas" if symbol.startswith("cublas") else "cudnn"], (symbol, path)


@built
def test_the_backend_finds_the_wheels_beside_the_package_without_ld_library_path():
    """The backend's own search (csrc/backends/cuda/provider.h, the one a C++ program's
    device "cuda" makes too): the wheels in the lenet package's site-packages come first,
    the sonames for the system's search last."""
    import os

    site = os.path.dirname(os.path.dirname(os.path.realpath(_native.cuda_module.__file__)))
    cudnn, cublas = _native.cuda_module.library_candidates()
    assert cudnn[0] == f"{site}/nvidia/cudnn/lib/libcudnn.so.9" and cudnn[-1] == "libcudnn.so.9"
    assert cublas[0] == f"{site}/nvidia/cu13/lib/libcublas.so.13" and cublas[-1] == "libcublas.so.13"


@built
def test_missing_libraries_are_a_cuda_error_naming_every_candidate():
    """LENET_CUDA_LIBRARY_PATH, when set, is where the backend looks, and nowhere else."""
    import os
    import sys

    code = (
        "import lenet, lenet._cuda as c\n"
        "print(c.library_candidates())\n"
        "try:\n"
        "    c.load_libraries()\n"
        "except lenet.CudaError as e:\n"
        "    print('CudaError:', e)\n"
        "print('loaded', c.libraries_loaded(), lenet._core.backend_registered('cuda'))\n"
    )
    env = dict(os.environ, LENET_CUDA_LIBRARY_PATH="/nowhere:/elsewhere")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines()[0] == str(
        (
            ["/nowhere/libcudnn.so.9", "/elsewhere/libcudnn.so.9"],
            ["/nowhere/libcublas.so.13", "/elsewhere/libcublas.so.13"],
        )
    )
    assert "CudaError: cannot load cuDNN 9; tried:" in out.stdout
    assert "/nowhere/libcudnn.so.9" in out.stdout and "/elsewhere/libcudnn.so.9" in out.stdout
    assert "loaded False False" in out.stdout


def _candidate(algo, ok=True, time_ms=0.1, memory=0, deterministic=True, tensor_math=False):
    return dict(algo=algo, ok=ok, time_ms=time_ms, memory=memory, deterministic=deterministic, tensor_math=tensor_math)


@built
def test_algorithm_choice_prefers_the_fastest_deterministic_usable_one():
    def pick(candidates, tf32, limit):
        return _native.cuda_module.pick_algorithm(candidates, tf32, limit)[0]

    fast_nondeterministic = _candidate(4, time_ms=0.01, deterministic=False)
    assert pick([fast_nondeterministic, _candidate(1, time_ms=0.02), _candidate(0, time_ms=0.03)], False, 1 << 20) == 1
    # Nothing deterministic: the fastest usable.
    assert (
        pick(
            [_candidate(4, ok=False), _candidate(5, deterministic=False), _candidate(6, deterministic=False)],
            False,
            1 << 20,
        )
        == 1
    )
    # Over the workspace limit, failed, or TF32 when not allowed: skipped.
    assert (
        pick(
            [_candidate(2, memory=2 << 20), _candidate(1, ok=False), _candidate(6, tensor_math=True), _candidate(0)],
            False,
            1 << 20,
        )
        == 3
    )
    assert pick([_candidate(6, tensor_math=True), _candidate(0)], True, 1 << 20) == 0
    assert pick([_candidate(1, ok=False)], False, 1 << 20) == -1
    assert pick([], False, 1 << 20) == -1
    assert _native.cuda_module.algorithm_name(1) == "IMPLICIT_PRECOMP_GEMM"


@built
def test_algorithms_are_tried_in_order_until_one_gives_fp32_numbers():
    """The order conv.cpp runs the candidates in (each checked against IMPLICIT_GEMM
    on a probe): deterministic ones fastest first, then the others; never a
    TF32 one unless allowed, never a failed or too-large one."""
    rank = lambda c, tf32=False: _native.cuda_module.pick_algorithm(c, tf32, 1 << 20)[1]  # noqa: E731
    c = [
        _candidate(7, deterministic=False),
        _candidate(6, tensor_math=True),
        _candidate(5),
        _candidate(4, memory=2 << 20),
        _candidate(1, ok=False),
        _candidate(0),
    ]
    assert rank(c) == [2, 5, 0]
    assert rank(c, tf32=True) == [1, 2, 5, 0]


@built
def test_cublas_workspace_is_sized_per_architecture():
    size = _native.cuda_module.cublas_workspace_bytes
    assert size(7) == size(8) == 4 << 20  # Volta, Ampere/Ada: cuBLAS' recommended 4 MiB
    assert size(9) == size(10) == size(12) == 32 << 20  # Hopper and later: 32 MiB for the best kernels


def test_cuda_backend_copies_and_fills_only_on_the_engine_stream():
    """cudaMemcpy / cudaMemset (and friends without Async) run on the legacy default
    stream, which is not ordered with the engine's non-blocking stream."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "csrc" / "backends" / "cuda"
    unordered = re.compile(r"\b(cudaMemcpy|cudaMemset|cudaMemcpy2D|cudaMemcpyToSymbol|cudaMemset2D)\s*\(")
    found = [
        f"{p.name}:{i}: {line.strip()}"
        for p in sorted(root.iterdir())
        if p.suffix in (".cpp", ".cu", ".h", ".cuh")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if unordered.search(line)
    ]
    assert not found, "copies outside the engine's stream:\n" + "\n".join(found)


@pytest.mark.parametrize("kernels", ["auto", "nchw"])
def test_describe_on_the_cpu(kernels):
    # Two threads: 40 images split in two chunks of 20 (capacity 32), on any machine.
    eng = lenet.Engine("lenet5", device="cpu", cpu_kernels=kernels, threads=2)
    d = eng.describe()  # plans batch 1 on a batch of zeros when nothing ran yet
    assert d["device"] == "cpu" and d["tf32"] is False and d["graphs"] is False
    assert ("NCHW" in d["description"]) == (kernels == "nchw")
    assert [p["capacity"] for p in d["plans"]] == [1] and d["plans"][0]["execution"] is None
    ops = [s["op"] for s in d["steps"]]
    assert "dense" in ops and all(s["capacity"] == 1 for s in d["steps"])
    eng.predict_proba(np.zeros((40, 28, 28, 1), np.float32))
    assert {p["capacity"] for p in eng.describe()["plans"]} == {1, 32}
    printed = []
    eng.summary(print_fn=printed.append)
    assert "device: CPU" in printed[0]


def test_no_gpu_error_and_auto_fallback():
    if lenet.cuda_available():
        pytest.skip("a GPU is available")
    with pytest.raises(lenet.CudaError, match="CUDA"):
        lenet.Engine(device="cuda")
    with pytest.raises(lenet.CudaError):
        lenet._core.Executor(lenet.load()._network, "cuda", 1)  # below the Python check too
    # auto falls back to the CPU, saying once why when the backend is built.
    lenet.device._auto_warned = False
    if lenet.cuda_built():
        with pytest.warns(RuntimeWarning, match="using the CPU"):
            assert lenet.Engine(device="auto").device == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lenet.Engine(device="auto").device == "cpu"  # once: no second warning


def _conv_net(activation="relu", **params):
    w = np.random.default_rng(3).standard_normal((3, 3, 4, 5)).astype(np.float32)
    return _net(
        [test_ops.layer("conv2d", kernel=(3, 3), filters=5, weights=w, activation=activation, **params)], (9, 8, 4)
    )


@built
@pytest.mark.parametrize(
    "name,params",
    [("linear", {})] + test_ops.ACTIVATION_CASES,
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()),
)
def test_fusion_is_decided_at_plan_time_for_every_activation(name, params):
    """cuDNN's fused conv + bias + activation call is tried for plain ReLU only; every
    other activation (ReLU with a slope, a cap or a threshold included) runs as the
    convolution, then bias and activation in lenet's kernel: never a BAD_PARAM at run time."""
    (p,) = _native.cuda_module.plan(_conv_net(name, **params), 4)
    plain_relu = name == "relu" and not params
    assert p["fusion_tried"] is plain_relu, p["fusion"]
    assert ("cuDNN's fused" in p["fusion"]) is plain_relu, p["fusion"]


@built
def test_a_fused_choice_is_never_reused_for_another_activation():
    """The algorithm cache's key holds whether the fused call is tried: a ReLU
    convolution's choice (fused) is not run for a tanh one of the same shape."""
    (relu,) = _native.cuda_module.plan(_conv_net("relu"), 4)
    (tanh,) = _native.cuda_module.plan(_conv_net("tanh"), 4)
    (capped,) = _native.cuda_module.plan(_conv_net("relu", max_value=6.0), 4)
    (relu2,) = _native.cuda_module.plan(_conv_net("relu"), 4)
    assert relu["conv_key"] == relu2["conv_key"]
    assert relu["conv_key"] != tanh["conv_key"] and relu["conv_key"] != capped["conv_key"]
    assert tanh["conv_key"] == capped["conv_key"]  # neither fused: one algorithm choice serves both


@built
@pytest.mark.parametrize("name", [*lenet.SHIPPED_MODELS, "zoo"])
def test_every_convolution_descriptor_holds_fp32_math(name):
    """CUDNN_DEFAULT_MATH lets cuDNN use TF32 tensor cores on Ampere and later:
    every convolution descriptor holds CUDNN_FMA_MATH unless TF32 is allowed."""
    nets = (
        [lenet.load(name)._network]
        if name != "zoo"
        else [test_ops.network(layers, shape) for _, layers, shape in NEW_OP_CASES]
    )
    convs = 0
    for net in nets:
        for tf32, want in ((False, "CUDNN_FMA_MATH"), (True, "CUDNN_DEFAULT_MATH")):
            for p in _native.cuda_module.plan(net, 8, tf32):
                if p["op"] == "conv2d":
                    convs += 1
                    assert p["math"] == want, (p["layers"], tf32, p["math"])
    assert convs


def _elf(path):
    elftools = pytest.importorskip("elftools.elf.elffile")
    from elftools.elf.dynamic import DynamicSection

    with open(path, "rb") as f:
        elf = elftools.ELFFile(f)
        needed = [
            t.needed
            for sec in elf.iter_sections()
            if isinstance(sec, DynamicSection)
            for t in sec.iter_tags()
            if t.entry.d_tag == "DT_NEEDED"
        ]
        dynsym = elf.get_section_by_name(".dynsym")
        undefined = [sym.name for sym in dynsym.iter_symbols() if sym["st_shndx"] == "SHN_UNDEF" and sym.name]
        exported = [sym.name for sym in dynsym.iter_symbols() if sym["st_shndx"] != "SHN_UNDEF" and sym.name]
    return needed, undefined, exported


@built
def test_the_module_reaches_cudnn_and_cublas_only_through_its_table():
    """No link-time dependency on cuDNN or cuBLAS and no undefined reference to them
    (a call the dynamic linker would bind, to whatever the process defines first), and
    the static CUDA runtime kept inside the module (none of its symbols exported)."""
    import os

    module = _native.cuda_module.__file__
    for path in (module, os.path.join(os.path.dirname(module), "liblenet_cuda.so")):
        needed, undefined, exported = _elf(path)
        assert not [n for n in needed if "cudnn" in n or "cublas" in n or "cudart" in n], (path, needed)
        assert not [u for u in undefined if u.startswith(("cudnn", "cublas"))], (path, undefined)
        assert not [e for e in exported if e.startswith(("cuda", "cudnn", "cublas"))], (path, exported[:20])


_BINDINGS = """
import json, os, sys
for m in sys.argv[1:]:
    __import__(m)
import lenet
from lenet import _native
d = lenet.info()
print(json.dumps({k: d.get(k) for k in ("cuda_isolation", "cublas_loaded", "cudnn_loaded")}))
"""


@built
def test_tensorflow_first_captures_no_call_of_the_engine_or_its_libraries(tmp_path):
    """TensorFlow exports stubs of cuBLAS, cuBLASLt and cuDNN into the global scope.
    Loaded after it, neither the module nor the NVIDIA libraries may bind a symbol to
    TensorFlow (the dynamic linker's own record, LD_DEBUG=bindings): the module calls
    through its table, and the libraries are isolated (RTLD_DEEPBIND for them only,
    which info() reports). Without TensorFlow nothing is isolated."""
    import json
    import os
    import sys

    if "tensorflow" not in _frameworks():
        pytest.skip("tensorflow is not installed")
    # The module's own dlsym(RTLD_DEFAULT) lookups that decide the isolation are logged as bindings too.
    probes = tuple(f"symbol `{name}'" for name in _native.cuda_module.cross_reference_probes)
    probe = lambda line: "/liblenet_cuda.so" in line.split(" to ")[0] and line.endswith(probes)  # noqa: E731
    results = {}
    for first in ([], ["tensorflow"]):
        log = tmp_path / f"ld-{len(first)}"
        env = dict(os.environ, LD_DEBUG="bindings", LD_DEBUG_OUTPUT=str(log))
        out = subprocess.run(
            [sys.executable, "-c", _BINDINGS, *first], capture_output=True, text=True, env=env, timeout=300
        )
        assert out.returncode == 0, out.stderr[-3000:]
        results[bool(first)] = json.loads(out.stdout.strip().splitlines()[-1])
        lines = [line for p in tmp_path.glob(f"ld-{len(first)}.*") for line in p.read_text().splitlines()]
        assert any("libcublas.so.13" in line and "libcublasLt.so.13" in line for line in lines), (
            "the dynamic linker's log shows no cuBLAS binding at all"
        )
        # A CUDA API symbol (cuda*, cudnn*, cublas*, the driver's cu*) of the module or of
        # a library it loaded, bound to TensorFlow. (C++ runtime symbols binding to the
        # first definition in the process is ordinary and harmless.)
        ours = ("libcublas", "libcudnn", "/_cuda.", "/liblenet_cuda.so")
        captured = [
            line
            for line in lines
            if "binding file" in line
            and "tensorflow" in line.split(" to ")[-1]
            and any(o in line.split(" to ")[0] for o in ours)
            and re.search(r"symbol `cu", line)
            and not probe(line)
        ]
        assert not captured, captured[:5]
    assert results[False]["cuda_isolation"] == "none"
    assert results[True]["cuda_isolation"].startswith("RTLD_DEEPBIND for the cuDNN and cuBLAS libraries only")
    assert results[True]["cublas_loaded"] == results[False]["cublas_loaded"] != "0.0.0"


_SHADOW = """
import ctypes, json, sys
if len(sys.argv) > 1:
    ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # another package's copy, loaded first
import lenet
print(json.dumps({"shadowed": lenet.info().get("cuda_shadowed")}))
"""


@built
def test_a_cudnn_sub_library_loaded_first_from_elsewhere_is_reported(tmp_path):
    """libcudnn.so.9 opens its sub-libraries by soname: where another package loaded a
    copy of one first, cuDNN would get that copy, a mix of two builds. info() says which
    (cuda_shadowed); with nothing loaded first it says nothing."""
    import json
    import os
    import shutil
    import sys

    def shadowed(*first):
        out = subprocess.run([sys.executable, "-c", _SHADOW, *first], capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])["shadowed"]

    assert shadowed() == ""
    ours = os.path.dirname(lenet.info()["cudnn_path"] or "")
    if not ours or not os.path.exists(os.path.join(ours, "libcudnn_graph.so.9")):
        pytest.skip("cuDNN's sub-libraries are not files beside libcudnn.so.9 here")
    # The same build in another file (libcudnn_graph needs no other cuDNN library to load).
    other = tmp_path / "libcudnn_graph.so.9"
    shutil.copy(os.path.join(ours, "libcudnn_graph.so.9"), other)
    said = shadowed(str(other))
    assert said.startswith("libcudnn_graph.so.9 resolves by soname to " + str(other.resolve())), said


# ---- GPU needed ------------------------------------------------------------------


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", test_ops.CONV_CASES)
@pytest.mark.parametrize("n", [1, 5, 70])
def test_conv_matches_cpu(case, n):
    h, w, ci, co, k, s, pad, act, bias = case
    rng = np.random.default_rng(7)
    x = rng.standard_normal((n, h, w, ci)).astype(np.float32)
    fan_in = k[0] * k[1] * ci
    wt = (rng.standard_normal((k[0], k[1], ci, co)) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32) if bias else None
    layers = [
        test_ops.layer(
            "conv2d", kernel=k, strides=s, same_padding=pad == "same", filters=co, activation=act, weights=wt, bias=b
        ),
        test_ops.layer("flatten"),
    ]
    _compare(layers, x, fan_in)


@pytest.mark.requires_cuda
@pytest.mark.parametrize("case", test_ops.POOL_CASES)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_matches_cpu(case, kind):
    h, w, c, k, s, pad = case
    x = np.random.default_rng(8).standard_normal((6, h, w, c)).astype(np.float32)
    _compare(
        [test_ops.layer(f"{kind}_pool2d", kernel=k, strides=s, same_padding=pad == "same"), test_ops.layer("flatten")],
        x,
    )


@pytest.mark.requires_cuda
@pytest.mark.parametrize("act", ["linear", "relu", "tanh", "sigmoid", "softmax"])
def test_dense_flatten_activation_match_cpu(act):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((9, 3, 4, 5)).astype(np.float32)
    # (3, 4, 5) -> pad -> (4, 7, 5) -> pool -> (2, 3, 5) -> 30 features
    layers = [
        test_ops.layer("rescaling", scale=0.5, offset=0.1),
        test_ops.layer("zero_pad2d", pad=(1, 0, 2, 1)),
        test_ops.layer("max_pool2d", kernel=(2, 2), strides=(2, 2)),
        test_ops.layer("flatten"),
        test_ops.layer(
            "dense",
            units=13,
            activation=act,
            weights=(rng.standard_normal((30, 13)) / np.sqrt(30)).astype(np.float32),
            bias=rng.standard_normal(13).astype(np.float32),
        ),
    ]
    _compare(layers, x, 30)


def tolerance(fan_in: int) -> float:
    """Float32 sums of `fan_in` products of O(1) terms (weights scaled by
    1/sqrt(fan_in)) differ with the summation order by ~sqrt(fan_in) units of
    roundoff: the bound a correct GPU result meets, far below any real bug."""
    return 2e-6 * max(5.0, float(np.sqrt(fan_in)))


def _compare(layers, x, fan_in=25):
    net = test_ops.network(layers, x.shape[1:])
    cpu = lenet._core.Executor(net, "cpu", 1).run(x)
    gpu = lenet._core.Executor(net, "cuda", 1).run(x)
    assert gpu.shape == cpu.shape
    tol = tolerance(fan_in)
    np.testing.assert_allclose(gpu, cpu, atol=tol, rtol=tol)


def _new_op_cases():
    """Networks of the steps issue 13 added, each small: (name, layers, input shape)."""
    rng = np.random.default_rng(11)

    def f(*shape):
        return (rng.standard_normal(shape) / 2).astype(np.float32)

    L = test_ops.layer
    bn = {"gamma": f(4) + 1, "beta": f(4), "moving_mean": f(4), "moving_variance": np.abs(f(4)) + 0.5}
    cases = [
        ("grouped", [L("conv2d", kernel=(3, 3), filters=6, groups=2, weights=f(3, 3, 2, 6), bias=f(6))], (9, 8, 4)),
        (
            "depthwise",
            [
                L(
                    "depthwise_conv2d",
                    kernel=(3, 3),
                    depth_multiplier=2,
                    same_padding=True,
                    named_weights={"depthwise_kernel": f(3, 3, 4, 2), "bias": f(8)},
                )
            ],
            (9, 8, 4),
        ),
        ("dilated", [L("conv2d", kernel=(3, 3), dilation=(2, 2), filters=3, weights=f(3, 3, 4, 3))], (9, 8, 4)),
        (
            "bn_relu",
            [
                L("conv2d", kernel=(3, 3), filters=4, weights=f(3, 3, 4, 4)),
                L("batch_norm", named_weights=bn),
                L("activation", activation="relu"),
            ],
            (9, 8, 4),
        ),
        ("standalone_bn", [L("batch_norm", named_weights=bn)], (9, 8, 4)),
        ("prelu", [L("prelu", named_weights={"alpha": np.abs(f(9, 8, 4))})], (9, 8, 4)),
        (
            "crop_pad",
            [
                L("crop2d", pad=(1, 2, 0, 3)),
                L("zero_pad2d", pad=(0, 1, 2, 0)),
                L("max_pool2d", kernel=(2, 2), strides=(2, 2)),
            ],
            (9, 8, 4),
        ),
        ("resize", [L("resizing", size=(13, 5)), L("upsampling2d", size=(2, 1), interpolation="nearest")], (9, 8, 4)),
        ("global", [L("global_avg_pool2d"), L("dense", units=3, weights=f(4, 3))], (9, 8, 4)),
        ("dense_on_image", [L("dense", units=5, weights=f(4, 5), activation="gelu")], (9, 8, 4)),
        (
            "reshape_cf",
            [
                L("reshape", target_shape=[4, 6, 6]),
                L("max_pool2d", kernel=(2, 2), strides=(2, 2), data_format="channels_first"),
                L("permute", axes=[3, 1, 2]),
            ],
            (144,),
        ),
        (
            "flatten_cf",
            [
                L("conv2d", kernel=(3, 3), filters=3, data_format="channels_first", weights=f(3, 3, 2, 3)),
                L("flatten"),
                L("softmax"),
            ],
            (2, 7, 6),
        ),
        (
            "spatial_output_cf",
            [L("conv2d", kernel=(3, 3), filters=3, data_format="channels_first", weights=f(3, 3, 2, 3))],
            (2, 7, 6),
        ),
        ("rank2", [L("dense", units=6, weights=f(5, 6)), L("softmax")], (7, 5)),
        ("log_softmax", [L("dense", units=6, weights=f(5, 6)), L("log_softmax")], (5,)),
        (
            "large_shift_bn_before_conv",
            [
                L("activation", activation="relu"),
                L("batch_norm", named_weights=dict(bn, moving_mean=f(4) + 40)),
                L("conv2d", kernel=(3, 3), filters=3, weights=f(3, 3, 4, 3)),
            ],
            (9, 8, 4),
        ),
        (
            "layer_norm",
            [
                L("layer_norm", named_weights={"gamma": f(4) + 1, "beta": f(4)}),
                L("layer_norm", bn_center=False, bn_scale=False),
            ],
            (9, 8, 4),
        ),
        (
            "conv1d",
            [
                L("conv1d", kernel=(1, 3), strides=(1, 2), same_padding=True, filters=4, weights=f(3, 5, 4)),
                L("max_pool1d", kernel=(1, 2), strides=(1, 2)),
                L("global_max_pool1d"),
            ],
            (12, 5),
        ),
        (
            "merges",
            [
                L("conv2d", kernel=(1, 1), filters=4, weights=f(1, 1, 4, 4), inputs=[-1], name="a"),
                L("add", inputs=[0, -1]),
                L("multiply", inputs=[1, 0]),
                L("average", inputs=[2, 1, 0, -1]),
                L("maximum", inputs=[3, -1]),
                L("subtract", inputs=[4, 0]),
                L("minimum", inputs=[5, 1]),
            ],
            (9, 8, 4),
        ),
        (
            "concat",
            [
                L("conv2d", kernel=(1, 1), filters=3, weights=f(1, 1, 4, 3), inputs=[-1]),
                L("concatenate", inputs=[0, -1], axes=[-1]),
                L("concatenate", inputs=[1, 1], axes=[1]),
                L("concatenate", inputs=[2, 2], axes=[2]),
            ],
            (9, 8, 4),
        ),
    ]
    for name, params in test_ops.ACTIVATION_CASES:
        cases.append(
            (
                f"act_{name}",
                [
                    # exp(exp(x)) overflows float32 past x = 4.5: small weights keep it finite
                    L(
                        "conv2d",
                        kernel=(3, 3),
                        filters=3,
                        weights=f(3, 3, 4, 3) * (0.2 if name == "exponential" else 1),
                        activation=name,
                        **params,
                    ),
                    L("activation", activation=name, **params),
                ],
                (9, 8, 4),
            )
        )
    return cases


NEW_OP_CASES = _new_op_cases()


@built
@pytest.mark.parametrize("name,layers,shape", NEW_OP_CASES, ids=[c[0] for c in NEW_OP_CASES])
def test_planner_takes_every_new_step(name, layers, shape):
    """Every step of the new layers gets a plan (descriptors where cuDNN runs it) without a GPU."""
    net = test_ops.network(layers, shape)
    plan = _native.cuda_module.plan(net, 3)
    assert [p["op"] for p in plan] == [s[0] for s in net.steps()]
    for p in plan:
        if p["cudnn_out"] is not None:
            assert p["cudnn_out"] == p["out"], name


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name,layers,shape", NEW_OP_CASES, ids=[c[0] for c in NEW_OP_CASES])
def test_new_steps_match_cpu(name, layers, shape):
    x = np.random.default_rng(12).standard_normal((5,) + tuple(shape)).astype(np.float32)
    _compare(layers, x)


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
@pytest.mark.parametrize("name,path", [("lenet-tf", "library"), ("lenet5", "fused"), ("lenet5", "auto")])
def test_graph_replay_equals_eager_and_batch_sizes(name, path, mnist_x):
    graph = lenet.Engine(name, device="cuda", cuda_path=path)
    eager = lenet.Engine(name, device="cuda", cuda_graphs=False, cuda_path=path)
    x = np.concatenate([mnist_x] * 5)  # 5000 images: past the largest plan
    for n in (1, 2, 63, 64, 65, 1000, 5000):
        a, b = graph.predict_proba(x[:n]), eager.predict_proba(x[:n])
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(graph.predict_proba(x[:n]), a)  # replay of a captured graph


@pytest.mark.requires_cuda
def test_concurrent_callers(mnist_x):
    eng = lenet.Engine(device="cuda")
    check_concurrent_calls(
        eng.predict_proba, mnist_x, [1, 7, 64, 100, 3, 1, 250, 32], 50, np.testing.assert_array_equal
    )


@pytest.mark.requires_cuda
def test_no_memory_growth(mnist_x):
    """What lenet holds does not grow over 10,000 calls, and neither does this
    process's device memory (NVML's per-process figure: cuDNN's and cuBLAS's own
    allocations included, other processes on the GPU, such as other xdist workers,
    excluded). The device-wide figure is not a measure: other processes share it."""
    eng = lenet.Engine(device="cuda")
    for _ in range(100):
        eng.predict_proba(mnist_x[:1])
    before = _native.cuda_module.memory()
    for i in range(10_000):
        eng.predict_proba(mnist_x[i % 1000 : i % 1000 + 1])
    after = _native.cuda_module.memory()
    assert after["lenet_device"] == before["lenet_device"] and after["lenet_pinned"] == before["lenet_pinned"]
    if before["process"] is None:
        warnings.warn(f"per-process device memory not measured: {before['process_why']}")
    else:
        assert after["process"] - before["process"] <= 1 << 20, (before, after)


@pytest.mark.requires_cuda
def test_engines_release_what_they_hold():
    held = _native.cuda_module.memory()["lenet_device"]
    with lenet.Engine("lenet-tf", device="cuda") as eng:
        eng.predict_proba(np.zeros((70, 28, 28, 1), np.float32))
        assert _native.cuda_module.memory()["lenet_device"] > held
    assert _native.cuda_module.memory()["lenet_device"] == held


@pytest.mark.requires_cuda
def test_describe_reports_algorithms_fusion_and_graphs(mnist_x):
    eng = lenet.Engine("lenet5", device="cuda", cuda_path="library")
    eng.predict_proba(mnist_x[:1])
    d = eng.describe()
    assert d["device"] == "cuda" and d["tf32"] is False and d["graphs"] is True
    assert d["plans"][0]["execution"] == "graph", d["plans"]
    convs = [s for s in d["steps"] if s["op"].startswith("conv2d")]
    assert convs
    for s in convs:
        assert s["algorithm"] in {
            "IMPLICIT_GEMM",
            "IMPLICIT_PRECOMP_GEMM",
            "GEMM",
            "DIRECT",
            "FFT",
            "FFT_TILING",
            "WINOGRAD",
            "WINOGRAD_NONFUSED",
        }, s
        assert isinstance(s["fused"], bool) and s["fusion"] and s["workspace_bytes"] >= 0 and s["math"] == "FP32"
    eager = lenet.Engine("lenet5", device="cuda", cuda_graphs=False, cuda_path="library")
    eager.predict_proba(mnist_x[:1])
    e = eager.describe()
    assert e["plans"][0]["execution"] == "eager" and "turned off" in e["plans"][0]["why"]
    # One algorithm per shape in the process: the same in both engines, so the same bits.
    assert [s["algorithm"] for s in e["steps"]] == [s["algorithm"] for s in d["steps"]]
    np.testing.assert_array_equal(eng.predict_proba(mnist_x[:64]), eager.predict_proba(mnist_x[:64]))


@pytest.mark.requires_cuda
def test_a_failed_graph_capture_falls_back_to_eager_and_says_so(mnist_x, tmp_path):
    import sys

    np.save(tmp_path / "x.npy", mnist_x[:100])
    code = (
        "import sys, numpy as np, lenet\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        "eng = lenet.Engine('lenet5', device='cuda')\n"
        "a = eng.predict_proba(x)\n"
        "b = eng.predict_proba(x)\n"
        "ref = lenet.Engine('lenet5', device='cuda', cuda_graphs=False).predict_proba(x)\n"
        "assert (a == ref).all() and (b == ref).all()\n"
        "plan = eng.describe()['plans'][0]\n"
        "assert plan['execution'] == 'eager', plan\n"
        "assert 'graph capture failed' in plan['why'], plan\n"
        "print('ok', plan['why'])\n"
    )
    env = dict(__import__("os").environ, LENET_CUDA_TEST_CAPTURE_FAULT="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


@pytest.mark.requires_cuda
def test_engines_left_alive_are_torn_down_cleanly_at_exit():
    """Handles, streams, graphs and memory released at interpreter exit, in order,
    whatever the garbage collector's order: exit status 0, nothing on stderr."""
    import sys

    code = (
        "import numpy as np, lenet\n"
        "x = np.zeros((70, 28, 28, 1), np.float32)\n"
        "keep = [lenet.Engine(n, device='cuda', cuda_graphs=g) for n in lenet.SHIPPED_MODELS for g in (True, False)]\n"
        "for e in keep: e.predict_proba(x); e.predict_proba(x[:1])\n"
        "del keep[0]\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "error" not in out.stderr.lower(), out.stderr[-3000:]
