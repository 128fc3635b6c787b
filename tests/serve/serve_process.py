"""lenet-serve as a user starts it: ``python -m lenet.serve`` on a free port, on the CPU
with one thread, waited for until /healthz answers, and stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest


class LenetServe:
    """``with LenetServe() as s:`` the server answers at ``s.url``; after the block
    it has been stopped with SIGINT, and ``returncode``, ``stdout`` and ``stderr`` say
    how it ended. A server that does not start within 60 s fails the test, with its
    standard error."""

    def __enter__(self) -> LenetServe:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lenet.serve", "--port", str(port), "--device", "cpu", "--threads", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=2).read()
                return self
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.proc.kill()
                    pytest.fail(f"lenet-serve did not start: {self.proc.communicate()[1]}")
                time.sleep(0.2)

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        self.stdout, self.stderr = self.proc.communicate(timeout=30)
        self.returncode = self.proc.returncode
