"""tools/gpu-check: run here, where there is no GPU (its CPU-side sections, the report, the
exit status), and its report writer on a fabricated GPU run (tables, failures, the exit rule)."""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from conftest import REPO

SCRIPT = REPO / "tools" / "gpu-check"
GPU_SECTIONS = ["nvidia-smi", "tests", "memcheck", "racecheck", "describe", "bench"]
CPU_SECTIONS = ["info", "libraries"]


@pytest.fixture(scope="module")
def gc():
    loader = importlib.machinery.SourceFileLoader("gpu_check", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_check", loader))
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    loader.exec_module(module)
    yield module
    sys.modules.pop("gpu_check", None)


def _path_without_nvidia_smi(extra_dir=None):
    """PATH less the directories that hold an nvidia-smi, so that the run is GPU-less wherever it runs."""
    dirs = [
        d
        for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not os.path.exists(os.path.join(d, "nvidia-smi"))
    ]
    return os.pathsep.join(([str(extra_dir)] if extra_dir else []) + dirs)


def _run(out, *args, path=None, timeout=180):
    env = {**os.environ, "PATH": path or _path_without_nvidia_smi()}
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )


def test_without_a_gpu_it_skips_the_gpu_sections_and_exits_0(tmp_path):
    out = tmp_path / "gc"
    proc = _run(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no GPU: skipped" in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["report.json", "report.md"]  # no temporary file left
    report = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    sections = report["sections"]
    assert list(sections) == ["build", *GPU_SECTIONS[:1], *CPU_SECTIONS, *GPU_SECTIONS[1:]]
    for name, s in sections.items():
        assert s["status"] == "ok" or s["status"].startswith("skipped: "), (name, s["status"], s["summary"])
    for name in GPU_SECTIONS:
        assert sections[name]["status"] == "skipped: no GPU"
    assert sections["build"]["status"] == "skipped: not asked (--build)"
    for name in CPU_SECTIONS:
        assert sections[name]["status"] == "ok", (name, sections[name])
        assert sections[name]["elapsed_s"] > 0 and sections[name]["commands"]
    info = sections["info"]["data"]
    assert info["version"] and "cpu" in info["backends_built"] and info["cuda_available"] is False
    libraries = sections["libraries"]["data"]
    assert libraries["variants"][0]["variant"] == "lenet alone" and libraries["variants"][0]["ok"]
    assert report["gpu"]["present"] is False and report["exit_code"] == 0
    assert report["finished"] and report["elapsed_s"] > 0

    # The markdown says what the JSON says.
    for name, s in sections.items():
        assert f"| {name} | {s['status']} |" in md, name
        assert f"## {name}: {s['title']}" in md and f"Status: **{s['status']}**" in md
    assert f"exit status {report['exit_code']}" in md
    assert f"| version | {info['version']} |" in md
    assert "| variant |" in md and "| lenet alone |" in md


def test_a_gpu_lenet_cannot_use_fails_the_info_section_and_the_run(tmp_path):
    """A fake nvidia-smi that lists a GPU: lenet (no GPU here) cannot use it, so info fails,
    the GPU sections are skipped, and the exit status is 1."""
    import lenet

    if lenet.cuda_available():
        pytest.skip("lenet can use a GPU here")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: Fake GPU 80GB (UUID: GPU-00000000)'\n")
    fake.chmod(0o755)
    out = tmp_path / "gc"
    proc = _run(out, "--sections", "nvidia-smi,info,tests", "--quick", path=_path_without_nvidia_smi(bin_dir))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no GPU: skipped" not in proc.stdout and "lenet cannot use it" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    s = report["sections"]
    assert report["gpu"]["present"] and report["gpu"]["name"] == "Fake GPU 80GB"
    assert s["nvidia-smi"]["status"] == "ok" and "Fake GPU" in s["nvidia-smi"]["output"]
    assert s["info"]["status"] == "failed" and "lenet cannot use it" in s["info"]["summary"]
    assert s["tests"]["status"] == "skipped: no GPU usable by lenet"
    assert s["libraries"]["status"] == s["bench"]["status"] == "skipped: not selected"
    assert report["exit_code"] == 1 and "exit status 1" in (out / "report.md").read_text()


def test_usage_errors_exit_2(tmp_path):
    proc = _run(tmp_path / "gc", "--sections", "info,nonsense")
    assert proc.returncode == 2 and "unknown section" in proc.stderr
    assert not (tmp_path / "gc").exists()


def _fabricated_gpu_report(gc):
    gpu = {
        "present": True,
        "usable": True,
        "name": "NVIDIA H100 80GB HBM3",
        "gpus": ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"],
    }
    report = gc.new_report("tools/gpu-check out", gpu, {"quick": False, "sections": gc.NAMES})
    s = report["sections"]
    s["build"].update(status="skipped: not asked (--build)")
    s["nvidia-smi"].update(
        gc.section("ok", "NVIDIA H100 80GB HBM3", "| NVIDIA-SMI 580.159.04 |", {"gpus": gpu["gpus"]}), elapsed_s=0.2
    )
    s["info"].update(gc.section("ok", "lenet 0.1.0", "", {"version": "0.1.0", "cuda_available": True}), elapsed_s=1)
    s["libraries"].update(
        gc.section(
            "ok",
            "3 processes; unchanged",
            "",
            {
                "variants": [
                    {"variant": "lenet alone", "ok": True, "cudnn_loaded": "9.28.1", "cublas_loaded": "13.10.0"},
                    {
                        "variant": "after import torch",
                        "ok": True,
                        "cudnn_loaded": "9.28.1",
                        "cublas_loaded": "13.10.0",
                        "changed": [],
                        "gpu_vs_cpu_max_abs_diff": 2.4e-7,
                    },
                ],
                "keys": list(gc.INFO_KEYS),
                "not_reported": ["cudnn_path", "cublas_path"],
            },
        ),
        elapsed_s=9,
    )
    tests_output = (
        "F....\nFAILED tests/cuda/test_cuda.py::test_concurrent_callers - AssertionError\n"
        "1 failed, 151 passed, 3 skipped, 1496 deselected in 88.20s"
    )
    s["tests"].update(
        gc.section(
            "failed",
            "GPU tests in tests/: 1 failed, 151 passed (exit 1)",
            tests_output,
            {"runs": [{"run": "GPU tests in tests/", "rc": 1, **gc.pytest_counts(tests_output)}]},
        ),
        elapsed_s=90,
    )
    s["memcheck"].update(
        gc.section(
            "ok",
            "ERROR SUMMARY: 0 errors",
            "========= ERROR SUMMARY: 0 errors",
            {"summary_lines": ["ERROR SUMMARY: 0 errors"], "errors": 0},
        ),
        elapsed_s=50,
    )
    s["racecheck"].update(status="skipped: compute-sanitizer not found (PATH, /usr/local/cuda/bin)")
    s["describe"].update(
        gc.section(
            "ok",
            "cuda: 2 plans",
            "",
            {
                "device": "cuda",
                "description": "NVIDIA H100",
                "tf32": False,
                "graphs": True,
                "plans": [
                    {"capacity": 1, "execution": "graph", "why": "captured"},
                    {"capacity": 64, "execution": "eager", "why": "capture failed: cudaErrorStreamCaptureUnsupported"},
                ],
                "steps": [
                    {
                        "op": "conv2d",
                        "layers": ["conv2d", "re_lu"],
                        "capacity": 1,
                        "algorithm": "IMPLICIT_PRECOMP_GEMM",
                        "fused": True,
                        "fusion": "conv+bias+relu",
                        "workspace_bytes": 4096,
                    }
                ],
            },
        ),
        elapsed_s=3,
    )
    table = (
        "| model | contender | b1 p50 |\n|---|---|---:|\n| lenet5 | `lenet-cuda` | 21.4 µs |\n"
        "| lenet5 | `torch-cuda-graph` | 35.0 µs |"
    )
    s["bench"].update(
        gc.section(
            "ok",
            "7 ok",
            "lenet-bench output",
            {"table_md": table, "images": "MNIST test set", "reference": {"name": "keras-jax"}},
        ),
        elapsed_s=300,
    )
    return report


def test_the_report_of_a_gpu_run(gc, tmp_path):
    report = _fabricated_gpu_report(gc)
    gc.write_report(tmp_path, report)
    md = (tmp_path / "report.md").read_text()
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc == json.loads(json.dumps(report, default=str))
    assert doc["exit_code"] == 1  # a GPU, and the tests failed
    assert "| tests | failed | 90.0 s | GPU tests in tests/: 1 failed, 151 passed (exit 1) |" in md
    assert "FAILED tests/cuda/test_cuda.py::test_concurrent_callers" in md
    assert "| GPU tests in tests/ | 151 | 1 | 3 | 1496 | 1 |" in md  # passed, failed, skipped, deselected, rc
    assert "| lenet5 | `torch-cuda-graph` | 35.0 µs |" in md  # the benchmark's table, as it is
    assert "| op | layers | capacity | algorithm | fused | fusion | workspace_bytes |" in md
    assert "| conv2d | conv2d, re_lu | 1 | IMPLICIT_PRECOMP_GEMM | True | conv+bias+relu | 4096 |" in md
    assert "| 64 | eager | capture failed: cudaErrorStreamCaptureUnsupported |" in md
    assert "| after import torch | 9.28.1 | 13.10.0 | none | 2.4e-07 |" in md
    assert "Not reported by this lenet's info(): cudnn_path, cublas_path." in md
    assert "- ERROR SUMMARY: 0 errors" in md and "GPU: GPU 0: NVIDIA H100 80GB HBM3" in md
    assert "| racecheck | skipped: compute-sanitizer not found (PATH, /usr/local/cuda/bin) |" in md

    # The exit rule: non-zero only when a GPU is there and a section failed.
    report["sections"]["tests"]["status"] = "ok"
    assert gc.exit_code(report) == 0
    report["sections"]["bench"]["status"] = "failed"
    assert gc.exit_code(report) == 1
    report["gpu"]["present"] = False
    assert gc.exit_code(report) == 0


def test_pytest_summary_and_output_helpers(gc):
    assert gc.pytest_counts("...\n== 2 failed, 10 passed, 1 skipped, 3 deselected, 1 error, 4 warnings in 3.2s ==") == {
        "failed": 2,
        "passed": 10,
        "skipped": 1,
        "deselected": 3,
        "errors": 1,
        "warnings": 4,
    }
    assert gc.pytest_counts("5 passed in 0.12s\n") == {"passed": 5}
    assert gc.pytest_counts("no tests ran in 0.01s") == {}
    assert gc.pytest_counts("Traceback: boom") == {}
    text = "a" * 50_000
    trimmed = gc.trim(text)
    assert len(trimmed) < 13_000 and "characters left out" in trimmed
    assert gc.fence("x ``` y")[0] == "````"
    assert gc.cell("a|b\nc") == "a\\|b c" and gc.cell(None) == "—" and gc.cell([]) == "none"


def test_a_command_past_its_limit_is_killed_with_its_children(gc):
    if shutil.which("sh") is None:
        pytest.skip("no sh")
    t0 = time.monotonic()
    ran = gc.run(["sh", "-c", "echo started; sleep 60 & sleep 60"], timeout=1)
    assert ran.timed_out and "started" in ran.output and "killed after" in ran.output
    assert time.monotonic() - t0 < 20


def test_sanitizer_summaries_of_memcheck_and_racecheck_are_read(gc):
    """racecheck says "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)", not
    memcheck's "ERROR SUMMARY": a clean racecheck run once read as failed on a GPU."""
    memcheck = "========= LEAK SUMMARY: 0 bytes leaked in 0 allocations\n========= ERROR SUMMARY: 2 errors\n"
    racecheck = "inference done\n========= RACECHECK SUMMARY: 3 hazards displayed (1 errors, 2 warnings)\n"
    assert gc.sanitizer_summary(memcheck) == (
        ["LEAK SUMMARY: 0 bytes leaked in 0 allocations", "ERROR SUMMARY: 2 errors"],
        [2],
    )
    assert gc.sanitizer_summary(racecheck)[1] == [1]
    assert gc.sanitizer_summary("no summary\n") == ([], [])
