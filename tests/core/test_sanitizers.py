"""The sanitizer job: the C++ core built with AddressSanitizer + UndefinedBehaviorSanitizer
(CPU only), then

* tests/core/core_cycles.cpp against it with LeakSanitizer on: 1,000 load -> infer -> release
  cycles over three networks plus 1,000 refused builds (no leak), and 8 threads x 1,000
  calls on one Executor and on their own Executors (bit-identical to the serial answers);
* the C++-facing Python tests (tests/core/test_ops.py, test_engine.py, test_concurrency.py,
  test_fuzz_images.py's named cases) on a copy of the package holding the sanitized
  modules, with libasan and libubsan preloaded into Python (leak detection off there:
  CPython itself does not free everything at exit).

And the thread job: the core built with ThreadSanitizer (build/tsan/, the C++ library
alone, LENET_PYTHON=OFF), tests/core/core_cycles.cpp against it: 4 threads submitting
parallel_for jobs to one ThreadPool at once (plain writes handed over, exceptions
rethrown), and the 8-thread calls on shared and own Executors of 2 threads (the pool under
the executor).

Any sanitizer report fails the test, with the report. The builds go to build/sanitizers/
and build/tsan/ (incremental; minutes from scratch on 2 cores: slow jobs, run where
LENET_SLOW_TESTS=1, as CI does).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest
from conftest import REPO, TESTS

pytestmark = pytest.mark.slow

BUILD = REPO / "build" / "sanitizers"
SANITIZE = "-fsanitize=address,undefined"
CXXFLAGS = f"{SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
REPORT = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY: (Address|UndefinedBehavior|Leak)"
    r"Sanitizer"
)
PY_TESTS = [
    "tests/core/test_ops.py",
    "tests/api/test_engine.py",
    "tests/core/test_concurrency.py",
    "tests/images/test_fuzz_images.py",
]
# The fuzzers run in their own processes (atheris' libFuzzer is not built for ASan);
# the batch of 100,000 takes minutes at ASan's speed.
PY_DESELECT = "not fuzz_encoded and not fuzz_arrays and not 100000"


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        _missing(f"{tool} is not on the PATH")
    return path


def _missing(why: str):
    pytest.skip(f"the sanitizer job cannot run here: {why}")


def _runtime(name: str) -> str:
    """The compiler's sanitizer runtime library (e.g. libasan.so), which Python needs preloaded."""
    out = subprocess.run([_need("g++"), f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        _missing(f"g++ has no {name} (install the compiler's sanitizer runtime, e.g. libasan8 and libubsan1)")
    return os.path.realpath(out)


def _run(cmd, env=None, timeout=1200, cwd=REPO):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, timeout=timeout, cwd=cwd)


def _fail_on_reports(proc, what):
    log = proc.stdout + proc.stderr
    m = REPORT.search(log)
    if m or proc.returncode != 0:
        start = max(0, (m.start() if m else len(log)) - 3000)
        pytest.fail(
            f"{what}: exit {proc.returncode}{', sanitizer report' if m else ''}\n{log[start : start + 12000]}",
            pytrace=False,
        )
    return log


@pytest.fixture(scope="module")
def sanitized():
    """Builds liblenet and _core (each holding the core) with the sanitizers, a package copy
    using them, and the core_cycles driver. Returns (package dir, driver, preload)."""
    cmake = _need("cmake")
    gxx = _need("g++")
    preload = f"{_runtime('libasan.so')}:{_runtime('libubsan.so')}"
    try:
        import pybind11
    except ImportError:
        _missing("pybind11 is not installed (pip install '.[test]')")
    import lenet

    configure = [
        cmake,
        "-S",
        str(REPO),
        "-B",
        str(BUILD),
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DLENET_CUDA=OFF",
        f"-DCMAKE_CXX_FLAGS={CXXFLAGS}",
        f"-DCMAKE_SHARED_LINKER_FLAGS={SANITIZE}",
        f"-DCMAKE_MODULE_LINKER_FLAGS={SANITIZE}",
        f"-DPython_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DSKBUILD_PROJECT_VERSION={lenet.__version__}",
        "-DLENET_PYTHON=ON",
        "-DLENET_KERNEL_OPT=-O1",  # the kernel sets at -O3 under the sanitizers: 3.4x the compile time
    ]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"] if not (BUILD / "CMakeCache.txt").exists() else []
    _fail_on_reports(_run(configure, timeout=600), "configuring the sanitized build")
    _fail_on_reports(_run([cmake, "--build", str(BUILD), "-j", "2"], timeout=1800), "building the sanitized core")

    pkg = BUILD / "pkg"
    shutil.rmtree(pkg, ignore_errors=True)
    # Only the sanitized native modules: a checkout with modules built in place (or linked
    # there) would otherwise bring an uninstrumented _cuda against the sanitized liblenet.
    shutil.copytree(REPO / "python" / "lenet", pkg / "lenet", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    for lib in [*BUILD.glob("_core*.so"), BUILD / "liblenet.so.1"]:
        shutil.copy(lib, pkg / "lenet" / lib.name)
    (pkg / "lenet" / "weights").mkdir(exist_ok=True)
    for w in (REPO / "weights").glob("*.h5"):
        shutil.copy(w, pkg / "lenet" / "weights" / w.name)

    # The driver uses the core's internals, which liblenet does not export: it links the
    # core's archive, and what the core links.
    import scipy_openblas32

    driver = BUILD / "core_cycles"
    src = TESTS / "core" / "core_cycles.cpp"
    archive = BUILD / "liblenet_core_static.a"
    if not driver.exists() or driver.stat().st_mtime < max(src.stat().st_mtime, archive.stat().st_mtime):
        _fail_on_reports(
            _run(
                [
                    gxx,
                    "-std=c++17",
                    *CXXFLAGS.split(),
                    "-I",
                    str(REPO / "csrc"),
                    str(src),
                    "-o",
                    str(driver),
                    str(archive),
                    "-L",
                    scipy_openblas32.get_lib_dir(),
                    "-lscipy_openblas",
                    f"-Wl,-rpath,{scipy_openblas32.get_lib_dir()}",
                    *re.findall(r"^PNG_LIBRARY_RELEASE:FILEPATH=(/.+)$", (BUILD / "CMakeCache.txt").read_text(), re.M),
                    "-pthread",
                ],
                timeout=600,
            ),
            "building tests/core/core_cycles.cpp",
        )
    return pkg, driver, preload


def _driver_env():
    # LeakSanitizer on; OpenBLAS' own thread pool would be reported as reachable, not leaked.
    return dict(
        os.environ,
        ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:abort_on_error=0:strict_string_checks=1",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        OPENBLAS_NUM_THREADS="1",
    )


def test_core_load_infer_release_cycles_do_not_leak(sanitized):
    _, driver, _ = sanitized
    log = _fail_on_reports(_run([str(driver), "cycles", "1000"], env=_driver_env()), "core_cycles cycles 1000")
    assert "ok cycles=1000 runs=1000 refused=1000" in log, log


def test_core_threads_get_the_serial_answers(sanitized):
    _, driver, _ = sanitized
    log = _fail_on_reports(_run([str(driver), "threads", "250"], env=_driver_env()), "core_cycles threads 250")
    assert "ok threads=8 calls=250 models=4" in log, log


def test_python_suite_on_the_sanitized_core(sanitized):
    pkg, _, preload = sanitized
    env = dict(
        os.environ,
        LD_PRELOAD=preload,
        PYTHONPATH=os.pathsep.join([str(pkg), str(TESTS)]),
        ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0",
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
        OPENCV_LOG_LEVEL="OFF",
        LENET_SANITIZED_RUN="1",
    )
    where = _run([sys.executable, "-c", "import lenet, lenet._core as c; print(c.__file__)"], env=env, timeout=300)
    _fail_on_reports(where, "importing the sanitized package")
    assert where.stdout.strip().startswith(str(pkg)), where.stdout
    proc = _run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-k", PY_DESELECT, *PY_TESTS],
        env=env,
        timeout=3000,
    )
    log = _fail_on_reports(proc, "the C++-facing tests under ASan + UBSan")
    m = re.search(r"(\d+) passed", log)
    assert m and int(m.group(1)) >= 100, log[-3000:]
    print(log.strip().splitlines()[-1])


def test_the_build_is_really_sanitized(sanitized):
    """A test that cannot fail is a defect: the modules must carry the ASan runtime's symbols."""
    pkg, driver, _ = sanitized
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not on the PATH")
    for lib in [pkg / "lenet" / "liblenet.so.1", *(pkg / "lenet").glob("_core*.so"), driver]:
        syms = (
            _run([nm, "-D", "--undefined-only", str(lib)]).stdout if ".so" in lib.name else _run([nm, str(lib)]).stdout
        )
        assert "__asan_" in syms and "__ubsan_" in syms, lib
    assert sysconfig.get_config_var("EXT_SUFFIX") in " ".join(p.name for p in (pkg / "lenet").iterdir())


# ---- ThreadSanitizer

TSAN_BUILD = REPO / "build" / "tsan"
TSAN = "-fsanitize=thread"
TSAN_REPORT = re.compile(r"WARNING: ThreadSanitizer|SUMMARY: ThreadSanitizer|ThreadSanitizer: ")


@pytest.fixture(scope="module")
def tsan_driver():
    """The core's archive built with ThreadSanitizer (no Python modules), and core_cycles on it."""
    cmake = _need("cmake")
    gxx = _need("g++")
    _runtime("libtsan.so")
    flags = f"{TSAN} -fno-omit-frame-pointer -g -O1"
    configure = [
        cmake,
        "-S",
        str(REPO),
        "-B",
        str(TSAN_BUILD),
        "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DLENET_CUDA=OFF",
        "-DLENET_PYTHON=OFF",
        "-DLENET_KERNEL_OPT=-O1",
        f"-DCMAKE_CXX_FLAGS={flags}",
        f"-DCMAKE_SHARED_LINKER_FLAGS={TSAN}",
    ]
    if shutil.which("ninja") and not (TSAN_BUILD / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]
    proc = _run(configure, timeout=600)
    if proc.returncode != 0 and "no OpenBLAS was found" in proc.stdout + proc.stderr:
        import scipy_openblas32  # no system OpenBLAS: the wheel's

        configure += [
            "-DLENET_BLAS=scipy-openblas",
            f"-DSCIPY_OPENBLAS32_DIR={os.path.dirname(scipy_openblas32.get_lib_dir())}",
        ]
        proc = _run(configure, timeout=600)
    _fail_on_reports(proc, "configuring the ThreadSanitizer build")
    _fail_on_reports(
        _run([cmake, "--build", str(TSAN_BUILD), "--target", "lenet_core_static", "-j", "2"], timeout=1800),
        "building the core with ThreadSanitizer",
    )
    cache = (TSAN_BUILD / "CMakeCache.txt").read_text()
    libraries = re.findall(r"^(?:OPENBLAS_LIBRARY|PNG_LIBRARY_RELEASE):FILEPATH=(/.+)$", cache, re.M)
    driver = TSAN_BUILD / "core_cycles"
    src = TESTS / "core" / "core_cycles.cpp"
    archive = TSAN_BUILD / "liblenet_core_static.a"
    if not driver.exists() or driver.stat().st_mtime < max(src.stat().st_mtime, archive.stat().st_mtime):
        rpaths = [f"-Wl,-rpath,{os.path.dirname(lib)}" for lib in libraries]
        _fail_on_reports(
            _run(
                [
                    gxx,
                    "-std=c++17",
                    *flags.split(),
                    "-I",
                    str(REPO / "csrc"),
                    str(src),
                    "-o",
                    str(driver),
                    str(archive),
                    *libraries,
                    *rpaths,
                    "-pthread",
                ],  # fmt: skip
                timeout=600,
            ),
            "building tests/core/core_cycles.cpp with ThreadSanitizer",
        )
    return driver


def _tsan_run(driver, *args):
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1", OPENBLAS_NUM_THREADS="1")
    proc = _run([str(driver), *args], env=env, timeout=1200)
    log = proc.stdout + proc.stderr
    m = TSAN_REPORT.search(log)
    if m or proc.returncode != 0:
        start = max(0, (m.start() if m else len(log)) - 2000)
        pytest.fail(
            f"core_cycles {' '.join(args)} under ThreadSanitizer: exit {proc.returncode}\n{log[start : start + 12000]}",
            pytrace=False,
        )
    return log


def test_the_thread_pool_under_tsan(tsan_driver):
    log = _tsan_run(tsan_driver, "pool", "2000")
    assert "ok pool callers=4 jobs=2000" in log, log


def test_threads_on_executors_under_tsan(tsan_driver):
    log = _tsan_run(tsan_driver, "threads", "40")
    assert "ok threads=8 calls=40 models=4" in log, log


def test_the_tsan_build_is_really_instrumented(tsan_driver):
    """A test that cannot fail is a defect: the driver and the core carry TSan's calls."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm is not on the PATH")
    for binary in (tsan_driver, TSAN_BUILD / "liblenet_core_static.a"):
        assert "__tsan_" in _run([nm, str(binary)]).stdout, binary
