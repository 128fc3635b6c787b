"""ARM64 (issue 66): the C++ library cross-compiled for aarch64 with the repository's CMake
toolchain file (cmake/aarch64-linux-gnu.cmake: Debian's cross compiler, the arm64 OpenBLAS
and libpng of the machine's multiarch folders), installed to a prefix; examples/cpp
cross-built against it and run under qemu-aarch64 on every examples/digit-*.png; and
tests/cpp/kernel_check.cpp, cross-built, checking the aarch64 kernel sets (neon, generic)
under emulation against the answers this x86-64 machine gives (its avx2 set) on the same
inputs: the shipped models on MNIST digits and users' kinds (an MLP, BatchNormalization and
Dropout, a residual Add, 3x3 convolutions run as Winograd F(4x4, 3x3)).

A slow job (the library's kernels take a minute to cross-compile on 2 cores; the emulated
checks about 20 s): CI runs it, with the packages .ci/run installs (g++-aarch64-linux-gnu,
qemu-user, and libopenblas-dev, libpng-dev and libstdc++6 for arm64). Programs run on the
multiarch runtime (libc6:arm64 in /lib/aarch64-linux-gnu), not with qemu's -L on the cross
toolchain's tree: a dynamically linked program there hung in its first pthread_create under
Debian 12's qemu 7.2.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import MNIST_DIR, REPO
from test_cpp_api import _tool

import lenet

pytestmark = pytest.mark.slow

TOOLCHAIN = REPO / "cmake" / "aarch64-linux-gnu.cmake"
ARM64_LIBS = "/usr/lib/aarch64-linux-gnu"
NEEDED = {
    "aarch64-linux-gnu-g++": "g++-aarch64-linux-gnu",
    "qemu-aarch64": "qemu-user",
}
NEEDED_LIBS = {
    "libopenblas.so": "libopenblas-dev:arm64",
    "libpng.so": "libpng-dev:arm64",
    "libstdc++.so.6": "libstdc++6:arm64",
}


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "CMAKE_PREFIX_PATH")}
    env.pop("LENET_MAX_CPU_ISA", None)  # the aarch64 program offers its own sets
    return env


def _ok(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=_env(), **kw)
    assert proc.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


def _emulated(*cmd, timeout=300):
    return _ok([shutil.which("qemu-aarch64"), *cmd], timeout=timeout)


@pytest.fixture(scope="module")
def arm64(tmp_path_factory):
    """The aarch64 library built (-j2) and installed to a prefix: (prefix, cmake, ninja)."""
    missing = [pkg for tool, pkg in NEEDED.items() if shutil.which(tool) is None]
    missing += [pkg for lib, pkg in NEEDED_LIBS.items() if not Path(ARM64_LIBS, lib).exists()]
    if missing:
        pytest.skip(f"no aarch64 cross build here: apt-get install {' '.join(missing)} (docs/install.md, ARM64)")
    cmake, ninja = _tool("cmake"), _tool("ninja")
    root = tmp_path_factory.mktemp("arm64")
    build, prefix = root / "build", root / "prefix"
    configure = _ok(
        [cmake, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}", "-S", REPO, "-B", build]
        + [f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", "-DLENET_CUDA=OFF"]
    )
    assert f"{ARM64_LIBS}/libopenblas.so" in configure.stdout, configure.stdout
    _ok([cmake, "--build", build, "--target", "lenet", "-j", "2"], timeout=1800)
    _ok([cmake, "--install", build, "--prefix", prefix])
    header = (prefix / "lib" / "liblenet.so.1").read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183, (
        "not an aarch64 ELF (EM_AARCH64)"
    )
    return prefix, cmake, ninja


def test_the_example_cross_built_reads_every_sample_digit_under_emulation(arm64, tmp_path):
    prefix, cmake, ninja = arm64
    build, where = tmp_path / "build", tmp_path / "installed"
    _ok(
        [cmake, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}", "-S", REPO / "examples" / "cpp", "-B", build]
        + [f"-DCMAKE_TOOLCHAIN_FILE={TOOLCHAIN}", f"-DCMAKE_PREFIX_PATH={prefix}"]
    )
    _ok([cmake, "--build", build])
    _ok([cmake, "--install", build, "--prefix", where])
    model = prefix / "share" / "lenet" / "lenet5.lenet"
    digits = sorted((REPO / "examples").glob("digit-*.png"))
    assert len(digits) == 10
    for png in digits:
        answer = _emulated(where / "bin" / "classify", model, png).stdout.split()
        assert answer[0] == png.stem.split("-")[1] and float(answer[1]) > 0.9, (png.name, answer)


def _mnist(n: int) -> np.ndarray:
    raw = gzip.open(MNIST_DIR / "t10k-images-idx3-ubyte.gz").read()
    return (np.frombuffer(raw, np.uint8, offset=16)[: n * 784].astype(np.float32) / 255).reshape(n, 28, 28, 1)


def _cases(tmp: Path):
    """(name, weights for lenet.Engine, inputs): the shipped models on MNIST digits (fewer
    for lenet-tf: 14 M multiply-adds an image, emulated), and users' kinds from the Keras zoo."""
    import keras_zoo

    digits = _mnist(300)
    yield "lenet5", "lenet5", digits
    yield "lenet-keras", "lenet-keras", digits
    yield "lenet-tf", "lenet-tf", digits[:40]
    # bn_trained: 3x3 convolutions of 16 and 32 channels, Winograd F(4x4, 3x3) on every set
    zoo = keras_zoo.build_zoo(
        tmp / "zoo", {"mlp784", "bn_dropout_functional", "residual", "bn_trained"}, {"keras3"}, {"keras"}
    )
    for m in zoo.values():
        yield m.case, str(m.path), m.x


