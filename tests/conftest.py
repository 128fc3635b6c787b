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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _cuda_available():
    try:
        import lenet

        return lenet.cuda_available()
    except Exception:
        return False


requires_cuda = pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (none usable here)")


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_cuda: needs a usable CUDA GPU; skipped visibly without one")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.get_closest_marker("requires_cuda"):
            item.add_marker(requires_cuda)


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
