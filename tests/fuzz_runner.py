"""Runs one target of tests/fuzz_targets.py (atheris + libFuzzer) in a subprocess for a
bounded number of cases and turns what it found into a test result.

``LENET_FUZZ_SECONDS`` (default 2: the README's test command stays within minutes; CI sets
30) sizes each target's run: that many
seconds of cases at the target's usual rate on a 2-core machine (``RATE``), run as a
fixed number of cases, not for a fixed time. With the fixed libFuzzer seed and seed
files that are the same to the byte on every run, a run is the same sequence of
inputs wherever it runs: what CI reports, the same test reproduces here, and a CI
run fails only on what a local run of the same code finds too. (Set
``LENET_FUZZ_SEED`` to another number, or raise the seconds, to explore further.)

A crash (an exception that is not a ``lenet.Error``, a signal), a hang (one input
over 60 s) or a memory blow-up (RSS over 3 GB) fails the test with the fuzzer's
report, and the input that caused it is kept in the test's temporary directory, with
the command that replays it.
"""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
TARGETS = TESTS / "fuzz_targets.py"
SECONDS = float(os.environ.get("LENET_FUZZ_SECONDS", "2"))
SEED = int(os.environ.get("LENET_FUZZ_SEED", "1"))  # libFuzzer -seed; set another to explore further
# Cases per second of each target on a 2-core machine (measured 2026-11-23 over 60 s
# runs: 448, 116, 80, 1,700, 247), a little under: seconds x rate = the cases a run makes.
RATE = {
    "model-bytes": 400,
    "model-config": 110,
    "model-h5": 75,
    "lenet-bytes": 400,
    "image-bytes": 1500,
    "image-array": 220,
    "onnx-bytes": 100,
    "onnx-graph": 100,
}
RSS_LIMIT_MB = 3072
INPUT_TIMEOUT_S = 60


def need_atheris() -> None:
    """atheris is in the test extra; without it the fuzzers skip (in lenet's CI, fail: conftest.CI_MAY_SKIP)."""
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed (pip install '.[test]'): the fuzzers cannot run")