# Every output is the same bits on aarch64's sets as on x86-64's avx2: the kernels take every
# sum in the same order and fuse each multiply-add on both, and the core's own arithmetic fuses
# none on either (CMakeLists.txt: -ffp-contract=off; without it, lenet-tf's Winograd weights and
# the folded BatchNormalization differed by a float32 ulp).
SAME_BITS = {"lenet5", "lenet-keras", "lenet-tf", "mlp784", "bn_dropout_functional", "residual", "bn_trained"}


def test_the_aarch64_kernels_give_x86_64s_answers_under_emulation(arm64, tmp_path):
    prefix, _, _ = arm64
    if "avx2" not in lenet.cpu_kernel_sets():
        pytest.skip("the x86-64 answers come from the avx2 set, which this CPU does not run")
    check = tmp_path / "kernel_check"
    _ok(
        ["aarch64-linux-gnu-g++", "-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"]
        + [f"-I{prefix / 'include'}", REPO / "tests" / "cpp" / "kernel_check.cpp"]
        + [f"-L{prefix / 'lib'}", "-llenet", f"-Wl,-rpath,{prefix / 'lib'}", "-o", check]
    )
    report = []
    for name, weights, x in _cases(tmp_path):
        engine = lenet.Engine(weights, device="cpu", cpu_kernels="avx2", threads=1)
        model = tmp_path / f"{name}.lenet"
        engine.save(str(model))
        x = np.ascontiguousarray(x, dtype=np.float32)
        x.tofile(tmp_path / f"{name}.x")
        engine.predict(x).astype(np.float32).tofile(tmp_path / f"{name}.y")
        out = _emulated(check, model, tmp_path / f"{name}.x", tmp_path / f"{name}.y", len(x), "1e-6").stdout
        lines = out.strip().splitlines()
        assert [line.split(":")[0] for line in lines] == [
            f"{s} threads={t}" for s in ("neon", "generic") for t in (1, 2)
        ], out
        assert all(line.endswith(": ok") for line in lines), f"{name}\n{out}"
        if name in SAME_BITS:
            for line in lines:
                same, total = map(int, re.search(r"(\d+) of (\d+) outputs", line).groups())
                assert same == total, f"{name}: {line}"
        report.append(f"{name}: {lines[0]}")
    print("\n" + "\n".join(report))
