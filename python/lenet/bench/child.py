"""What runs in a child Python process, and the parent's handles on it, in one place.

Two kinds of child. A contender whose framework is set up once per process (Keras picks
its backend at import) runs in a worker of its own (``Remote``, ``serve``): the worker
builds the contender, runs it on the arrays it is sent and times blocks of calls itself,
so that a timed call never crosses the pipe; the main process only sends commands between
blocks, which keeps the rounds interleaved with the in-process contenders. And every
contender's load time, first call and peak memory are measured in a fresh process
(``probe``, ``probe_main``). Both children set a contender up the same way (``start``).
(lenet-cpp's child is no Python at all: harness.py.)

The worker's protocol: one JSON object per line. Its stdout is reserved for the replies
(what the frameworks print goes to stderr, kept in a file for the error messages); arrays
go through .npy files in the benchmark's temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from . import contenders, measure, workload
from .process import PYTHON, Child, ChildError, death

# --- in the child ---------------------------------------------------------------------------


def start(name: str, weights: str, threads: int, env: dict, preprocessing: dict) -> Callable:
    """The contender ``name`` built in this (child) process, its framework configured and
    imported as its process needs: what both kinds of child do first."""
    contenders.configure(threads, env)
    ctx = contenders.Ctx(Path(weights), threads, preprocessing)
    if name == "keras-jax-reference":
        return contenders.keras_predict_reference(ctx)
    c = contenders.CONTENDERS[name]
    failed = contenders.setup([name])
    if failed:
        raise contenders.Unavailable(failed[name])
    for module in c.needs:  # an own-process contender: this is its process
        contenders.load_framework(module)
    return c.build(ctx)


def _handle(msg: dict, state: dict) -> dict:
    op = msg["op"]
    if op == "build":
        state["run"] = start(msg["name"], msg["weights"], msg["threads"], msg["env"], msg["preprocessing"])
        data = _load(msg["x"])
        state["batches"] = {b: workload.batches(data, b) for b in msg["sizes"]}
        return {"pid": os.getpid(), "versions": contenders.own_versions()}
    if op == "predict":
        out = str(Path(msg["x"]).with_suffix(".out.npy"))
        np.save(out, measure.probabilities(state["run"](_load(msg["x"]))))
        return {"out": out}
    if op == "block":
        keep = msg.get("keep")  # where to save the timed calls' outputs, if asked
        b = measure.block(
            state["run"], state["batches"][msg["batch"]], msg["batch"], msg["budget_s"], msg["min_calls"], bool(keep)
        )
        if keep and b.outputs is not None:
            np.save(keep, b.outputs)
        return {"call_ns": b.call_ns, "wall_s": b.wall_s, "cpu_s": b.cpu_s, "images": b.images}
    raise ValueError(f"unknown op {op!r}")


def _load(path: str):
    """What the parent saved (``Remote._save``): an array, or a list of file paths."""
    if path.endswith(".json"):
        return json.loads(Path(path).read_text())
    return np.load(path)


def serve() -> None:
    """The worker's loop: a command per line on stdin, a reply per line on the original stdout."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the frameworks print must not reach the replies
    state: dict = {}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "exit":
            break
        try:
            reply = _handle(msg, state)
        except contenders.Unavailable as e:
            reply = {"unavailable": str(e)}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        replies.write(json.dumps(reply) + "\n")
    replies.flush()
    os._exit(0)  # skip framework teardown (slow, sometimes noisy)