def fuzz(target: str, work: Path, seeds: Path | None = None) -> dict:
    """Fuzzes `target` for SECONDS x RATE[target] cases; returns its stats: cases, outcomes, categories."""
    need_atheris()
    work.mkdir(parents=True, exist_ok=True)
    stats = work / "stats.json"
    cmd = [sys.executable, str(TARGETS), target, "--work", str(work / "run"), "--stats", str(stats)]
    if seeds is not None:
        cmd += ["--seeds", str(seeds)]
    # A fixed seed and a fixed number of cases: the same inputs on every machine.
    # The time limit only stops a machine far slower than RATE assumes.
    runs = max(1, int(SECONDS * RATE[target]))
    flags = [
        f"-seed={SEED}",
        f"-runs={runs}",
        f"-max_total_time={int(5 * SECONDS) + 60}",
        f"-timeout={INPUT_TIMEOUT_S}",
        # libFuzzer's own RSS check reads getrusage's ru_maxrss, which Linux carries over
        # from the parent across fork + exec: under a pytest process grown past the limit
        # it reported every target out of memory. Checked here instead, on the target's
        # own high-water mark (watch_memory).
        "-rss_limit_mb=0",
        f"-artifact_prefix={work}/",
        "-print_final_stats=1",
        "-detect_leaks=0",
        "-reload=0",
    ]
    env = dict(os.environ, OPENCV_LOG_LEVEL="OFF", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    log_path = work / "fuzz.log"
    with (
        open(log_path, "w") as log_file,
        subprocess.Popen(
            cmd + ["--"] + flags, stdout=log_file, stderr=subprocess.STDOUT, env=env, cwd=TESTS.parent
        ) as child,
    ):
        peak_mb = _watch_memory(child, 5 * SECONDS + INPUT_TIMEOUT_S + 360)
    out = log_path.read_text(errors="replace")
    proc = subprocess.CompletedProcess(child.args, child.returncode, out, "")
    if peak_mb > RSS_LIMIT_MB:
        pytest.fail(
            f"fuzz target {target!r} used {peak_mb:.0f} MB of memory (limit {RSS_LIMIT_MB} MB) after "
            f"{_cases(stats)} cases\n--- fuzzer output (end) ---\n{_tail(out)}",
            pytrace=False,
        )
    log = proc.stdout
    if proc.returncode != 0:
        found = sorted(p for p in work.iterdir() if p.name.split("-")[0] in ("crash", "timeout", "oom", "leak"))
        report = [f"fuzz target {target!r} failed (exit {proc.returncode}) after {_cases(stats)} cases"]
        for p in found[:3]:
            data = p.read_bytes()
            report.append(f"input {p} ({len(data)} bytes), replay: {' '.join(cmd)} -- {p}")
            if len(data) <= 2048:
                report.append(f"base64: {base64.b64encode(data).decode()}")
        pytest.fail("\n".join(report) + "\n--- fuzzer output (end) ---\n" + _tail(log), pytrace=False)
    # Without coverage (lenet imported through a loader atheris cannot instrument, as
    # an editable install is) libFuzzer mutates blindly and its corpus collapses to
    # one byte: the run would pass while testing nothing.
    if "Is the code instrumented for coverage?" in log:
        pytest.fail(
            f"fuzz target {target!r} ran without coverage (lenet is not instrumented: an editable "
            f"install? install with 'pip install .')\n--- fuzzer output (end) ---\n{_tail(log)}",
            pytrace=False,
        )
    result = json.loads(stats.read_text())
    print(f"\n{target}: {result['cases']} cases in {result.get('elapsed_s')} s, outcomes {result['outcomes']}")
    for cat, outs in sorted(result["categories"].items()):
        print(f"  {cat}: {outs}")
    return result


def _watch_memory(child: subprocess.Popen, timeout_s: float) -> float:
    """Waits for the child, killing it past `timeout_s` or past RSS_LIMIT_MB of resident
    memory (its own high-water mark, VmHWM, which exec resets); returns that peak in MB."""
    import threading
    import time

    peak = [0.0]
    done = threading.Event()

    def poll():
        status = Path(f"/proc/{child.pid}/status")
        while not done.is_set():
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peak[0] = max(peak[0], int(line.split()[1]) / 1024)
            except (OSError, ValueError):
                pass
            if peak[0] > RSS_LIMIT_MB:
                child.kill()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    deadline = time.monotonic() + timeout_s
    while child.poll() is None:
        if time.monotonic() > deadline:
            child.kill()
            break
        time.sleep(0.1)
    done.set()
    watcher.join()
    return peak[0]


def image_seeds() -> dict[str, bytes]:
    """Small encoded images of a shipped digit in every format and flavour lenet reads."""
    import cv2
    from PIL import Image

    digit = cv2.imread(str(TESTS.parent / "examples" / "digit-7.png"), cv2.IMREAD_GRAYSCALE)
    paper = 255 - cv2.resize(digit, (40, 32), interpolation=cv2.INTER_AREA)
    rgb = np.dstack([paper, paper // 2 + 100, paper])

    def pil(img, fmt, **kw):
        b = io.BytesIO()
        img.save(b, fmt, **kw)
        return b.getvalue()

    def enc(ext, img, *params):
        ok, buf = cv2.imencode(ext, img, list(params))
        assert ok, ext
        return buf.tobytes()

    return {
        "digit-28.png": (TESTS.parent / "examples" / "digit-7.png").read_bytes(),
        "gray.png": enc(".png", paper),
        "gray16.png": enc(".png", paper.astype(np.uint16) * 257),
        "rgba.png": enc(".png", np.dstack([rgb, np.full_like(paper, 180)])),
        "palette.png": pil(Image.fromarray(rgb).convert("P"), "PNG"),
        "bilevel.png": pil(Image.fromarray(paper).convert("1"), "PNG"),
        "gray.jpg": enc(".jpg", paper, cv2.IMWRITE_JPEG_QUALITY, 80),
        "progressive.jpg": pil(Image.fromarray(rgb), "JPEG", progressive=True),
        "cmyk.jpg": pil(Image.fromarray(rgb).convert("CMYK"), "JPEG"),
        "rgb.bmp": enc(".bmp", rgb),
        "anim.gif": pil(Image.fromarray(paper).convert("P"), "GIF"),
        "lossy.webp": enc(".webp", rgb, cv2.IMWRITE_WEBP_QUALITY, 60),
        "lossless.webp": enc(".webp", rgb, cv2.IMWRITE_WEBP_QUALITY, 101),
        "gray.tiff": enc(".tiff", paper),
        "gray16be.tiff": pil(Image.fromarray(paper.astype(np.uint16) * 257), "TIFF"),
        "gray.pgm": enc(".pgm", paper),
        "rgb.ppm": enc(".ppm", rgb),
    }


def _cases(stats: Path) -> str:
    try:
        return str(json.loads(stats.read_text())["cases"])
    except (OSError, ValueError, KeyError):
        return "?"


def _tail(log: str, lines: int = 60) -> str:
    # Skip libFuzzer's progress lines; keep the traceback and its summary.
    keep = [l for l in log.splitlines() if not l.startswith(("#", "INFO:", "\tNEW_FUNC"))]
    return "\n".join(keep[-lines:])
