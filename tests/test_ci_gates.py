"""lenet's CI gates (issue 46): with LENET_CI set, a skip that conftest.CI_MAY_SKIP does not
expect fails, and a run without the MNIST data stops before any test; without it, both skip
as on a developer's machine. Run on a small test file with this folder's conftest loaded as
a plugin, in a pytest of its own."""

import os
import subprocess
import sys

from conftest import TESTS

SAMPLE = """
import pytest

def test_passes():
    pass

def test_needs_a_gpu():
    pytest.skip("needs a CUDA GPU (none usable here)")

def test_needs_what_ci_has():
    pytest.skip("libfoo is not installed")

@pytest.mark.skipif(True, reason="a marker's skip of something CI has")
def test_marked():
    pass
"""


def _pytest(tmp_path, **env):
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    environ = {k: v for k, v in os.environ.items() if k not in ("LENET_CI", "LENET_MNIST_DIR")}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(TESTS), environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=120,
    )


def test_in_ci_an_unexpected_skip_fails_and_an_expected_one_passes(tmp_path):
    run = _pytest(tmp_path, LENET_CI="1")
    assert run.returncode == 1, run.stdout
    assert "FAILED test_sample.py::test_needs_what_ci_has" in run.stdout, run.stdout
    assert "ERROR test_sample.py::test_marked" in run.stdout, run.stdout
    assert "which must run it: Skipped: libfoo is not installed" in run.stdout, run.stdout
    assert "SKIPPED [1] test_sample.py:8: needs a CUDA GPU" in run.stdout, run.stdout
    assert "PASSED test_sample.py::test_passes" in run.stdout, run.stdout


def test_elsewhere_the_same_skips_pass(tmp_path):
    run = _pytest(tmp_path)
    assert run.returncode == 0, run.stdout
    assert "1 passed, 3 skipped" in run.stdout, run.stdout


def test_in_ci_no_mnist_stops_the_run_before_any_test(tmp_path):
    run = _pytest(tmp_path, LENET_CI="1", LENET_MNIST_DIR=str(tmp_path / "nowhere"))
    assert run.returncode != 0
    assert "LENET_CI is set but the MNIST data is not in" in run.stderr, run.stderr
    assert "passed" not in run.stdout


# What gives a test Keras' or TensorFlow's numbers: these modules, and these helpers of keras_fixtures.
KERAS_MODULES = {"keras", "tensorflow", "tf_keras", "keras_zoo", "keras1_files", "float64_reference", "keras_fixtures"}
KERAS_HELPERS = {"keras_predict", "keras_model", "fixture", "fixtures", "get_fixtures", "build_fixtures"}
# Test modules that use them without judging lenet by Keras' numbers.
NOT_KERAS_REFERENCED = {
    "tests/cuda/test_cuda.py": "GPU tests: the GPU machine has no TensorFlow (their reference is Keras on JAX)",
    "tests/models/test_fuzz_model.py": "fuzzers: Keras writes their seed files; they check refusals and crashes",
    "tests/models/test_keras_loader.py": "the loader's records and refusals: Keras writes the files, lenet reads them",
    "tests/cpp/test_aarch64.py": "Keras writes users' models; aarch64's answers are judged by x86-64 lenet's",
}


def _keras_imports(path):
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names} & (KERAS_MODULES - {"keras_fixtures"})
            found |= {a.name for a in node.names if a.name == "keras_fixtures"}
        elif isinstance(node, ast.ImportFrom) and node.module:
            top = node.module.split(".")[0]
            if top == "keras_fixtures":
                found |= {a.name for a in node.names} & KERAS_HELPERS
            elif top in KERAS_MODULES:
                found.add(top)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in KERAS_MODULES:
                found.add(str(arg.value).split(".")[0])
    return found


def test_every_test_that_judges_lenet_by_keras_is_marked_for_both_onednn_settings():
    """Issue 51: .ci/run runs the keras_reference tests a second time with TensorFlow's oneDNN on
    (the first pass has it off, as on most laptops). A test module that takes Keras' or
    TensorFlow's numbers marks its tests, or says here why it does not judge lenet by them."""
    unmarked = []
    for path in sorted(TESTS.rglob("test_*.py")):
        name = path.relative_to(TESTS.parent).as_posix()
        used = _keras_imports(path)
        if used and name not in NOT_KERAS_REFERENCED and "pytest.mark.keras_reference" not in path.read_text():
            unmarked.append(f"{name} ({', '.join(sorted(used))})")
    assert not unmarked, "mark them @pytest.mark.keras_reference or list them in NOT_KERAS_REFERENCED: " + "; ".join(
        unmarked
    )
    stale = [n for n in NOT_KERAS_REFERENCED if not _keras_imports(TESTS.parent / n)]
    assert not stale, f"no longer use Keras: {stale}"
