"""The fuzz runner's memory check: a target's own resident memory (VmHWM), not the
ru_maxrss Linux carries over from the parent across fork + exec (which made every target
look out of memory under a pytest process that had grown past the limit)."""

import subprocess
import sys
import time

import fuzz_runner


def test_a_child_past_the_limit_is_killed_and_its_peak_reported(monkeypatch):
    monkeypatch.setattr(fuzz_runner, "RSS_LIMIT_MB", 100)
    code = "a = bytearray(300 << 20); a[::4096] = b'x' * len(a[::4096]); import time; time.sleep(30)"
    started = time.monotonic()
    with subprocess.Popen([sys.executable, "-c", code]) as child:
        peak = fuzz_runner._watch_memory(child, 60)
    assert peak > 100 and child.returncode != 0
    assert time.monotonic() - started < 20  # killed, not waited for


def test_a_small_child_runs_to_its_end():
    with subprocess.Popen([sys.executable, "-c", "print('ok')"], stdout=subprocess.DEVNULL) as child:
        peak = fuzz_runner._watch_memory(child, 60)
    assert child.returncode == 0 and 0 <= peak < fuzz_runner.RSS_LIMIT_MB