def _max_rss_mib() -> Optional[float]:
    """Peak resident memory of this process. Not ru_maxrss: Linux carries that over from the
    parent across fork + exec, so a child of a big process would report the parent's size."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return None


def probe_main(arg: str) -> None:
    """In the fresh process: import, load, first call; print one JSON line."""
    t0 = time.perf_counter()
    a = json.loads(arg)
    c = contenders.CONTENDERS[a["contender"]]
    out: dict = {}
    try:
        contenders.configure(a["threads"], c.env)
        failed = contenders.setup([c.name])
        if failed:
            raise RuntimeError(failed[c.name])
        for module in c.needs:
            contenders.load_framework(module)
        t1 = time.perf_counter()
        out.update(import_s=t1 - t0, rss_import_mib=_max_rss_mib())
        run = c.build(contenders.Ctx(Path(a["weights"]), a["threads"], a["preprocessing"]))
        t2 = time.perf_counter()
        x = [a["png"]] if c.takes == "files" else np.load(a["pixels0"] if c.takes in ("pixels", "rows") else a["x0"])
        run(x)
        t3 = time.perf_counter()
        out.update(load_s=t2 - t1, first_call_s=t3 - t2, peak_rss_mib=_max_rss_mib())
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip framework teardown (slow, sometimes noisy)


# --- in the parent --------------------------------------------------------------------------

RemoteError = ChildError  # what a worker's death, silence or error raises


class Remote:
    """``run(x)``-like handle on a contender built in a new Python process. ``x`` is what
    the contender takes (the model's input array, the uint8 digits, or PNG paths): the worker
    times its blocks on batches of it."""

    def __init__(self, name: str, ctx, x, sizes: list, tmp: Path, env: dict, timeout_s: float = 600):
        self.name, self._tmp, self._calls = name, Path(tmp), 0
        self._child = Child(
            name,
            [*PYTHON, "-c", "from lenet.bench import child; child.serve()"],
            {**os.environ, **contenders.thread_env(ctx.threads, env)},
            self._tmp,
            timeout_s,
        )
        try:
            reply = self._call(
                {
                    "op": "build",
                    "name": name,
                    "weights": str(ctx.weights),
                    "threads": ctx.threads,
                    "preprocessing": ctx.preprocessing,
                    "env": env,
                    "x": self._save(x),
                    "sizes": list(sizes),
                }
            )
        except BaseException:
            self.close()
            raise
        self.pid = reply["pid"]
        # The versions of what the worker imported that differ from this process's.
        self.versions: dict = reply.get("versions", {})

    def _save(self, x) -> str:
        """An array as .npy, a list of file paths (a "files" contender's input) as JSON."""
        self._calls += 1
        path = self._tmp / f"{self.name}-{self._calls}"
        if isinstance(x, np.ndarray):
            np.save(path.with_suffix(".npy"), x)
            return str(path.with_suffix(".npy"))
        path = path.with_suffix(".json")
        path.write_text(json.dumps([str(p) for p in x]))
        return str(path)

    def _call(self, msg: dict) -> dict:
        what = f"{msg['op']!r}" + (f" at batch {msg['batch']}" if "batch" in msg else "")
        reply = json.loads(self._child.ask(json.dumps(msg), what))
        if "unavailable" in reply:
            raise contenders.Unavailable(reply["unavailable"])
        if "error" in reply:
            raise RemoteError(reply["error"])
        return reply

    def __call__(self, x) -> np.ndarray:
        """Probabilities for x, computed in the worker."""
        reply = self._call({"op": "predict", "x": self._save(x)})
        return np.load(reply["out"])

    def block(self, batch: int, budget_s: float, min_calls: int = 1, keep: bool = False) -> measure.Block:
        """``measure.block`` run in the worker on its own batches of ``batch`` images."""
        self._calls += 1
        out = self._tmp / f"{self.name}-{self._calls}.timed.npy"
        msg = {"op": "block", "batch": batch, "budget_s": budget_s, "min_calls": min_calls}
        r = self._call({**msg, "keep": str(out)} if keep else msg)
        outputs = np.load(out) if keep and out.is_file() else None
        return measure.Block(r["call_ns"], r["wall_s"], r["cpu_s"], r["images"], outputs)

    def alive(self) -> bool:
        return self._child.alive()

    def close(self) -> None:
        self._child.close(json.dumps({"op": "exit"}))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def probe(
    contender: str,
    weights: str,
    threads: int,
    x0_npy: str,
    png: str,
    pixels0_npy: str = "",
    timeout_s: float = 600,
    preprocessing: Optional[dict] = None,
) -> dict:
    """Runs ``probe_main`` in a new Python process: the contender's import and load time,
    first call and peak memory there; or {"error": ...}."""

    arg = json.dumps(
        {
            "contender": contender,
            "weights": str(weights),
            "threads": threads,
            "preprocessing": preprocessing or {},
            "x0": x0_npy,
            "png": png,
            "pixels0": pixels0_npy,
        }
    )
    code = "import sys, lenet.bench.child as c; c.probe_main(sys.argv[1])"
    env = {**os.environ, **contenders.thread_env(threads, contenders.CONTENDERS[contender].env)}
    try:
        out = subprocess.run([*PYTHON, "-c", code, arg], capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"hung: the probe gave no answer in {timeout_s:g} s; its process was killed"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {"error": death(out.returncode, out.stderr)}
