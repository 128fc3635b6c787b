"""tools/gpu-check: run here, where there is no GPU (its CPU-side sections, the report, the
exit status), and its report writer on a fabricated GPU run (tables, failures, the exit rule)."""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO

SCRIPT = REPO / "tools" / "gpu-check"
GPU_SECTIONS = [
    "nvidia-smi",
    "tests",
    "memcheck",
    "racecheck",
    "describe",
    "probe",
    "routing",
    "profile",
    "bench",
    "targets",
]
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
    assert s["libraries"]["status"] == s["bench"]["status"] == s["probe"]["status"] == "skipped: not selected"
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
            "1 of 1 runs whole",
            "lenet-bench output",
            {
                "images": "MNIST test set",
                "reference": {"name": "keras-jax"},
                "wanted_runs": 1,
                "files": "/tmp/b",
                "runs": [{"run": 1, "seconds": 80.0, "rc": 0, "results": True, "ok": 7, "table_md": table}],
            },
        ),
        elapsed_s=300,
    )
    s["probe"].update(gc.section("ok", "best", "", {"calls": 2000, "rows": PROBE_ROWS}), elapsed_s=20)
    s["targets"].update(
        gc.section("ok", "t", "", {"rows": gc.assess_targets(PROBE_ROWS, [_bench_run(1, BENCH_RATES)])}),
        elapsed_s=0.1,
    )
    return report


def _probe_row(model, path, p50, infer, transfer="staged"):
    return {
        "model": model,
        "path": path,
        "max_abs_dp": 1e-7,
        "predict_proba": {"p50_us": p50, "p90_us": p50 + 2, "p99_us": p50 + 9},
        "infer": {"p50_us": infer, "p90_us": infer + 2, "p99_us": infer + 9},
        "plan": {"kernels": "network", "execution": "launch", "transfer": transfer},
    }


PROBE_ROWS = [
    _probe_row("lenet5", "cpu", 16.6, 30.0),
    _probe_row("lenet5", "auto", 45.0, 53.5),
    _probe_row("lenet5", "fast", 12.4, 19.0, "parameter"),
    _probe_row("lenet-keras", "auto", 45.0, 49.0),
    {"model": "lenet-tf", "path": "fast", "error": "CudaError: boom"},
    _probe_row("lenet-tf", "library", 78.7, 82.0),
    # batch 8192 (images/s): not a batch-1 figure, never taken for one
    {"model": "lenet5", "path": "fast", "batch": 8192, "float32": 3100000, "float32 pinned": 4200000},
]
# images/s per (model, contender) per batch, as one lenet-bench run measures them
BENCH_RATES = {
    ("lenet5", "lenet-cpu"): {8: 238e3, 64: 726e3, 1024: 1.10e6, 8192: 1.15e6},
    ("lenet5", "lenet-cuda"): {8: 86e3, 64: 550e3, 1024: 1.57e6, 8192: 1.50e6},
    ("lenet5", "lenet-cuda-fast"): {8: 300e3, 64: 900e3, 1024: 3.0e6, 8192: 3.3e6},
    ("lenet5", "lenet-cuda-fast-pixels"): {8: 310e3, 1024: 8e6, 8192: 11e6},
    ("lenet5", "torch-cuda"): {1024: 1.5e6, 8192: 1.57e6},
    ("lenet5", "torch-cuda-graph"): {1024: 1.6e6, 8192: 1.2e6},
    ("lenet-keras", "lenet-cpu"): {8: 323e3, 8192: 2.05e6},
    ("lenet-keras", "lenet-cuda"): {8: 117e3, 8192: 1.89e6},
    ("lenet-keras", "torch-cuda"): {8192: 2.28e6},
}


