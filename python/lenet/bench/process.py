"""A contender's process of its own, as the main process sees it: one line out, one line
back, within a time limit; and, when it dies, what killed it, in a few words. Both kinds of
worker speak through it: the Python worker (``child.Remote``, JSON lines) and the C++
harness (``harness.Harness``, lenet-bench-cpp's text lines)."""

from __future__ import annotations

import re
import select
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

# A Python worker runs with faulthandler on: a fatal signal prints its Python stack, which
# ``death`` turns into the row's reason ("crashed: SIGSEGV in replay (torch/cuda/graphs.py:139)").
PYTHON = [sys.executable, "-X", "faulthandler"]
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)', re.M)


class ChildError(RuntimeError):
    """The contender's process crashed, hung, or answered with an error (the message says which)."""


def _short(path: str) -> str:
    """A source file as a reader finds it: below site-packages or the standard library."""
    import site

    paths = sysconfig.get_paths()
    roots = [paths["purelib"], paths["platlib"], paths["stdlib"], *site.getsitepackages()]
    under = [r.rstrip("/") + "/" for r in roots if path.startswith(r.rstrip("/") + "/")]
    if under:
        return path[len(max(under, key=len)) :]
    return path.split("site-packages/")[-1] if "site-packages/" in path else Path(path).name


def death(returncode: int, stderr: str) -> str:
    """What ended a child, in a few words: the signal and the innermost Python frame of
    faulthandler's stack (most recent call first), or the exit status and its last line."""
    if returncode < 0:
        try:
            what = signal.Signals(-returncode).name
        except ValueError:
            what = f"signal {-returncode}"
        stack = stderr[stderr.rfind("most recent call first") :] if "most recent call first" in stderr else ""
        frame = _FRAME.search(stack)
        if frame:
            return f"crashed: {what} in {frame['func']} ({_short(frame['file'])}:{frame['line']})"
        return f"crashed: {what}"
    lines = [line for line in stderr.splitlines() if line.strip()]
    return f"exited with status {returncode}: {lines[-1] if lines else '(no output)'}"


class Child:
    """A process that answers each line it is sent with one line on its stdout; its stderr
    goes to ``<tmp>/<name>.stderr``, read back to say how it died."""

    def __init__(self, name: str, argv: list, env: dict, tmp: Path, timeout_s: float):
        self.name, self.timeout_s = name, timeout_s
        self._stderr = open(Path(tmp) / f"{name}.stderr", "w+")
        self._proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, bufsize=1, env=env
        )

    def ask(self, line: str | None, what: str) -> str:
        """Sends ``line`` (None: only waits) and returns the answer line, without its newline.
        Raises ChildError when the process is dead or dies, or is silent for ``timeout_s``
        (then it is killed); ``what`` names the request in that message."""
        if line is not None:
            if self._proc.poll() is not None:
                raise ChildError(self._died())
            try:
                self._proc.stdin.write(line + "\n")
                self._proc.stdin.flush()
            except BrokenPipeError:  # it died since the last look
                self._proc.wait()
                raise ChildError(self._died()) from None
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._proc.kill()
                self._proc.wait()
                raise ChildError(f"hung: no answer to {what} in {self.timeout_s:g} s; its process was killed")
            ready, _, _ = select.select([self._proc.stdout], [], [], min(left, 1.0))
            if ready or self._proc.poll() is not None:
                break
        answer = self._proc.stdout.readline()
        if not answer:
            self._proc.wait()
            raise ChildError(self._died())
        return answer.rstrip("\n")

    def _died(self) -> str:
        self._stderr.flush()
        self._stderr.seek(0)
        return death(self._proc.returncode, self._stderr.read())

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    @property
    def returncode(self):
        """Its exit status once it has ended (negative: the signal), else None."""
        return self._proc.poll()

    def close(self, goodbye: str) -> None:
        """Sends ``goodbye`` and waits for the end (30 s at most, then kills)."""
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write(goodbye + "\n")
                self._proc.stdin.flush()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()
