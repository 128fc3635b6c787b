"""What a C++ user does, without Python (issue 65): the library built by CMake alone
(LENET_PYTHON=OFF, the default of a plain CMake build, with Python and pybind11 made
unfindable), installed to a prefix, its build tree removed; then a program of one's own
built with find_package(lenet) that ships the library (examples/cpp, as docs/cpp.md shows
it) and one built with pkg-config, each run from its install prefix with every build tree
gone, loading only its own copies (LD_DEBUG=libs).

A slow job (the library's kernels take about a minute to compile on 2 cores): CI runs it.
OpenBLAS is the system's (Debian's libopenblas-dev, which .ci/run installs); where there
is none, the scipy-openblas32 wheel's, installed beside the library.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from test_cpp_api import _tool, loaded_libraries, runpath

import lenet

pytestmark = pytest.mark.slow

DIGIT = REPO / "examples" / "digit-7.png"


def _env():
    """No Python around the builds and the programs: the virtual environment's folders off
    the PATH, no PYTHONPATH, no LD_LIBRARY_PATH."""
    drop = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PKG_CONFIG_PATH", "CMAKE_PREFIX_PATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(venv))
    return env


def _ok(cmd, **kw):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=kw.pop("env", _env()), **kw)
    assert proc.returncode == 0, f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """The library built (its target alone, -j2) and installed to a prefix; the build tree removed."""
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    cmake, ninja = _tool("cmake"), _tool("ninja")
    root = tmp_path_factory.mktemp("cmake-only")
    build, prefix = root / "build", root / "prefix"
    configure = [
        cmake,
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={ninja}",
        "-S",
        REPO,
        "-B",
        build,
        "-DLENET_CUDA=OFF",
        # Proof that no Python is needed: a find_package of either fails the configure.
        "-DCMAKE_DISABLE_FIND_PACKAGE_Python=ON",
        "-DCMAKE_DISABLE_FIND_PACKAGE_pybind11=ON",
    ]
    proc = subprocess.run([str(c) for c in configure], capture_output=True, text=True, env=_env())
    if proc.returncode != 0 and "no OpenBLAS was found" in proc.stdout + proc.stderr:
        import scipy_openblas32

        shutil.rmtree(build)
        wheel = Path(scipy_openblas32.get_lib_dir()).parent
        print(f"\nno system OpenBLAS: the scipy-openblas32 wheel's ({wheel})")
        configure += ["-DLENET_BLAS=scipy-openblas", f"-DSCIPY_OPENBLAS32_DIR={wheel}"]
        proc = subprocess.run([str(c) for c in configure], capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Python modules OFF" in proc.stdout, proc.stdout
    _ok([cmake, "--build", build, "--target", "lenet", "-j", "2"], timeout=1800)
    _ok([cmake, "--install", build, "--prefix", prefix])
    shutil.rmtree(build)
    return prefix


def _copy(prefix: Path, to: Path) -> Path:
    shutil.copytree(prefix, to, symlinks=True)
    return to


def test_the_standard_layout(prefix):
    lib = prefix / "lib"
    assert (lib / "liblenet.so.1").is_file() and not (lib / "liblenet.so.1").is_symlink()
    assert os.readlink(lib / "liblenet.so") == "liblenet.so.1"
    assert sorted(p.name for p in (prefix / "include" / "lenet").iterdir()) == [
        "errors.h",
        "lenet.h",
        "lenet_c.h",
        "version.h",
    ]
    assert sorted(p.name for p in (lib / "cmake" / "lenet").iterdir()) == [
        "lenetConfig.cmake",
        "lenetConfigVersion.cmake",
    ]
    assert (lib / "pkgconfig" / "lenet.pc").is_file()
    assert (prefix / "share" / "lenet" / "lenet5.lenet").is_file()
    # The version from pyproject.toml, as pip's build has it.
    version = (prefix / "include" / "lenet" / "version.h").read_text()
    assert f'#define LENET_VERSION_STRING "{lenet.__version__}"' in version
    assert f"Version: {lenet.__version__}" in (lib / "pkgconfig" / "lenet.pc").read_text()
    # Nothing of the build machine's folders in the library: the system's OpenBLAS by the
    # system's search, or the wheel's beside it.
    if shutil.which("readelf"):
        assert all(p.startswith("$ORIGIN") for p in runpath(lib / "liblenet.so.1")), runpath(lib / "liblenet.so.1")


def _own_copies(exe: Path, model: Path, lib: Path):
    """exe classifies the seven, and loads liblenet (and a wheel's OpenBLAS) from `lib` only."""
    proc = subprocess.run([str(exe), str(model), str(DIGIT)], capture_output=True, text=True, env=_env(), timeout=60)
    assert proc.returncode == 0 and proc.stdout.split()[0] == "7", proc.stdout + proc.stderr
    loaded = loaded_libraries(exe, model, DIGIT)
    assert os.path.dirname(os.path.realpath(loaded["liblenet.so.1"])) == str(lib.resolve()), loaded
    if "libscipy_openblas.so" in loaded:
        assert os.path.dirname(os.path.realpath(loaded["libscipy_openblas.so"])) == str(lib.resolve()), loaded
    return proc.stdout


def test_a_program_built_with_find_package_ships_the_library(prefix, tmp_path):
    """examples/cpp against the install (CMAKE_PREFIX_PATH), installed to its own prefix with
    the library beside it; then its build tree and the library's prefix are removed."""
    cmake, ninja = _tool("cmake"), _tool("ninja")
    lenet_prefix = _copy(prefix, tmp_path / "lenet")
    model = shutil.copy(prefix / "share" / "lenet" / "lenet5.lenet", tmp_path / "lenet5.lenet")
    build, app = tmp_path / "build", tmp_path / "app"
    _ok([cmake, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}", "-S", REPO / "examples" / "cpp", "-B", build,
         f"-DCMAKE_PREFIX_PATH={lenet_prefix}"])  # fmt: skip
    _ok([cmake, "--build", build])
    _ok([cmake, "--install", build, "--prefix", app])
    shutil.rmtree(build)
    shutil.rmtree(lenet_prefix)
    exe = app / "bin" / "classify"
    if shutil.which("readelf"):
        assert runpath(exe) == ["$ORIGIN/../lib"]
    _own_copies(exe, Path(model), app / "lib")


def test_a_program_built_with_pkg_config(prefix, tmp_path):
    """A program compiled with `pkg-config --cflags --libs lenet` (-llenet: the liblenet.so
    link) and installed in the library's prefix, bin/ beside lib/; the prefix then moves
    (lenet.pc finds its prefix where it lies, the program its library through $ORIGIN)."""
    pkg_config = shutil.which("pkg-config") or pytest.skip("pkg-config is not on the PATH")
    cxx = shutil.which("c++")
    here = _copy(prefix, tmp_path / "lenet")
    env = {**_env(), "PKG_CONFIG_PATH": str(here / "lib" / "pkgconfig")}
    flags = _ok([pkg_config, "--cflags", "--libs", "lenet"], env=env).stdout.split()
    assert "-llenet" in flags and any(re.fullmatch(r"-I.*/include", f) for f in flags), flags
    (here / "bin").mkdir()
    exe = here / "bin" / "classify"
    _ok([cxx, "-std=c++17", "-O1", REPO / "examples" / "cpp" / "classify.cpp", *flags, "-Wl,-rpath,$ORIGIN/../lib",
         "-o", exe])  # fmt: skip
    moved = here.rename(tmp_path / "moved")
    _own_copies(moved / "bin" / "classify", moved / "share" / "lenet" / "lenet5.lenet", moved / "lib")
