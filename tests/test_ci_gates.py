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
