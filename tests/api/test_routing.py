"""device="auto" routing (lenet.routing, issue 67; opt-in: LENET_AUTO_ROUTES=1): each call on
the device that answers it sooner, the GPU's executor made only when a call needs it. Checked
here with fake executors whose times follow a latency model on a fake clock, and with a real
Engine on a machine whose GPU cannot be used."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import lenet
from lenet import _native, routing


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeExecutor:
    """An executor whose call of n images takes ``call_s + n * per_image_s`` on ``clock``."""

    def __init__(self, device, clock, call_s, per_image_s, log):
        self.device, self.clock, self.call_s, self.per_image_s, self.log = device, clock, call_s, per_image_s, log
        self.threads = 2
        self.description = f"fake {device}"

    def probabilities(self, x):
        self.clock.t += self.call_s + len(x) * self.per_image_s
        self.log.append((self.device, len(x)))
        return np.full((len(x), 10), 0.1, np.float32)

    run = pixel_probabilities = probabilities

    def describe(self):
        return [{"capacity": 1, "device_said": self.device}]

    def pixel_answer(self, image):
        self.log.append((self.device, "pixel_answer"))
        return "answer"


# The H200 host of 2026-11-26, roughly: the CPU 7 us an image; the GPU 45 us a call + 0.1 us an image.
CPU = (0.0, 7e-6)
GPU = (45e-6, 0.1e-6)


def _router(gpu=GPU, cpu=CPU, usable=""):
    clock, log, made, asked = Clock(), [], [], []

    def make(device):
        made.append(device)
        if device == "cuda" and isinstance(gpu, Exception):
            raise gpu
        return FakeExecutor(device, clock, *(gpu if device == "cuda" else cpu), log)

    def gpu_usable():
        asked.append(1)
        return usable

    return routing.RoutedExecutor(make, gpu_usable, clock), log, made, asked


def test_one_image_at_a_time_never_makes_the_gpus_executor():
    r, log, made, asked = _router()
    x = np.zeros((1, 28, 28, 1), np.float32)
    for _ in range(100):
        r.probabilities(x)
    assert r.pixel_answer(x[0]) == "answer"
    assert made == ["cpu"] and not asked and r.gpu is None
    assert {d for d, _ in log} == {"cpu"}
    assert "not made yet" in r.description


@pytest.mark.parametrize("gpu_s", [(45e-6, 0.1e-6), (10e-6, 0.05e-6), (400e-6, 2e-6)])
def test_each_batch_size_goes_where_it_is_answered_sooner(gpu_s):
    """Once the GPU has been timed (its fixed cost is known from its own calls, not the H200's
    default), every call goes to the faster device: never more than 10% slower than the
    faster of the two at any batch size from 1 to 8192."""
    r, log, _, _ = _router(gpu=gpu_s)
    sizes = [2**k for k in range(14)] + [3, 37, 300, 5000]
    for sweep in range(2):
        for n in sizes:
            x = np.zeros((n, 4), np.float32)
            for _ in range(3):
                r.probabilities(x)
            device, _ = log[-1]
            took = {d: s[0] + n * s[1] for d, s in (("cpu", CPU), ("cuda", gpu_s))}
            if sweep:
                assert took[device] <= 1.1 * min(took.values()), (n, device, took)
    cross = r.crossover()
    want = next(b for b in (2**k for k in range(14)) if gpu_s[0] + b * gpu_s[1] < b * CPU[1])
    assert cross == want, (cross, want)


def test_describe_says_where_each_batch_size_goes_and_why():
    r, _, _, _ = _router()
    r.probabilities(np.zeros((1, 4), np.float32))
    routes = r.routes()
    assert [x["batch"] for x in routes] == [2**k for k in range(14)]
    assert routes[0]["device"] == "cpu" and "measured" not in routes[0]["why"]  # the GPU not timed yet
    assert routes[-1]["device"] == "cuda" and routes[-1]["why"].startswith("modelled at batch 8192")
    r.probabilities(np.zeros((8192, 4), np.float32))
    r.probabilities(np.zeros((8192, 4), np.float32))  # the GPU's executor is made, then timed here
    assert r.routes()[-1]["why"].startswith("modelled") or "GPU" in r.routes()[-1]["why"]
    plans = r.describe()
    assert {p["device"] for p in plans} == {"cpu", "cuda"}


@pytest.mark.parametrize("failure", ["unusable", "raises"])
def test_a_gpu_that_cannot_be_used_leaves_every_call_on_the_cpu_saying_why(failure):
    if failure == "unusable":
        r, log, made, asked = _router(usable="no NVIDIA driver (libcuda.so.1 not found)")
    else:
        r, log, made, asked = _router(gpu=lenet.CudaError("cudaMalloc failed: out of memory"))
    for n in (1, 4096, 4096, 8192):
        out = r.probabilities(np.zeros((n, 4), np.float32))
        assert out.shape == (n, 10)
    assert {d for d, _ in log} == {"cpu"} and len(asked) == 1
    assert r.gpu is None and r.crossover() is None
    said = r.routes()[-1]["why"]
    assert said.startswith("the GPU cannot be used") and ("libcuda" in said or "out of memory" in said)
    assert "cannot be used" in r.description


def test_an_engine_on_auto_routes_and_answers_as_the_cpu_where_its_gpu_cannot_be_used(monkeypatch):
    """The real Engine, with the opt-in, on a machine made to look as if it had a driver: small
    batches on the CPU, the GPU tried for a large one, found unusable (no GPU here), every
    answer the CPU engine's to the bit, describe() and summary() saying so."""
    if lenet.cuda_available():
        pytest.skip("a GPU is usable here: tools/gpu-check times the routing on it")
    monkeypatch.setenv(routing.OPT_IN_VARIABLE, "1")
    monkeypatch.setattr(lenet.device, "cuda_built", lambda: True)
    monkeypatch.setattr(_native, "driver_present", lambda: True)
    x = np.random.default_rng(67).random((4096, 28, 28, 1), dtype=np.float32)
    cpu = lenet.Engine("lenet5", device="cpu", threads=1)
    with lenet.Engine("lenet5", device="auto", threads=1) as eng:
        assert eng.device == "auto"
        assert eng._executor.gpu is None  # nothing of CUDA made at construction
        np.testing.assert_array_equal(eng.predict_proba(x[:1]), cpu.predict_proba(x[:1]))
        assert eng._executor.gpu is None and not eng._executor.gpu_unusable  # one image: never asked
        np.testing.assert_array_equal(eng.predict_proba(x), cpu.predict_proba(x))
        d = eng.describe()
        assert d["device"] == "auto" and d["routing"]["gpu_unusable"] and d["routing"]["crossover"] is None
        assert all(p["device"] == "cpu" for p in d["plans"])
        assert "the GPU cannot be used" in eng.summary_text()
    monkeypatch.delenv(routing.OPT_IN_VARIABLE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU fallback's one warning (tests/cuda/test_cuda.py checks it)
        assert lenet.Engine("lenet5", device="auto").device == "cpu"  # without the opt-in: as before
