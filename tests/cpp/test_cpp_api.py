"""The C++ API used as a C++ program uses it: examples/cpp built by CMake outside the tree
against the installed package (find_package(lenet) through `python -m lenet --cmake-dir`),
with the standard library's assertions on, run on every kind of model lenet loads,
installed with `cmake --install` and run from there; programs on what a product needs
(tests/cpp/api_checks: raw predict, load from memory, buffers with their sizes, a
moved-from Engine; the C ABI from C); liblenet's exports and soname; its errors carry
Python's words; and lenet-bench's C++ harness (lenet-cpp) answers as the engine does from
Python."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, TESTS

import lenet
from lenet._native import _core
from lenet.cpp import bench_harness, cmake_dir

EXAMPLE = REPO / "examples" / "cpp"
ONNX = TESTS / "data" / "onnx"


def _tool(name: str) -> str:
    """cmake and ninja of the test extra (the Python packages), else the system's."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install '.[test]')")
    return found


def _build(source: Path, build: Path, *defines: str) -> Path:
    """A CMake project on the installed package, configured and built (Ninja)."""
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler")
    out = subprocess.run(
        [sys.executable, "-m", "lenet", "--cmake-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(out) == cmake_dir() and (Path(out) / "lenetConfig.cmake").is_file(), out
    cmake = _tool("cmake")
    configure = [cmake, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", "-S", str(source), "-B", str(build)]
    for cmd in (configure + [f"-Dlenet_DIR={out}", *defines], [cmake, "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return build


@pytest.fixture(scope="module")
def example_build(tmp_path_factory):
    # The standard library's checks on: a read past a vector's end aborts (issue 53: the
    # example read input_shape()[1] of a flat model's one-element shape).
    return _build(EXAMPLE, tmp_path_factory.mktemp("example-build"), "-DCMAKE_CXX_FLAGS=-D_GLIBCXX_ASSERTIONS")


@pytest.fixture(scope="module")
def classify(example_build):
    return example_build / "classify"


@pytest.fixture(scope="module")
def api_checks(tmp_path_factory):
    return _build(TESTS / "cpp" / "api_checks", tmp_path_factory.mktemp("api-checks"))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "lenet5.lenet"
    subprocess.run([sys.executable, "-c", f"import lenet; lenet.Engine('lenet5').save({str(path)!r})"], check=True)
    return path


def _run(exe, *args):
    # No Python around it: an environment without the venv's paths.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")}
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env, timeout=60)


def test_the_example_classifies_a_seven(classify, model):
    proc = _run(classify, model, REPO / "examples" / "digit-7.png")
    assert proc.returncode == 0, proc.stderr
    digit, p = proc.stdout.split()
    assert digit == "7"
    expect = lenet.Engine(model, device="cpu", threads=1).infer(REPO / "examples" / "digit-7.png")
    assert float(p) == pytest.approx(expect.confidence, abs=1e-4)


def test_every_example_digit(classify, model):
    for d in range(10):
        proc = _run(classify, model, REPO / "examples" / f"digit-{d}.png")
        assert proc.returncode == 0 and proc.stdout.split()[0] == str(d), (d, proc.stdout, proc.stderr)


def test_a_normalized_model_from_cpp(classify, tmp_path):
    """A model saved with a mean and std (PyTorch's Normalize) prepares its pixels in C++
    as Python's infer does: the same digit and probability for every example digit, where
    the same model without its normalization answers otherwise."""
    path = tmp_path / "normalized.lenet"
    lenet.Engine("lenet5", mean=0.2, std=5.0).save(path)  # (x - 0.2) / 5: much fainter digits
    engine = lenet.Engine(path, device="cpu", threads=1)
    plain = lenet.Engine("lenet5", device="cpu", threads=1)
    pngs = [REPO / "examples" / f"digit-{d}.png" for d in range(10)]
    expect, unnormalized = engine.infer(pngs), plain.infer(pngs)
    assert max(abs(a.confidence - b.confidence) for a, b in zip(expect, unnormalized)) > 0.1
    for png, want in zip(pngs, expect):
        proc = _run(classify, path, png)
        assert proc.returncode == 0, proc.stderr
        digit, p = proc.stdout.split()
        assert int(digit) == want.digit and float(p) == pytest.approx(want.confidence, abs=6e-5), png.name


def test_a_normalization_that_does_not_fit_the_input(classify, tmp_path):
    """Three channels' means for a model of one channel: refused by name, in both languages."""
    m = lenet.load("lenet5")
    path = tmp_path / "three.lenet"
    _core.write_model_file(str(path), m.spec.layers, list(m.spec.input_shape), 1 / 255, "x", "x", [0.1] * 3, [1.0] * 3)
    with pytest.raises(lenet.InputError, match="mean has 3 values; the model takes images of 1 channel"):
        lenet.Engine(path, device="cpu", threads=1)
    proc = _run(classify, path, REPO / "examples" / "digit-7.png")
    assert proc.returncode == 1
    assert (
        proc.stderr.strip()
        == f"classify: {path}: a normalization for 3 channels, but the model's input (28, 28, 1) has 1"
    )


def test_errors_carry_the_same_words_as_python(classify, model, tmp_path):
    broken = tmp_path / "broken.lenet"
    broken.write_bytes(model.read_bytes()[:1000])
    for bad in (broken, tmp_path / "absent.lenet", tmp_path):
        with pytest.raises(lenet.ModelFileError) as e:
            lenet.Engine(bad, device="cpu", threads=1)
        proc = _run(classify, bad, REPO / "examples" / "digit-7.png")
        assert proc.returncode == 1
        assert proc.stderr.strip() == f"classify: {e.value}"
    proc = _run(classify, model, REPO / "examples" / "photo-4.jpg")
    assert proc.returncode == 1 and "not an 8-bit grayscale PNG of 28 x 28" in proc.stderr


def _png_of(size: int, tmp_path: Path) -> Path:
    """examples/digit-7.png (28 x 28) centred on black at `size` x `size`: MNIST's form."""
    from PIL import Image

    digit = np.asarray(Image.open(REPO / "examples" / "digit-7.png"))
    pad = (size - 28) // 2
    out = tmp_path / f"digit-7-{size}.png"
    Image.fromarray(np.pad(digit, ((pad, size - 28 - pad),) * 2)).save(out)
    return out


@pytest.mark.parametrize(
    "source, image",
    [
        ("lenet5", (28, 28, 1, "channels last")),
        (ONNX / "mlp_flat_fixed_batch.onnx", (28, 28, 1, "flat: a square")),
        (ONNX / "example_net.onnx", (28, 28, 1, "channels first")),
        (ONNX / "grey_rgb_32.onnx", (32, 32, 3, "channels first")),
        (ONNX / "tf2onnx_flatten_28x28.onnx", (28, 28, 1, "2-D")),
    ],
    ids=["channels-last", "mlp", "channels-first", "channels-first-rgb", "2d"],
)
def test_the_example_classifies_every_kind_of_model(classify, tmp_path, source, image):
    """Before: the example took input_shape()[0] and [1] for the image's size: a flat MLP's
    [1] does not exist (abort under _GLIBCXX_ASSERTIONS), a channels-first model's [0] is
    its channel count. Now it asks the engine's image(): the same digit and probability as
    Python's infer for the same PNG."""
    path = tmp_path / "model.lenet"
    lenet.Engine(source, device="cpu", threads=1).save(path)
    engine = lenet.Engine(path, device="cpu", threads=1)
    assert engine.image_shape == image[:3]
    png = _png_of(image[0], tmp_path)
    proc = _run(classify, path, png)
    assert proc.returncode == 0, proc.stderr
    digit, p = proc.stdout.split()
    want = engine.infer(png)
    assert int(digit) == want.digit and float(p) == pytest.approx(want.confidence, abs=6e-5)


def loaded_libraries(exe, *args) -> dict[str, str]:
    """The shared libraries a run of `exe` loads, by file name: their paths, as the dynamic
    loader reports them (LD_DEBUG=libs: "calling init: PATH")."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(exe), *map(str, args)], capture_output=True, text=True, env={**env, "LD_DEBUG": "libs"}, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    paths = re.findall(r"calling init: (\S+)", proc.stderr)
    return {Path(p).name: p for p in paths}


def runpath(exe) -> list[str]:
    dynamic = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout
    m = re.search(r"\(RUNPATH\).*\[(.*)\]", dynamic)
    return m.group(1).split(":") if m else []


def test_an_installed_program_ships_the_library(example_build, model, tmp_path):
    """Before: lenet::lenet forced -rpath,<site-packages>/lenet on every program, ahead of its
    own INSTALL_RPATH: a program installed with the library beside it loaded the Python
    environment's copies (RUNPATH [.../site-packages/lenet:$ORIGIN/../lib]). Now the target
    records no rpath: the example, installed as docs/cpp.md shows, has $ORIGIN/../lib alone,
    and loads liblenet and its OpenBLAS from there."""
    prefix = tmp_path / "prefix"
    proc = subprocess.run(
        [_tool("cmake"), "--install", str(example_build), "--prefix", str(prefix)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = prefix / "bin" / "classify"
    run = _run(installed, model, REPO / "examples" / "digit-7.png")
    assert run.returncode == 0 and run.stdout.split()[0] == "7", run.stdout + run.stderr
    if shutil.which("readelf") is None:
        pytest.skip("readelf (binutils) is not on the PATH")
    assert runpath(installed) == ["$ORIGIN/../lib"]
    assert {"liblenet.so.1", "libscipy_openblas.so"} <= {p.name for p in (prefix / "lib").iterdir()}
    loaded = loaded_libraries(installed, model, REPO / "examples" / "digit-7.png")
    lib = str((prefix / "lib").resolve())
    assert os.path.dirname(os.path.realpath(loaded["liblenet.so.1"])) == lib, loaded
    assert os.path.dirname(os.path.realpath(loaded["libscipy_openblas.so"])) == lib, loaded
    package = str(Path(lenet.__file__).resolve().parents[1])
    assert not [p for p in loaded.values() if os.path.realpath(p).startswith(package)], loaded


def test_the_options_do_not_leak_when_refused(api_checks, model):
    """Before: lenet.h's Engine::Options was not freed when a setter threw (its destructor
    does not run for a constructor that throws), and lenet_options_create(NULL) allocated
    the options before it checked `out`: 1,000 of each lost 112,000 bytes, LeakSanitizer
    said. The program is built with AddressSanitizer: LSan sees the library's allocations."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(api_checks / "option_checks"), "leaks", str(model)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1"},
    )
    assert proc.returncode == 0 and "LeakSanitizer" not in proc.stderr, proc.stdout + proc.stderr[-4000:]
    assert proc.stdout.strip() == "refused 2000"


def test_the_setters_check_their_values(api_checks):
    """Before: set_device("tpu"), set_cpu_kernels("sse9") and set_cuda_path("warp") returned
    OK, though lenet_c.h says a setter checks its value; the Engine failed later, at load."""
    proc = _run(api_checks / "option_checks", "setters")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
    assert said == {
        "device": "unknown device 'tpu' (expected 'cpu' or 'cuda')",
        "cpu_kernels": (
            "unknown CPU kernels 'sse9' (expected 'auto', 'avx512', 'avx2', 'neon', 'generic', 'blas' or 'nchw')"
        ),
        "cuda_path": "cuda_path must be 'auto', 'fused', 'library' or 'fast', not 'warp'",
        "precision": "precision must be 'exact' or 'fast', not 'half'",
        "good precision": "OK",
        "threads": "threads must be an integer in [1, 1024] (or 0: the CPUs this process may run on), got 2000",
        "null options": "lenet_options_set_device: options is NULL",
        "good": "OK",
        "engine": "InputError: unknown device 'tpu' (expected 'cpu' or 'cuda')",
    }
    # Python says the same of the same values (one check, in the core).
    with pytest.raises(lenet.InputError, match="unknown CPU kernels 'sse9'"):
        lenet.Engine("lenet5", device="cpu", cpu_kernels="sse9")
    with pytest.raises(lenet.InputError, match="precision must be 'exact' or 'fast', not 'half'"):
        lenet.Engine("lenet5", device="cpu", precision="half")


def test_a_python_format_given_to_cpp_names_the_command(classify, tmp_path):
    """Before: an .h5 given to the C++ API said "no lenet model file header ... not a lenet
    model file, or a damaged one", no word of how to get one."""
    h5 = tmp_path / "lenet5.h5"
    shutil.copy(REPO / "weights" / "lenet5.h5", h5)
    onnx = tmp_path / "net.onnx"
    shutil.copy(ONNX / "example_net.onnx", onnx)
    for path, what in ((h5, "an HDF5 file (a Keras model)"), (onnx, "an ONNX file")):
        proc = _run(classify, path, REPO / "examples" / "digit-7.png")
        assert proc.returncode == 1
        assert proc.stderr.strip() == (
            f"classify: {path}: {what}, not a lenet model file: the C++ API reads lenet's own format (.lenet), "
            f"which Python writes from any model it loads: lenet-cli --weights {path} "
            f"--save {path.with_suffix('.lenet')}"
        )


def test_a_png_of_another_size_says_its_size(classify, model, tmp_path):
    proc = _run(classify, model, _png_of(32, tmp_path))
    assert proc.returncode == 1
    assert ": a PNG of 32 x 32 (8-bit gray), not an 8-bit grayscale PNG of 28 x 28 (" in proc.stderr, proc.stderr


def test_what_a_product_needs(api_checks, tmp_path):
    """Before: no raw predict or output shape, no loading from memory, pointer calls that
    could not check the caller's buffer, and a moved-from Engine that segfaulted (exit 139)
    on any call."""
    path = tmp_path / "m.lenet"
    lenet.Engine(ONNX / "sigmoid_head.onnx", device="cpu", threads=1).save(path)  # outputs that are no distribution
    proc = _run(api_checks / "api_checks", path, REPO / "examples" / "digit-7.png")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    checks, describe = proc.stdout.split("describe:\n", 1)
    out = dict(line.split(": ", 1) for line in checks.splitlines() if ": " in line)
    v = lenet.__version__
    major, minor, patch = map(int, v.split("."))
    assert out["header version"] == f"{v} {major * 10000 + minor * 100 + patch} abi 1"
    assert out["library version"] == v
    engine = lenet.Engine(path, device="cpu", threads=1)
    assert out["image"] == "28 28 1 2"  # channels first
    assert out["input_shape"] == "1 28 28" and out["output_shape"] == "10"
    from PIL import Image

    pixels = np.asarray(Image.open(REPO / "examples" / "digit-7.png"), np.uint8)[None, None]
    x = pixels.astype(np.float32) * np.float32(engine.input_scale)
    raw = engine.predict(x)[0]
    assert np.array_equal(np.array(out["predict"].split(), np.float32), raw)  # %.9g: a float32 to the bit
    assert not np.isclose(raw.sum(), 1.0)  # raw outputs, not probabilities
    assert np.array_equal(np.array(out["predict_proba_pixels"].split(), np.float32), engine.predict_proba(x)[0])
    assert out["small buffer"] == "InputError: predict_proba: room for 9 floats, and 1 input gives 10"
    assert out["odd input"].startswith("InputError: predict_proba: expected a multiple of 784 values")
    assert out["from_memory source"] == "in-memory.lenet"
    assert out["damaged in memory"].startswith("ModelFileError: in-memory.lenet: damaged: ")
    for call in ("classes", "predict", "describe"):
        assert out[f"moved-from {call}"] == (
            f"Error: lenet::Engine::{call}: this Engine was moved from; it holds no model"
        )
    assert "device: cpu" in describe and "format version 3 (checksummed)" in describe
    assert "image: 28 x 28 x 1, channels first" in describe


def test_the_gpu_from_cpp(api_checks, model, tmp_path):
    """Before: device "cuda" from C++ raised CudaError pointing at Python's lenet.info(): the
    backend was compiled into the Python module only. Now the core loads the backend's own
    library on demand, which finds cuDNN and cuBLAS by the search Python's uses: the GPU, or
    a CudaError naming what is missing (here: the driver; then, with a driver's library but
    no GPU, the device)."""
    from lenet import _native

    if lenet.cuda_available():
        pytest.skip("a GPU is available: tools/gpu-check runs this program's GPU side")
    proc = _run(api_checks / "api_checks", model, REPO / "examples" / "digit-7.png")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = next(line for line in proc.stdout.splitlines() if line.startswith("cuda: "))[len("cuda: ") :]
    if not _native.cuda_built():
        assert said.startswith("CudaError: the CUDA backend is not available: lenet was built without it"), said
        return
    if _native.driver_present():
        assert said.startswith("CudaError: no usable CUDA device"), said
        return
    assert said.startswith("CudaError: no NVIDIA driver: libcuda.so.1 cannot be loaded"), said
    # A library of the driver's name that is no driver: cuDNN and cuBLAS load (from the
    # wheels beside the package, found by the backend itself), the CUDA runtime finds no
    # device, and the backend's CudaError crosses from its library into the C ABI as one.
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    stub = tmp_path / "libcuda.so.1"
    (tmp_path / "stub.c").write_text("int lenet_not_a_driver;\n")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub), str(tmp_path / "stub.c")], check=True
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(
        [str(api_checks / "api_checks"), str(model), str(REPO / "examples" / "digit-7.png")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "LD_LIBRARY_PATH": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = next(line for line in proc.stdout.splitlines() if line.startswith("cuda: "))[len("cuda: ") :]
    assert said.startswith("CudaError: no usable CUDA device: "), said


def test_the_c_abi_from_c(api_checks, model):
    proc = _run(api_checks / "c_program", model)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "error 4: threads must be an integer in [1, 1024] (or 0: the CPUs this process may run on), got -3"
    )
    expect = lenet.Engine(model, device="cpu", threads=1).predict_proba(np.zeros((1, 28, 28, 1), np.float32))[0]
    assert np.allclose([float(t) for t in lines[1].split()], expect, atol=1e-6)
    assert lines[2] == "error 4: predict_proba: room for 9 floats, and 1 input gives 10"
    assert lines[3] == "error 4: predict_proba: the engine is NULL"
    assert lines[4] == "error 2: /nonexistent.lenet: no such file"


def _library() -> Path:
    return Path(_core.__file__).parent / "liblenet.so.1"


def test_only_the_c_abi_is_exported():
    """Before: liblenet.so (no version in its soname) exported 304 symbols, internals
    included (ThreadPool, make_backend, model_file_parse). Now liblenet.so.1 exports the C
    ABI of lenet/lenet_c.h and nothing else, every name versioned: LENET_1, and LENET_1.1
    for lenet_options_set_precision (issue 74)."""
    if shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("nm and readelf (binutils) are not on the PATH")
    lib = _library()
    assert lib.is_file() and not (lib.parent / "liblenet.so").exists()
    soname = re.search(
        r"\(SONAME\).*\[(.*)\]", subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
    )
    assert soname and soname.group(1) == "liblenet.so.1"
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout.split(
        "\n"
    )
    names = [line.split()[-1] for line in symbols if line.strip()]
    nodes = {"LENET_1", "LENET_1.1"}  # cmake/lenet.map's version nodes
    declared = set(re.findall(r"\b(lenet_[a-z0-9_]+)\(", (REPO / "include" / "lenet" / "lenet_c.h").read_text()))
    assert {n.split("@")[0] for n in names if n not in nodes} == declared
    # A function added after the first release carries the node it came in (lenet_c.h says which).
    since = {"lenet_options_set_precision": "LENET_1.1"}
    for n in names:
        if n not in nodes:
            assert n == f"{n.split('@')[0]}@@{since.get(n.split('@')[0], 'LENET_1')}", n


def test_the_bench_harness_answers_as_the_engine_does(tmp_path):
    from lenet.bench import contenders as cs
    from lenet.bench import workload
    from lenet.bench.harness import Harness

    if not bench_harness().is_file():
        pytest.fail(f"{bench_harness()} is not installed")
    x = workload.to_input(np.random.default_rng(1).integers(0, 256, (16, 28, 28), dtype=np.uint8), 1 / 255)
    harness = Harness("lenet-cpp", cs.Ctx(lenet.shipped_weights("lenet5"), 1), x, [1, 8], tmp_path, {})
    try:
        assert harness.pid != os.getpid() and harness.versions["lenet (C++ harness)"] == lenet.__version__
        expect = lenet.Engine("lenet5", device="cpu", threads=1).predict_proba(x)
        assert np.array_equal(harness(x), expect)
        for batch in (1, 8, 64):  # 64: more than the 16 inputs, cycled as workload.batches does
            block = harness.block(batch, 0.02, 3)
            assert len(block.call_ns) >= 3 and block.images == batch * len(block.call_ns)
            assert all(t > 0 for t in block.call_ns) and block.wall_s > 0 and block.cpu_s >= 0
    finally:
        harness.close()
    assert harness.returncode == 0


def test_the_bench_harness_on_the_gpu(tmp_path):
    """lenet-bench's lenet-cpp-cuda rung: the same harness on device "cuda". Without a GPU
    the contender says why it is skipped, and the harness itself, asked anyway, answers
    the core's CudaError."""
    from lenet.bench import contenders as cs
    from lenet.bench import registry
    from lenet.bench.harness import Harness, HarnessError

    c = cs.CONTENDERS["lenet-cpp-cuda"]
    assert c.device == "cuda" and c.process == "cpp" and "lenet-cpp-cuda" in registry.ONNX_CONTENDERS
    if lenet.cuda_available():
        pytest.skip("a GPU is available: tools/gpu-check measures this rung")
    assert c.unavailable()
    with pytest.raises(HarnessError, match="lenet-cpp-cuda: .*(no NVIDIA driver|no usable CUDA device|built without)"):
        Harness("lenet-cpp-cuda", cs.Ctx(lenet.shipped_weights("lenet5"), 1), None, [], tmp_path, {}).close()
