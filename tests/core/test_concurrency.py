"""Threads: one Engine called from 8 threads x 1,000 calls gives exactly the serial
answers; so do threads on their own Engines; an Engine dropped by its owner while
another thread is calling it stays alive until that call ends, then is freed.
(tests/core/test_sanitizers.py runs this file on the ASan + UBSan build too.)"""

from __future__ import annotations

import gc
import threading
import weakref

import cv2
import numpy as np
import pytest
from conftest import REPO

import lenet

THREADS = 8
CALLS = 1000


@pytest.fixture(scope="module")
def batch():
    paths = sorted((REPO / "examples").glob("digit-*.png"))
    images = np.stack([cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in paths])
    x = np.concatenate([np.roll(images, s, axis=2) for s in range(-2, 3)]).astype(np.float32)[..., None] / 255
    return x  # (50, 28, 28, 1)


def _run_threads(work, n=THREADS):
    errors = []

    def guarded(t):
        try:
            work(t)
        except BaseException as e:  # an assertion in a thread does not fail the test by itself
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]


def _slices(x):
    """A different batch per thread: sizes 1 to 8, taken at different offsets."""
    return [x[5 * t : 5 * t + 1 + t] for t in range(THREADS)]


@pytest.mark.parametrize("threads", [1, 2])
def test_one_engine_8_threads_1000_calls_each(batch, threads):
    eng = lenet.Engine(device="cpu", threads=threads)
    inputs = _slices(batch)
    want = [eng.predict_proba(x) for x in inputs]
    counts = [0] * THREADS

    def work(t):
        for _ in range(CALLS):
            got = eng.predict_proba(inputs[t])
            assert np.array_equal(got, want[t]), f"thread {t}: an answer differs from the serial one"
            counts[t] += 1

    _run_threads(work)
    assert counts == [CALLS] * THREADS


def test_threads_on_their_own_engines(batch):
    """Each thread builds its own Engine (two models, one or two CPU threads); the
    reference is the same configuration called serially (a batch split over two CPU
    threads runs other GEMM shapes, so its last bits may differ from a one-thread run)."""
    configs = [("lenet5", 1), ("lenet-keras", 2), ("lenet5", 2), ("lenet-keras", 1)]
    inputs = _slices(batch)
    serial = {c: lenet.Engine(c[0], device="cpu", threads=c[1]) for c in configs}
    want = [serial[configs[t % 4]].predict_proba(inputs[t]) for t in range(THREADS)]

    def work(t):
        name, threads = configs[t % 4]
        eng = lenet.Engine(name, device="cpu", threads=threads)
        for _ in range(CALLS // 4):
            assert np.array_equal(eng.predict_proba(inputs[t]), want[t]), (name, threads, t)

    _run_threads(work)


def test_infer_from_threads_decodes_and_prepares_independently(batch):
    eng = lenet.Engine(device="cpu", threads=2)
    pngs = [cv2.imencode(".png", (x[..., 0] * 255).astype(np.uint8))[1].tobytes() for x in batch[:THREADS]]
    photo = cv2.imencode(".png", 255 - cv2.resize((batch[3, ..., 0] * 255).astype(np.uint8), (90, 70)))[1].tobytes()
    want = [eng.infer([p, photo]) for p in pngs]

    def work(t):
        for _ in range(50):
            got = eng.infer([pngs[t], photo])
            assert [r.digit for r in got] == [r.digit for r in want[t]]
            assert all(np.array_equal(g.probabilities, w.probabilities) for g, w in zip(got, want[t]))

    _run_threads(work)


def test_engine_released_while_another_thread_uses_it_stays_alive_then_is_freed(batch):
    """The owner drops every reference of its own while another thread is calling the engine
    through a bound method: the calls made after that still get the serial answers (the
    native engine was not torn down under them), and the engine is freed once the thread
    lets go."""
    eng = lenet.Engine(device="cpu", threads=2)
    x = batch
    want = eng.predict_proba(x)
    gone = weakref.ref(eng)
    started, owner_gone = threading.Event(), threading.Event()
    before, after = [], []

    def work(predict):  # holds the only reference left once the owner lets go
        while not owner_gone.is_set():
            before.append(np.array_equal(predict(x), want))
            started.set()
        for _ in range(50):  # these run after the owner's release, and while it is collected
            after.append(np.array_equal(predict(x), want))

    t = threading.Thread(target=work, args=(eng.predict_proba,))
    t.start()
    assert started.wait(60)
    del eng  # the owner lets go in the middle of the calls
    gc.collect()
    owner_gone.set()
    t.join()
    assert before and all(before)
    assert len(after) == 50 and all(after)
    del t
    gc.collect()
    assert gone() is None  # and freed once nobody uses it


def test_executor_outlives_its_model_and_engine(batch):
    """The C++ executor keeps the network it runs alive (a shared_ptr): dropping the
    Engine and the Model leaves a held executor working."""
    eng = lenet.Engine(device="cpu", threads=1)
    run = eng._executor.run
    want = run(np.ascontiguousarray(batch[:3]))
    model = weakref.ref(eng.model)
    del eng
    gc.collect()
    assert model() is None
    assert np.array_equal(run(np.ascontiguousarray(batch[:3])), want)
