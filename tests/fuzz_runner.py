"""Runs one target of tests/fuzz_targets.py (atheris + libFuzzer) in a subprocess for a
bounded time and turns what it found into a test result.

``LENET_FUZZ_SECONDS`` (default 10) is the time per target; CI sets 60. A crash (an
exception that is not a ``lenet.Error``, a signal), a hang (one input over 60 s) or a
memory blow-up (RSS over 3 GB) fails the test with the fuzzer's report, and the
input that caused it is kept in the test's temporary directory, with the command that
replays it.
"""

from __future__ import annotations

import base64
import io
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TESTS = Path(__file__).resolve().parent
TARGETS = TESTS / "fuzz_targets.py"
SECONDS = float(os.environ.get("LENET_FUZZ_SECONDS", "10"))
SEED = int(os.environ.get("LENET_FUZZ_SEED", "1"))  # libFuzzer -seed; set another to explore further
RSS_LIMIT_MB = 3072
INPUT_TIMEOUT_S = 60


def need_atheris() -> None:
    """atheris is in the test extra; without it the fuzzers skip, except in CI."""
    if importlib.util.find_spec("atheris") is None:
        if os.environ.get("CI"):
            pytest.fail("atheris is not installed, and CI must run the fuzzers (pip install '.[test]')")
        pytest.skip("atheris is not installed (pip install '.[test]'): the fuzzers cannot run")


def fuzz(target: str, work: Path, seeds: Path | None = None) -> dict:
    """Fuzzes `target` for SECONDS; returns its stats: cases, outcomes, categories."""
    need_atheris()
    work.mkdir(parents=True, exist_ok=True)
    stats = work / "stats.json"
    cmd = [sys.executable, str(TARGETS), target, "--work", str(work / "run"), "--stats", str(stats)]
    if seeds is not None:
        cmd += ["--seeds", str(seeds)]
    # A fixed seed: a CI run explores the same inputs as a local run of the same
    # length, so a failure it reports is reproduced by running the test again.
    flags = [f"-seed={SEED}", f"-max_total_time={int(SECONDS)}", f"-timeout={INPUT_TIMEOUT_S}",
             f"-rss_limit_mb={RSS_LIMIT_MB}",
             f"-artifact_prefix={work}/", "-print_final_stats=1", "-detect_leaks=0"]
    env = dict(os.environ, OPENCV_LOG_LEVEL="OFF", OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    proc = subprocess.run(cmd + ["--"] + flags, capture_output=True, text=True, errors="replace", env=env,
                          timeout=SECONDS + INPUT_TIMEOUT_S + 300, cwd=TESTS.parent)
    log = proc.stdout + proc.stderr
    (work / "fuzz.log").write_text(log)
    if proc.returncode != 0:
        found = sorted(p for p in work.iterdir() if p.name.split("-")[0] in ("crash", "timeout", "oom", "leak"))
        report = [f"fuzz target {target!r} failed (exit {proc.returncode}) after {_cases(stats)} cases"]
        for p in found[:3]:
            data = p.read_bytes()
            report.append(f"input {p} ({len(data)} bytes), replay: {' '.join(cmd)} -- {p}")
            if len(data) <= 2048:
                report.append(f"base64: {base64.b64encode(data).decode()}")
        pytest.fail("\n".join(report) + "\n--- fuzzer output (end) ---\n" + _tail(log), pytrace=False)
    result = json.loads(stats.read_text())
    print(f"\n{target}: {result['cases']} cases in {result.get('elapsed_s')} s, outcomes {result['outcomes']}")
    for cat, outs in sorted(result["categories"].items()):
        print(f"  {cat}: {outs}")
    return result


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
