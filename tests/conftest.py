"""Shared test set-up: the `requires_cuda` marker, the MNIST test set, paths."""

import os
import pathlib
import sys

import pytest

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
# The tests are grouped by what they test (core/, cuda/, models/, images/, api/, cli/,
# serve/, bench/, ray/); their shared helpers (keras_fixtures, photo_fixtures, fuzz_runner,
# test_ops' layer builders, ...) import by name from any folder.
for _folder in [TESTS] + sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name not in ("data", "__pycache__")):
    sys.path.insert(0, str(_folder))

# ../shared/mnist beside the checkout (CI has it); LENET_MNIST_DIR overrides.
MNIST_DIR = pathlib.Path(os.environ.get("LENET_MNIST_DIR", REPO.parent / "shared" / "mnist"))
MNIST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz")

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# lenet's own CI (.ci/run exports LENET_CI=1) runs every test a machine like its own can run:
# there a skip for a missing piece (the MNIST data, libpng's headers, Chromium, atheris, the
# sanitizer runtime, a package of the test extra) fails the run instead of passing in silence.
# These are the only skips CI expects, each for what CI's machine lacks by design.
CI = bool(os.environ.get("LENET_CI"))
CI_MAY_SKIP = {
    "needs a CUDA GPU": "CI has no GPU: the GPU tests run on a lent GPU machine (tools/gpu-check)",
    "a GPU is available": "the no-GPU side of a test that has two",
    "torch is not installed": "PyTorch is an optional lenet-bench peer (docs/contributing.md)",
    "could not import 'torch'": "the same, from pytest.importorskip",
    "jax is not installed": "JAX is an optional lenet-bench peer (docs/contributing.md)",
    "could not import 'jax'": "the same, from pytest.importorskip",
    "has no keras.layers.": "a Keras layer class that the installed Keras does not have",
    "needs Python 3.11": "what an older Python lacks",
}


def _cuda_available():
    try:
        import lenet

        return lenet.cuda_available()
    except Exception:
        return False


requires_cuda = pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (none usable here)")


# The slow jobs (minutes each on 2 cores: the sanitized build of the core, the manylinux wheel)
# run in CI and where LENET_SLOW_TESTS=1 asks for them, not in a newcomer's first pytest.
SLOW = bool(os.environ.get("LENET_SLOW_TESTS"))
slow_job = pytest.mark.skip(reason="a slow job (minutes on 2 cores): LENET_SLOW_TESTS=1 runs it, as CI does")


def pytest_xdist_auto_num_workers(config):
    """-n auto (pyproject.toml's addopts): a worker per core this process may use, at most 4 —
    each imports TensorFlow and builds what its tests share (1-3 GB), and past 4 the shared
    set-ups outweigh the gain."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_cuda: needs a usable CUDA GPU; skipped visibly without one")
    config.addinivalue_line(
        "markers", "slow: a job of minutes; runs where LENET_SLOW_TESTS=1 (CI), skips visibly elsewhere"
    )
    config.addinivalue_line(
        "markers",
        "keras_reference: judges lenet's numbers by what Keras or TensorFlow computes; CI runs these "
        "with TensorFlow's oneDNN off and on (TF_ENABLE_ONEDNN_OPTS), which sum in different orders",
    )
    if CI and not all((MNIST_DIR / f).is_file() for f in MNIST_FILES):
        # Every MNIST gate would skip and the zoo would fall back to random inputs.
        raise pytest.UsageError(f"LENET_CI is set but the MNIST data is not in {MNIST_DIR} (LENET_MNIST_DIR)")


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def _fail_unexpected_skip(report) -> None:
    """In lenet's CI, a skip that CI_MAY_SKIP does not name becomes a failure saying why."""
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = _skip_reason(report)
        if not any(expected in reason for expected in CI_MAY_SKIP):
            report.outcome = "failed"
            report.longrepr = f"skipped in lenet's CI (LENET_CI is set), which must run it: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_unexpected_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_unexpected_skip(outcome.get_result())


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("requires_cuda"):
            item.add_marker(requires_cuda)
        if item.get_closest_marker("slow") and not SLOW:
            item.add_marker(slow_job)
    if SLOW:
        # The files with slow jobs first (a stable sort: the order within a file is kept): under
        # pytest-xdist each is a worker's for minutes (the sanitized build compiles the kernels for
        # about 10 minutes on 2 cores), and started last it would run alone after the rest had finished.
        # Files that are slow jobs throughout (the two builds) before those with a few.
        counts: dict = {}
        for item in items:
            total, slow = counts.get(item.path, (0, 0))
            counts[item.path] = (total + 1, slow + bool(item.get_closest_marker("slow")))
        items.sort(key=lambda item: -counts[item.path][1] / counts[item.path][0])


@pytest.fixture(scope="session")
def engine():
    """The shipped lenet5 on the CPU with 2 threads: the engine most tests run on (a test
    file that needs another defines its own `engine`)."""
    import lenet

    return lenet.Engine("lenet5", device="cpu", threads=2)


def _read_idx(path):
    from lenet.bench.workload import read_idx  # the one IDX reader (lenet-bench and tools/train share it)

    return read_idx(pathlib.Path(path))


def check_concurrent_calls(predict, x, sizes, rounds, compare):
    """Calls predict(x[:n]) from one thread per n in `sizes`, `rounds` times each, and
    checks every answer against the serial one with compare(got, want)."""
    import threading

    want = {n: predict(x[:n]) for n in sizes}
    errors = []

    def call(n):
        try:
            for _ in range(rounds):
                compare(predict(x[:n]), want[n])
        except Exception as e:  # an assertion in a thread does not fail the test by itself
            errors.append(e)

    threads = [threading.Thread(target=call, args=(n,)) for n in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


@pytest.fixture(scope="session")
def mnist_test():
    """(images uint8 (10000, 28, 28), labels uint8 (10000,)) of the canonical MNIST test set."""
    images = MNIST_DIR / "t10k-images-idx3-ubyte.gz"
    labels = MNIST_DIR / "t10k-labels-idx1-ubyte.gz"
    if not images.exists() or not labels.exists():
        pytest.skip(f"MNIST test set not found in {MNIST_DIR}")
    return _read_idx(images), _read_idx(labels)
