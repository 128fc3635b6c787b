"""lenet-cpp's and lenet-cpp-cuda's child: the engine from C++ (csrc/tools/bench_harness.cpp,
lenet-bench-cpp) in a process of its own, no Python in its timed calls; the parent's handle on
it (``Harness``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np

from . import measure, registry
from .process import Child, ChildError

HarnessError = ChildError  # its death, its silence, or an "error ..." answer


class Harness:
    """``run(x)``-like handle on lenet-bench-cpp (csrc/tools/bench_harness.cpp): the engine
    from C++, in a process of its own, no Python in its timed calls. The model goes to it as
    a .lenet file, the digits as raw float32; it times blocks as ``measure.block`` does and
    answers one line per command (the protocol is in the harness's source)."""

    def __init__(
        self,
        name: str,
        ctx,
        x: Optional[np.ndarray],
        sizes: list,
        tmp: Optional[Path],
        env: dict,
        timeout_s: float = 600,
    ):
        import tempfile

        import lenet
        from lenet.cpp import bench_harness

        self.name, self.versions = name, {}
        device = registry.CONTENDERS[name].device if name in registry.CONTENDERS else "cpu"
        exe = bench_harness()
        if not exe.is_file():
            raise registry.Unavailable(f"{exe} is not installed (this build of lenet has no C++ harness)")
        self._own_tmp = None if tmp is not None else tempfile.TemporaryDirectory(prefix="lenet-cpp-")
        self._tmp = Path(tmp if tmp is not None else self._own_tmp.name)
        model = self._tmp / f"{name}.lenet"
        engine = lenet.Engine(ctx.weights, device="cpu", threads=1)
        try:
            engine.save(model)
        except lenet.UnsupportedModelError as e:  # the harness reads .lenet files only
            raise registry.Unavailable(f"the C++ harness loads .lenet files, and this model has none: {e}") from e
        self.classes = int(np.prod(engine.output_shape[1:]))
        self._child = Child(
            name,
            [str(exe), str(model), str(ctx.threads), device],
            {**os.environ, **registry.thread_env(ctx.threads, env)},
            self._tmp,
            timeout_s,
        )
        self._calls = 0
        try:
            _, pid, version = self._call(None, "its start").split(" ", 2)  # "ready PID VERSION"
            self.pid, self.versions = int(pid), {"lenet (C++ harness)": version}
            if x is not None:
                self._call(f"data {self._raw(x)} {len(x)}", "'data'")
        except BaseException:
            self.close()
            raise

    def _call(self, line: Optional[str], what: str) -> str:
        reply = self._child.ask(line, what)
        if reply.startswith("error "):
            raise HarnessError(f"{self.name}: {reply[6:]}")
        return reply

    def _raw(self, x: np.ndarray) -> str:
        self._calls += 1
        path = self._tmp / f"{self.name}-{self._calls}.f32"
        np.ascontiguousarray(x, np.float32).tofile(path)
        return str(path)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Probabilities for x, computed by the harness."""
        src, out = self._raw(x), str(self._tmp / f"{self.name}-{self._calls}.out.f32")
        self._call(f"predict {src} {out} {len(x)}", "'predict'")
        return np.fromfile(out, np.float32).reshape(len(x), -1)

    def block(self, batch: int, budget_s: float, min_calls: int = 1, keep: bool = False) -> measure.Block:
        """``measure.block`` in C++ on consecutive batches of ``batch`` of the harness's data;
        with ``keep``, the outputs of its first pass over them too."""
        self._calls += 1
        out = self._tmp / f"{self.name}-{self._calls}.timed.f32"
        line = f"block {batch} {budget_s!r} {min_calls}" + (f" {out}" if keep else "")
        words = self._call(line, f"'block' at batch {batch}").split()
        outputs = np.fromfile(out, np.float32).reshape(-1, self.classes) if keep else None
        return measure.Block([int(w) for w in words[4:]], float(words[1]), float(words[2]), int(words[3]), outputs)

    def alive(self) -> bool:
        return self._child.alive()

    @property
    def returncode(self):
        return self._child.returncode

    def close(self) -> None:
        self._child.close("exit")
        if self._own_tmp is not None:
            self._own_tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
