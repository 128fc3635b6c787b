"""A contender in a process of its own, for frameworks whose set-up is fixed once per
process (Keras picks its backend at import): the worker builds the contender, runs it on
the arrays it is sent and times blocks of calls itself, so that a timed call never
crosses the pipe. The main process only sends commands between blocks, which keeps the
rounds interleaved with the in-process contenders.

Protocol: one JSON object per line. The worker's stdout is reserved for the replies (what
the frameworks print goes to stderr, kept in a file for the error messages); arrays go
through .npy files in the benchmark's temporary directory.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
import numpy as np

from . import measure


class RemoteError(RuntimeError):
    pass


class Remote:
    """``run(x)``-like handle on a contender built in a new Python process."""

    def __init__(self, name: str, ctx, x: np.ndarray, sizes: list, tmp: Path, env: dict,
                 timeout_s: float = 600):
        from .contenders import thread_env
        self.name, self.timeout_s, self._tmp = name, timeout_s, Path(tmp)
        self._calls = 0
        self._stderr = open(self._tmp / f"{name}.stderr", "w+")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from lenet.bench import remote; remote.serve()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1,
            env={**os.environ, **thread_env(ctx.threads, env)})
        try:
            reply = self._call({"op": "build", "name": name, "weights": str(ctx.weights), "threads": ctx.threads,
                                "env": env, "x": self._save(x), "sizes": list(sizes)})
        except BaseException:
            self.close()
            raise
        self.pid = reply["pid"]
        from . import contenders
        contenders.REMOTE_VERSIONS.update(reply.get("versions", {}))

    def _save(self, x: np.ndarray) -> str:
        self._calls += 1
        path = self._tmp / f"{self.name}-{self._calls}.npy"
        np.save(path, x)
        return str(path)

    def _call(self, msg: dict) -> dict:
        if self._proc.poll() is not None:
            raise RemoteError(f"{self.name}: worker exited with {self._proc.returncode}: {self._stderr_tail()}")
        self._proc.stdin.write(json.dumps(msg) + "\n")
        self._proc.stdin.flush()
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise RemoteError(f"{self.name}: no answer to {msg['op']!r} in {self.timeout_s:.0f} s")
            ready, _, _ = select.select([self._proc.stdout], [], [], min(left, 1.0))
            if ready:
                break
            if self._proc.poll() is not None:
                break
        line = self._proc.stdout.readline()
        if not line:
            self._proc.wait()
            raise RemoteError(f"{self.name}: worker exited with {self._proc.returncode}: {self._stderr_tail()}")
        reply = json.loads(line)
        if "unavailable" in reply:
            from .contenders import Unavailable
            raise Unavailable(reply["unavailable"])
        if "error" in reply:
            raise RemoteError(reply["error"])
        return reply

    def _stderr_tail(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().splitlines() if line.strip()]
        return lines[-1] if lines else "(no output)"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Probabilities for x, computed in the worker."""
        reply = self._call({"op": "predict", "x": self._save(x)})
        return np.load(reply["out"])

    def block(self, batch: int, budget_s: float, min_calls: int = 1) -> measure.Block:
        """``measure.block`` run in the worker on its own batches of ``batch`` images."""
        r = self._call({"op": "block", "batch": batch, "budget_s": budget_s, "min_calls": min_calls})
        return measure.Block(r["call_ns"], r["wall_s"], r["cpu_s"], r["images"])

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# --- in the worker ------------------------------------------------------------------------

def _build(msg: dict):
    from . import contenders, workload
    name = msg["name"]
    contenders.configure(msg["threads"], msg["env"])
    ctx = contenders.Ctx(Path(msg["weights"]), msg["threads"])
    if name == "keras-jax-reference":
        run = contenders.keras_predict_reference(ctx)
    else:
        c = contenders.CONTENDERS[name]
        why = c.unavailable()
        if why:
            raise contenders.Unavailable(why)
        for module in c.needs:
            contenders._import(module)
        run = c.build(ctx)
    x = np.load(msg["x"])
    return run, {b: workload.batches(x, b) for b in msg["sizes"]}


def _handle(msg: dict, state: dict) -> dict:
    op = msg["op"]
    if op == "build":
        state["run"], state["batches"] = _build(msg)
        from .contenders import own_versions
        return {"pid": os.getpid(), "versions": own_versions()}
    if op == "predict":
        out = str(Path(msg["x"]).with_suffix(".out.npy"))
        np.save(out, np.asarray(state["run"](np.load(msg["x"])), np.float32))
        return {"out": out}
    if op == "block":
        b = measure.block(state["run"], state["batches"][msg["batch"]], msg["batch"], msg["budget_s"],
                          msg["min_calls"])
        return {"call_ns": b.call_ns, "wall_s": b.wall_s, "cpu_s": b.cpu_s, "images": b.images}
    raise ValueError(f"unknown op {op!r}")


def serve() -> None:
    """The worker's loop: a command per line on stdin, a reply per line on the original stdout."""
    from .contenders import Unavailable
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the frameworks print must not reach the replies
    state: dict = {}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "exit":
            break
        try:
            reply = _handle(msg, state)
        except Unavailable as e:
            reply = {"unavailable": str(e)}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        replies.write(json.dumps(reply) + "\n")
    replies.flush()
    os._exit(0)  # skip framework teardown (slow, sometimes noisy)