def _bench_run(k, rates, failed=()):
    rows = []
    for (model, contender), by in rates.items():
        series = [{"batch": b, "images_per_s": v} for b, v in sorted(by.items())]
        rows.append({"model": model, "contender": contender, "status": "ok", "agree": True, "series": series})
    for model, contender, reason in failed:
        rows.append({"model": model, "contender": contender, "status": "failed", "reason": reason, "series": []})
    return {"run": k, "rows": rows}


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
    assert "| 1 | 80 | 0 | True | 7 |" in md  # the bench's runs
    assert "| lenet5 | fast | 12.4 | 14.4 | 21.4 | 19 | network | launch | parameter |" in md  # the probe
    assert "| lenet-tf | fast |" in md and "CudaError: boom" in md
    assert "| lenet5 | fast | 8192 | 3100000 | 4200000 |" in md
    assert "| batch 1 predict_proba p50 (float32, host to host) | lenet5 | 12.4 us (fast) | <= 15 us | yes |" in md
    assert (
        "| batch 1 predict_proba p50 (float32, host to host) | lenet-keras | 45.0 us (auto) | <= 15 us | **no** |" in md
    )

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


# ---- issue 52: the targets, the bench's runs, the probe, the profile, the schedule ----------


def _by_target(rows, target, model):
    (row,) = [r for r in rows if r["target"].startswith(target) and r["model"] == model]
    return row


def test_the_targets_are_judged_from_the_probe_and_the_median_of_the_runs(gc):
    slower_run = {k: {b: v * 0.5 for b, v in by.items()} for k, by in BENCH_RATES.items()}
    runs = [_bench_run(1, BENCH_RATES), _bench_run(2, slower_run), _bench_run(3, BENCH_RATES)]
    rows = gc.assess_targets(PROBE_ROWS, runs, [{"model": "lenet5", "path": "auto", "gpu_us_per_call": 9.5}])
    b1 = _by_target(rows, "batch 1 predict_proba", "lenet5")
    assert b1["met"] is True and b1["measured"] == "12.4 us (fast)" and "auto 45.0" in b1["detail"]
    assert "auto: GPU 9.5 us a call" in b1["detail"] and "10-15 us" in b1["bound"]
    assert _by_target(rows, "batch 1 predict_proba", "lenet-keras")["met"] is False
    tf = _by_target(rows, "batch 1 predict_proba", "lenet-tf")  # fast errored: library's figure
    assert tf["met"] is False and tf["measured"] == "78.7 us (library)" and tf["goal"] == "<= 30 us"
    infer = _by_target(rows, "Engine.infer", "lenet5")
    assert infer["met"] is False and infer["measured"] == "+8.5 us (auto, the widest)"
    # the medians (1x, 0.5x, 1x): the runs' own figures, not the slow run's
    cpu = _by_target(rows, "from batch 8 up", "lenet5")
    assert cpu["met"] is True and cpu["measured"] == "faster at every batch"
    keras_cpu = _by_target(rows, "from batch 8 up", "lenet-keras")
    assert keras_cpu["met"] is False and "b8: 117k (lenet-cuda) vs CPU 323k" in keras_cpu["measured"]
    f32 = _by_target(rows, "batch 8192 float32", "lenet5")
    assert f32["met"] is True and f32["measured"] == "3.30M (lenet-cuda-fast) vs 1.57M (torch-cuda)"
    assert _by_target(rows, "batch 8192 float32", "lenet-keras")["met"] is False
    drop = _by_target(rows, "batch 8192 never slower", "lenet5")
    assert drop["met"] is False and drop["measured"] == "lenet-cuda 1.50M < 1.57M"
    u8 = _by_target(rows, "batch 8192 uint8", "lenet5")
    assert u8["met"] is True and u8["measured"] == "11.00M (lenet-cuda-fast-pixels)"
    assert _by_target(rows, "batch 8192 uint8", "lenet-keras")["met"] is None  # no uint8 row measured
    assert not [r for r in rows if r["target"].startswith("batch 8192 uint8") and r["model"] == "lenet-tf"]
    # nothing measured at all: every row says so, none is called met
    assert all(r["met"] is None for r in gc.assess_targets([], []))


