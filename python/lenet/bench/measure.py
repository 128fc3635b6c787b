"""Timing: blocks of calls, statistics, and a fresh process per contender for the
costs that only a fresh process shows (model load, first call, peak memory).

A *block* calls ``run`` on prepared inputs (cycling through them) until both a
minimum number of calls and a time budget are reached, timing every call. Wall and
process CPU time of the block give its throughput and its real CPU use (a ratio of
2.0 means two cores busy on average). The garbage collector is paused inside a block.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .workload import batches


@dataclass
class Block:
    call_ns: list[int]  # each call's duration
    wall_s: float
    cpu_s: float  # process CPU time (user + system, all threads) during the block
    images: int  # images processed
    # With keep: the outputs of the block's first pass over its inputs (at most one call per
    # input batch), as probabilities: what the timed calls answered, checked against the
    # reference (issue 75: agreement is judged on the timed calls' outputs).
    outputs: Optional[np.ndarray] = None


def block(run: Callable, inputs: list, batch: int, budget_s: float, min_calls: int = 1, keep: bool = False) -> Block:
    n, calls = len(inputs), []
    kept: list = []
    perf = time.perf_counter_ns
    gc.collect()  # cheap when the set-up's objects are frozen (gc.freeze)
    gc.disable()
    try:
        cpu0, start = time.process_time(), perf()
        deadline = start + int(budget_s * 1e9)
        end = start
        while len(calls) < min_calls or end < deadline:
            x = inputs[len(calls) % n]
            t0 = perf()
            out = run(x)
            end = perf()
            if keep and len(calls) < n:
                kept.append(out)  # the reference only: no copy, no conversion inside the block
            calls.append(end - t0)
        cpu = time.process_time() - cpu0
    finally:
        gc.enable()
    outputs = np.concatenate([probabilities(o) for o in kept]) if kept else None
    return Block(calls, (end - start) / 1e9, cpu, batch * len(calls), outputs)


@dataclass
class Series:
    """All the blocks of one contender at one batch size, over the rounds."""

    batch: int
    blocks: list[Block] = field(default_factory=list)

    def summary(self) -> dict:
        per_image = np.concatenate([np.asarray(b.call_ns, np.float64) for b in self.blocks]) / 1e9 / self.batch
        rates = [b.images / b.wall_s for b in self.blocks]
        wall = sum(b.wall_s for b in self.blocks)
        return {
            "batch": self.batch,
            "images_per_s": float(np.median(rates)),  # median over rounds
            # The best round (what the ratios compare, issue 75): its median time per image and
            # its rate. A framework's rounds can differ by half (ONNX Runtime's were 8 or 12 us
            # at batch 1 round by round on a Zen 4, whatever the order): a median over every call
            # then lands on either mode, where a hand-written loop's minimum of its blocks, as
            # timeit advises, lands on the fast one.
            "best_round_s": float(min(np.median(b.call_ns) for b in self.blocks) / 1e9 / self.batch),
            "images_per_s_best_round": float(max(rates)),
            "p50_s": float(np.percentile(per_image, 50)),  # per image, over every call
            "p90_s": float(np.percentile(per_image, 90)),
            "p99_s": float(np.percentile(per_image, 99)),
            "calls": int(per_image.size),
            "rounds": len(self.blocks),
            "cpu_ratio": float(sum(b.cpu_s for b in self.blocks) / wall) if wall > 0 else None,
        }


def probabilities(out) -> np.ndarray:
    """A contender's output as a float32 (n, classes) array: lenet Results give theirs."""
    if isinstance(out, list) and out and hasattr(out[0], "probabilities"):
        out = np.stack([r.probabilities for r in out])
    return np.asarray(out, np.float32)


# Two classes whose reference probabilities are this close are a tie: which one wins depends on
# the order each engine sums in (oneDNN's, Eigen's, XNNPACK's, lenet's), so a different argmax
# there is not a disagreement. Twice the 1e-5 every contender is held to against Keras.
TIE = 2e-5


def expected(ref: np.ndarray, batch: int, count: int) -> np.ndarray:
    """The reference answers to a block's first ``count`` outputs: its inputs are
    workload.batches of the digits, so the same batches of the reference."""
    return np.concatenate(batches(ref, batch))[:count]


def correctness(probs, ref: Optional[np.ndarray]) -> dict:
    """Argmax agreement (on every digit whose reference top two differ by more than TIE) and
    max |difference| of probabilities against the reference."""
    if ref is None:
        return {"agree": None, "mismatches": None, "max_abs_dp": None}
    probs = probabilities(probs)
    if probs.shape != ref.shape:
        return {
            "agree": False,
            "mismatches": int(len(ref)),
            "max_abs_dp": None,
            "error": f"output shape {probs.shape}, expected {ref.shape}",
        }
    top2 = np.sort(ref, axis=1)[:, -2:]
    mism = int(np.sum((probs.argmax(1) != ref.argmax(1)) & (top2[:, 1] - top2[:, 0] > TIE)))
    return {"agree": mism == 0, "mismatches": mism, "max_abs_dp": float(np.max(np.abs(probs - ref)))}
