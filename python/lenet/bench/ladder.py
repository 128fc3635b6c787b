"""Where ``Engine.infer``'s time goes on the way to an answer, beside the floors it sits on:
on PNG files, decoding, preparing, the engine and the results; on one file, its floor (the
file read and decoded in the core, then predict_proba), timed in the same rounds."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Optional


def infer_breakdown(
    weights: Path, paths: list, threads: int, rounds: int = 15, preprocessing: Optional[dict] = None
) -> dict:
    """Where ``Engine.infer(paths)`` spends its time, on 1 thread and on ``threads``:
    decoding, preparing (resize or photo path, batch assembly), the engine, and the
    rest (results). Medians over interleaved rounds, in seconds."""
    import numpy as np

    import lenet
    from lenet import images

    out = {"images": len(paths)}
    engines = {t: lenet.Engine(weights, device="cpu", threads=t, **(preprocessing or {})) for t in sorted({1, threads})}
    samples: dict = {t: {"total": [], "decode": [], "prepare": [], "engine": []} for t in engines}
    for _ in range(rounds):
        for t, e in engines.items():
            t0 = time.perf_counter()
            e.infer(paths)
            total = time.perf_counter() - t0
            got_rows = images.prepare(paths, paths, e.image_shape, threads=t)
            t0 = time.perf_counter()
            e.row_probabilities(got_rows.x)
            got = samples[t]
            got["total"].append(total)
            got["engine"].append(time.perf_counter() - t0)
            got["decode"].append(got_rows.timings["decode"])
            got["prepare"].append(got_rows.timings["prepare"])
    for t, got in samples.items():
        med = {k: float(np.median(v)) for k, v in got.items()}
        med["rest"] = max(0.0, med["total"] - med["decode"] - med["prepare"] - med["engine"])
        out[f"threads_{t}"] = med
    out["one_file"] = one_file_breakdown(engines[1], paths[0], rounds=rounds)
    return out


def one_file_breakdown(engine, path, calls: int = 200, rounds: int = 15) -> dict:
    """``Engine.infer(path)`` on one PNG file against its floor, timed interleaved in the
    same rounds: reading the file and decoding it in the core (``_core.read_gray_images``,
    what infer's PNG lane does), then ``predict_proba`` on the decoded digit, one after the
    other in each call as an answer must (the file's system calls leave the engine's
    weights colder than a loop of ``predict_proba`` alone: 1-2 µs); each also timed alone.
    Medians of the per-round means, in seconds."""
    import numpy as np

    from lenet import _core
    from lenet.images.limits import MAX_FILE_BYTES

    h, w, _ = engine.image_shape
    name = [os.fsencode(path)]
    _, pixels, _ = _core.read_gray_images(name, MAX_FILE_BYTES, h, w)
    if pixels.size == 0:  # the core reads files of the model's size only: a 16x16 model's digits are resized
        return None
    x = pixels.reshape((1,) + tuple(engine.input_shape[1:])).astype(np.float32) * np.float32(engine.input_scale)

    def mean_s(fn) -> float:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) / calls

    def floor() -> None:
        _core.read_gray_images(name, MAX_FILE_BYTES, h, w)
        engine.predict_proba(x)

    got: dict = {"infer": [], "floor": [], "read_decode": [], "engine": []}
    for _ in range(rounds):
        got["infer"].append(mean_s(lambda: engine.infer(path)))
        got["floor"].append(mean_s(floor))
        got["read_decode"].append(mean_s(lambda: _core.read_gray_images(name, MAX_FILE_BYTES, h, w)))
        got["engine"].append(mean_s(lambda: engine.predict_proba(x)))
    return {k: float(np.median(v)) for k, v in got.items()}