def _fake_bench(tmp_path, script):
    """A python that runs `script` for `-m lenet.bench ARGS` (any other use: the real one)."""
    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-m" ] && [ "$2" = "lenet.bench" ]; then shift 2; exec '
        f'"{sys.executable}" "{script}" "$@"; fi\n'
        f'exec "{sys.executable}" "$@"\n'
    )
    fake.chmod(0o755)
    return fake


FAKE_BENCH = r"""
import json, os, sys
from pathlib import Path
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
out = Path(args["--out"])
count = Path(os.environ["FAKE_BENCH_COUNT"])
k = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(k))
assert "--no-probe" in sys.argv and args["--rounds"] == "2" and args["--images"] == "8192", sys.argv
if k == 2:  # the second run dies before writing anything
    print("Segmentation fault", flush=True)
    sys.exit(-11 & 0xFF)
out.mkdir(parents=True)
rows = [{"model": "lenet5", "contender": c, "status": "ok", "agree": True, "reason": None,
         **{f"tput_b{b}": 1e6 for b in (1, 8, 64, 1024, 8192)},
         "series": [{"batch": b, "images_per_s": 1e6} for b in (1, 8, 64, 1024, 8192)]}
        for c in args["--contenders"].split(",")]
rows[-1].update(status="failed", reason="killed by SIGSEGV in its own process (torch.cuda.CUDAGraph.replay)",
                series=[], **{f"tput_b{b}": None for b in (1, 8, 64, 1024, 8192)})
header = {"models": {"lenet5": {}}, "batch_sizes": [1, 8, 64, 1024, 8192], "reference": {"name": "keras-jax"}}
(out / "results.json").write_text(json.dumps({"header": header, "results": rows}))
(out / "README-table.md").write_text("| model | contender |\n|---|---|\n| lenet5 | `lenet-cuda` |\n")
"""


