"""The yardstick for lenet-bench's ratios against ONNX Runtime (issue 75): a hand-written loop
in one process, as a user would write it, alternating lenet's ``predict_proba`` and ONNX
Runtime's ``InferenceSession.run`` on the same file and array, blocks of calls, with a pause
before each block (ONNX Runtime's threads spin after a run and would share the next block's
cores), the best (least) mean per call over the rounds. Prints, per batch size, each engine's
time per image and throughput, and ONNX Runtime's time over lenet's: lenet-bench's
``×fastest other`` on the same file should be within 15 % of it.

    python tools/probes/ort_loop.py MODEL.onnx [--batches 1,64,1024] [--threads 2] [--rounds 7]
        [--bench results.json]

With ``--bench``, also the same ratios from a lenet-bench run's results.json (its
``lenet-cpu`` and ``onnxruntime`` rows of that model, each at its best round as lenet-bench's
ratios are) and how far they are from this loop's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

import lenet
from lenet.bench import workload

PAUSE_S = 0.05


def timed(call, x, budget_s: float) -> float:
    """Mean seconds per call of a block of at least 3 calls and ``budget_s`` seconds."""
    calls, started = 0, time.perf_counter()
    while calls < 3 or time.perf_counter() - started < budget_s:
        call(x)
        calls += 1
    return (time.perf_counter() - started) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--batches", default="1,64,1024")
    ap.add_argument("--threads", type=int, default=len(__import__("os").sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--block-s", type=float, default=0.2)
    ap.add_argument("--bench", type=Path, help="a lenet-bench results.json to compare with")
    args = ap.parse_args()

    digits, _, _ = workload.load_digits(workload.default_mnist_dir(), 1024)
    x, _ = workload.to_model_input(digits, args.model)
    engine = lenet.Engine(args.model, device="cpu", threads=args.threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(args.model), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    engines = {"lenet": engine.predict_proba, "onnxruntime": lambda b: session.run(None, {name: b})[0]}

    found = {}
    for batch in [int(b) for b in args.batches.split(",")]:
        xb = np.ascontiguousarray(x[:batch])
        for call in engines.values():  # warm-up
            timed(call, xb, 0.1)
        best = dict.fromkeys(engines, float("inf"))
        for _ in range(args.rounds):
            for key, call in engines.items():
                time.sleep(PAUSE_S)
                best[key] = min(best[key], timed(call, xb, args.block_s))
        ratio = best["onnxruntime"] / best["lenet"]
        found[batch] = ratio
        print(
            f"batch {batch:5d}: lenet {best['lenet'] / batch * 1e6:9.2f} us/image ({batch / best['lenet']:,.0f}/s), "
            f"onnxruntime {best['onnxruntime'] / batch * 1e6:9.2f} us/image ({batch / best['onnxruntime']:,.0f}/s): "
            f"onnxruntime / lenet = {ratio:.2f}"
        )
    if args.bench:
        rows = json.loads(args.bench.read_text())["results"]
        mine = {r["contender"]: r for r in rows if r["model"] in (args.model.stem, args.model.name, str(args.model))}
        cpu, ort_row = mine.get("lenet-cpu"), mine.get("onnxruntime")
        if not (cpu and ort_row):
            raise SystemExit(f"{args.bench}: no lenet-cpu and onnxruntime rows for {args.model}")

        # lenet-bench's ratios are on each row's best round (rows.speedups): the same here.
        def best_round(row, batch):
            return next((s["best_round_s"] for s in row["series"] if s["batch"] == batch), None)

        for batch, ratio in found.items():
            mine, theirs = best_round(cpu, batch), best_round(ort_row, batch)
            if not (mine and theirs):
                continue
            bench = theirs / mine
            print(f"batch {batch:5d}: lenet-bench {bench:.2f}, this loop {ratio:.2f}: {bench / ratio - 1:+.0%}")


if __name__ == "__main__":
    main()
