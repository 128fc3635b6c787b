"""The C++ API used as a C++ program uses it: examples/cpp built by CMake outside the tree
against the installed package (find_package(lenet) through `python -m lenet --cmake-dir`),
run on examples/digit-7.png; its errors carry Python's words; and lenet-bench's C++
harness (lenet-cpp) answers as the engine does from Python."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO

import lenet
from lenet._native import _core
from lenet.cpp import bench_harness, cmake_dir

EXAMPLE = REPO / "examples" / "cpp"


def _tool(name: str) -> str:
    """cmake and ninja of the test extra (the Python packages), else the system's."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install '.[test]')")
    return found


@pytest.fixture(scope="module")
def classify(tmp_path_factory):
    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler")
    out = subprocess.run(
        [sys.executable, "-m", "lenet", "--cmake-dir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert Path(out) == cmake_dir() and (Path(out) / "lenetConfig.cmake").is_file(), out
    build = tmp_path_factory.mktemp("example-build")
    cmake = _tool("cmake")
    configure = [cmake, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={_tool('ninja')}", "-S", str(EXAMPLE), "-B", str(build)]
    for cmd in (configure + [f"-Dlenet_DIR={out}"], [cmake, "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return build / "classify"


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