def test_the_bench_is_repeated_and_each_runs_rows_or_crash_reported(gc, tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text(FAKE_BENCH)
    os.environ["FAKE_BENCH_COUNT"] = str(tmp_path / "count")
    try:
        c = gc.Check(tmp_path / "out", False, {}, None, tmp_path, python=str(_fake_bench(tmp_path, script)))
        c.files = tmp_path / "files"
        c.deadline = time.monotonic() + 120
        got = gc.s_bench(c)
    finally:
        del os.environ["FAKE_BENCH_COUNT"]
    data = got["data"]
    assert [r["run"] for r in data["runs"]] == [1, 2, 3] and data["wanted_runs"] == 3
    assert [r["results"] for r in data["runs"]] == [True, False, True]
    assert sorted(p.name for p in (tmp_path / "files").iterdir()) == ["run1", "run3"]
    assert got["status"] == "failed" and got["summary"].startswith("2 of 3 runs with results")
    assert "run 2: lenet-bench: exit status 245" in got["summary"]
    assert "run 1: lenet5 lenet-cuda-fast-pixels: killed by SIGSEGV in its own process" in got["summary"]
    assert "Segmentation fault" in got["output"]
    assert c.results["bench"] is data  # the targets read it


def test_the_bench_stops_repeating_when_the_next_run_would_not_fit(gc, tmp_path):
    script = tmp_path / "fake_bench.py"
    script.write_text("import time; time.sleep(2)\n" + FAKE_BENCH)
    os.environ["FAKE_BENCH_COUNT"] = str(tmp_path / "count")
    try:
        c = gc.Check(tmp_path / "out", False, {}, None, tmp_path, python=str(_fake_bench(tmp_path, script)))
        c.files = tmp_path / "files"
        c.deadline = time.monotonic() + 31  # room for one 2-second run, then under 30 s left
        got = gc.s_bench(c)
    finally:
        del os.environ["FAKE_BENCH_COUNT"]
    assert len(got["data"]["runs"]) == 1
    assert "run 2 of 3 not started" in got["summary"]


def test_probe_and_ncu_output_are_read(gc):
    out = 'images\n{"model": "lenet5", "path": "fast", "predict_proba": {"p50_us": 9.1}}\n{"x": 1}\n{bad json\n'
    assert gc.probe_rows(out) == [{"model": "lenet5", "path": "fast", "predict_proba": {"p50_us": 9.1}}]
    csv = (
        "==PROF== Connected to process 1\n"
        '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
        '"0","1","graph","gpu__time_duration.sum","usecond","12.50"\n'
        '"1","1","forward_parameter","gpu__time_duration.sum","nsecond","8,200"\n'
        '"2","1","forward_parameter","gpu__time_duration.sum","nsecond","8,400"\n'
        '"2","1","forward_parameter","other__metric","nsecond","1"\n'
    )
    assert gc.ncu_workloads(csv) == [12.5, 8.2, 8.4]
    assert gc.ncu_workloads("==ERROR== ERR_NVGPUCTRPERM") == []


def _fake_sections(gc, monkeypatch, seconds):
    seen = {}

    def make(name):
        def run(c):
            seen[name] = (time.monotonic(), c.deadline)
            time.sleep(seconds)
            seen[name] += (time.monotonic(),)
            return gc.section("ok", name)

        return run

    names = ["libraries", "tests", "memcheck", "probe", "bench"]
    sections = [gc.Section(n, n, False, (100, 100), make(n)) for n in names]
    monkeypatch.setattr(gc, "SECTIONS", sections)
    return names, seen


def test_untimed_sections_run_side_by_side_and_timed_ones_alone(gc, monkeypatch, tmp_path):
    names, seen = _fake_sections(gc, monkeypatch, 0.5)
    report = gc.new_report("x", {"present": False}, {})
    c = gc.Check(tmp_path, False, {n: 100 for n in names}, None, tmp_path)
    c.gpu = {"present": False}
    gc.run_sections(c, report, names)
    assert all(report["sections"][n]["status"] == "ok" for n in names)
    start = {n: seen[n][0] for n in names}
    end = {n: seen[n][2] for n in names}
    # libraries, tests, memcheck overlap; probe starts after all three ended; bench after probe
    assert max(start[n] for n in names[:3]) < min(end[n] for n in names[:3])
    assert start["probe"] >= max(end[n] for n in names[:3]) and start["bench"] >= end["probe"]
    # each thread had its own deadline
    assert all(abs(seen[n][1] - (seen[n][0] + 100)) < 1 for n in names)


def test_a_budget_keeps_time_for_the_timed_sections_and_skips_what_would_not_fit(gc, monkeypatch, tmp_path):
    names, seen = _fake_sections(gc, monkeypatch, 0.1)
    c = gc.Check(tmp_path, False, {n: 1000 for n in names}, None, tmp_path)
    c.gpu = {"present": True}  # the fake sections need none; the timed ones keep their share only where a GPU is
    reserve = gc.RESERVE_S["probe"] + gc.RESERVE_S["bench"]
    c.budget_end = time.monotonic() + gc.MIN_SECTION_S + 5 + reserve
    report = gc.new_report("x", {"present": False}, {})
    gc.run_sections(c, report, names, parallel=False)
    assert all(report["sections"][n]["status"] == "ok" for n in names)
    # what runs before the probe and the bench ends early enough to leave them their share
    assert all(seen[n][1] <= c.budget_end - reserve for n in names[:3])
    assert seen["probe"][1] <= c.budget_end - gc.RESERVE_S["bench"] and seen["bench"][1] <= c.budget_end
    c.budget_end = time.monotonic() + 10
    report = gc.new_report("x", {"present": False}, {})
    gc.run_sections(c, report, names)
    for n in names:
        assert report["sections"][n]["status"].startswith("skipped: out of time ("), n
        assert "of the --budget left" in report["sections"][n]["status"]


def test_a_cut_off_pytest_run_is_counted_from_its_lines(gc):
    out = (
        "[gw0] [ 10%] PASSED tests/cuda/test_a.py::test_x\n"
        "[gw1] [ 20%] FAILED tests/cuda/test_a.py::test_y\n"
        "tests/cuda/test_b.py::test_z SKIPPED (needs a CUDA GPU)  [ 30%]\n"
        "tests/cuda/test_b.py::test_w PASSED                       [ 40%]\n"
        "[gw0] [ 50%] ERROR tests/cuda/test_c.py::test_v\n"
        "[gpu-check: killed after 150 s, the section's time limit]\n"
    )
    assert gc.pytest_counts(out) == {}
    assert gc.pytest_progress(out) == {"passed": 2, "failed": 1, "skipped": 1, "errors": 1}


def test_a_stopped_check_kills_every_process_it_started(gc):
    if shutil.which("sh") is None:
        pytest.skip("no sh")
    got = {}
    t = threading.Thread(target=lambda: got.update(r=gc.run(["sh", "-c", "sleep 60 & sleep 60"], timeout=100)))
    t0 = time.monotonic()
    t.start()
    while not gc._LIVE and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    gc.kill_all()
    t.join(30)
    assert not t.is_alive() and time.monotonic() - t0 < 25
    assert not gc._LIVE


def test_the_sanitized_script_runs_every_cuda_path(gc):
    script = gc.SANITIZED_SCRIPT
    for needle in ('for path in ("fused", "library")', 'cuda_path="fast"', "pinned=True", '"lenet-tf"', "CHUNKED"):
        assert needle in script, needle
    compile(script, "sanitized_inference.py", "exec")
    compile(gc.PROBE_SCRIPT, "probe.py", "exec")
    compile(gc.PROFILE_SCRIPT, "profiled.py", "exec")


def test_the_probe_script_runs_here_and_names_what_it_could_not_run(gc, tmp_path):
    """On the CPU: the CPU engine's figures, and a row with the error for each CUDA path."""
    script = tmp_path / "probe.py"
    script.write_text(gc.PROBE_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), "", "lenet5", "fast", "50"], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    rows = gc.probe_rows(proc.stdout)
    cpu = [r for r in rows if r["path"] == "cpu"]
    assert len(cpu) == 1 and cpu[0]["max_abs_dp"] == 0.0
    assert 0 < cpu[0]["predict_proba"]["p50_us"] <= cpu[0]["predict_proba"]["p99_us"] and cpu[0]["infer"]["p50_us"] > 0
    if not lenet_cuda_available():
        errors = [r for r in rows if r["path"] == "fast"]
        assert errors and all("CudaError" in r["error"] for r in errors), rows


