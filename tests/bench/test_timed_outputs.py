"""lenet-bench judges agreement on what the timed calls answered (issue 75), not only on a
separate loading call: a contender right when it is loaded and wrong once timed is caught, in
this process, in a process of its own and from the C++ harness's side of the protocol."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lenet
from lenet.bench import measure
from lenet.bench.harness import Harness
from lenet.bench.registry import Ctx

# Contenders right on their first call (the loading call) and wrong on every later one (each
# answer's classes rolled by one), registered by a plug-in module (LENET_BENCH_CONTENDERS) that
# the processes of own-process contenders import too.
_WRONG_WHEN_TIMED = """
import numpy as np

from lenet.bench.registry import contender


def _build(ctx):
    import lenet

    engine, calls = lenet.Engine(ctx.weights, device="cpu", threads=1), []

    def run(x):
        calls.append(len(x))
        p = engine.predict_proba(x)
        return p if len(calls) == 1 else np.roll(p, 1, axis=1)

    return run


contender("wrong-when-timed", (), "test: right when loaded, wrong when timed")(_build)
contender("wrong-when-timed-own", (), "test: the same, in a process of its own", process="own")(_build)
"""


def test_a_block_keeps_its_first_pass_in_order():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    calls = []

    def run(b):
        calls.append(len(b))
        return np.hstack([b, -b])

    batches = [x[i : i + 4] for i in range(0, 8, 4)]  # workload.batches(x, 4): two whole batches
    block = measure.block(run, batches, 4, budget_s=0.0, min_calls=5, keep=True)
    assert len(calls) == 5
    np.testing.assert_array_equal(block.outputs, np.hstack([x[:8], -x[:8]]))
    np.testing.assert_array_equal(measure.expected(np.hstack([x, -x]), 4, 8), block.outputs)
    assert measure.block(run, batches, 4, budget_s=0.0, min_calls=2).outputs is None


def test_expected_cycles_the_reference_as_the_batches_cycle_the_digits():
    ref = np.arange(6, dtype=np.float32).reshape(3, 2)
    want = measure.expected(ref, 4, 4)  # a batch of 4 from 3 digits: the digits repeated
    np.testing.assert_array_equal(want, np.concatenate([ref, ref])[:4])


def test_the_cpp_harness_writes_what_its_timed_calls_answered(tmp_path):
    weights = lenet.shipped_weights("lenet5")
    x = np.random.default_rng(75).random((6, 28, 28, 1), dtype=np.float32)
    try:
        harness = Harness("lenet-cpp", Ctx(Path(weights), 1), x, [4], tmp_path, {})
    except Exception as e:  # noqa: BLE001 - only an engine built without its harness skips
        if "is not installed" in str(e):
            pytest.skip(str(e))
        raise
    with harness:
        block = harness.block(4, 0.0, 3, keep=True)
    want = lenet.Engine(weights, device="cpu", threads=1).predict_proba(np.concatenate([x, x])[:4])
    assert block.outputs.shape == (4, 10)  # one pass: 6 digits hold one whole batch of 4
    np.testing.assert_allclose(block.outputs, want, rtol=0, atol=1e-6)


def test_a_contender_wrong_only_when_timed_disagrees(tmp_path):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "wrong_when_timed.py").write_text(_WRONG_WHEN_TIMED)
    env = {
        **os.environ,
        "LENET_BENCH_CONTENDERS": "wrong_when_timed",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(plugin), os.environ.get("PYTHONPATH")])),
    }
    out = tmp_path / "bench"
    names = ["lenet-cpu", "lenet-cpp", "wrong-when-timed", "wrong-when-timed-own"]
    args = ["--models", "lenet5", "--contenders", ",".join(names), "--batch-sizes", "1,8", "--threads", "1"]
    args += ["--images", "32", "--rounds", "2", "--no-probe", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "lenet.bench", "--quick", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["contender"]: r for r in json.loads((out / "results.json").read_text())["results"]}
    for name in names:
        r = rows[name]
        if r["status"] == "skipped":  # lenet-cpp where this build has no harness
            assert name == "lenet-cpp", r
            continue
        assert r["status"] == "ok", r
        assert r["timed_checked"] == 32 + 32, r  # the first round's pass at batch 1 and at batch 8
        wrong = name.startswith("wrong")
        assert r["agree"] is (not wrong), r
        assert ("DISAGREES" in r["flags"]) is wrong, r
        assert (r["timed_error"] is not None) is wrong, r


def test_lenet_cpp_skips_a_model_the_harness_cannot_load_and_says_why(tmp_path):
    """The C++ harness loads .lenet files; a tf2onnx export (NHWC images, an NCHW graph) has
    none: its lenet-cpp row is skipped with that reason, not failed."""
    from lenet.bench.registry import Unavailable

    onnx = Path(__file__).resolve().parents[1] / "data" / "onnx" / "tf2onnx_nhwc.onnx"
    with pytest.raises(Unavailable, match=re.escape("the C++ harness loads .lenet files, and this model has none")):
        Harness("lenet-cpp", Ctx(onnx, 1), None, [1], tmp_path, {})