def lenet_cuda_available():
    import lenet

    return lenet.cuda_available()


def test_the_profile_section_sets_each_calls_gpu_time_beside_the_probes(gc, tmp_path, monkeypatch):
    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/bin/sh\necho '==PROF== Connected'\n"
        'echo \'"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\'\n'
        'for i in 0 1 2; do echo "\\"$i\\",\\"forward_parameter\\",\\"gpu__time_duration.sum\\",'
        '\\"nsecond\\",\\"9,$((i + 1))00\\""; done\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(gc, "ncu", lambda: str(fake))
    c = gc.Check(tmp_path, False, {}, None, tmp_path)
    c.results["probe"] = {"rows": [{"model": "lenet5", "path": "fast", "predict_proba": {"p50_us": 14.0}}]}
    c.deadline = time.monotonic() + 100
    got = gc.s_profile(c)
    rows = {(r["model"], r["path"]): r for r in got["data"]["rows"]}
    assert rows[("lenet5", "fast")] == {
        "model": "lenet5",
        "path": "fast",
        "workloads": 3,
        "gpu_us_per_call": 9.2,
        "host_to_host_p50_us": 14.0,
        "rest_us": 4.8,
    }
    assert got["status"] == "ok" and "lenet5 fast: GPU 9.2 us a call of 14.0 us host to host" in got["summary"]
    assert len(rows) == 4 and c.results["profile"] is got["data"]
