"""What the benchmark shows: the machine header, the terminal table, results.json,
results.csv, latency.png and README-table.md.

A result is one flat dict per (model, contender); times are in seconds, throughputs in
images per second. ``status`` is "ok", "skipped" (reason) or "failed" (error).
"""

from __future__ import annotations

import csv
import datetime
import json
import math
import os
import platform
import sys
from pathlib import Path
from typing import Optional

from .figure import figure

REFERENCE = "keras-predict"


# --- the machine -----------------------------------------------------------------------------


def _cpuinfo(key: str) -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def machine(threads: int) -> dict:
    import lenet

    info = lenet.info()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count()
    try:
        mem = int(Path("/proc/meminfo").read_text().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        mem = None
    now = datetime.datetime.now().astimezone()
    return {
        "date": now.isoformat(timespec="seconds"),
        "cpu": _cpuinfo("model name"),
        "isa": next(
            (
                isa
                for flag, isa in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("sse4_2", "SSE4.2"))
                if flag in _cpuinfo("flags").split()
            ),
            "?",
        ),
        # The kernels lenet's "auto" runs here: the CPU's widest, or LENET_MAX_CPU_ISA's cap.
        "lenet_kernels": info["cpu_kernels"] + (" (LENET_MAX_CPU_ISA)" if os.environ.get("LENET_MAX_CPU_ISA") else ""),
        "cores": cores,
        "memory_gib": round(mem, 1) if mem else None,
        "threads": threads,
        "os": f"{platform.system()} {platform.release()}",
        "gpu": info.get("gpu") or None,
        "gpu_note": None if info.get("gpu") else (info.get("gpu_error") or "lenet built without CUDA"),
        "load_average_start": os.getloadavg()[0],
    }


# --- formatting ------------------------------------------------------------------------------------


def fmt_time(s: Optional[float]) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale or unit == "µs":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    return "—"  # pragma: no cover


def fmt_rate(r: Optional[float]) -> str:
    if r is None or not math.isfinite(r):
        return "—"
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if r >= scale:
            return f"{r / scale:.3g}{unit}"
    return f"{r:.3g}"


def fmt_x(x: Optional[float]) -> str:
    """A ratio to two significant figures, never in exponent form nor rounded to nothing:
    0.0023×, 0.83×, 1.2×, 17×, 940×, 12,000×."""
    if x is None or not math.isfinite(x) or x <= 0:
        return "—"
    digits = 1 - math.floor(math.log10(x))  # decimals that keep two significant figures
    v = round(x, digits)
    if v >= 10:
        return f"{v:,.0f}×"
    return f"{v:.{max(digits, 0)}f}×"


def skipped_line(results: list[dict]) -> Optional[str]:
    """Every skipped contender on one line, grouped by reason (the models named where a
    reason holds for some of them only)."""
    models = list(dict.fromkeys(r["model"] for r in results))
    groups: dict = {}
    for r in results:
        if r["status"] == "skipped":
            groups.setdefault(r["reason"], {}).setdefault(r["contender"], []).append(r["model"])
    if not groups:
        return None
    parts = []
    for reason, where in groups.items():
        names = ", ".join(c if len(m) == len(models) else f"{c} ({', '.join(m)})" for c, m in where.items())
        parts.append(f"{names}: {reason}")
    return f"skipped ({sum(len(w) for w in groups.values())}): " + "; ".join(parts)


def other_text(r: dict, key: str = "b1") -> str:
    """``1.2× tflite``: the speed-up over the fastest other contender, and which it is."""
    ratio, name = (
        (r["speedup_b1_vs_best_other"], r["best_other_b1"])
        if key == "b1"
        else (r["speedup_tput_vs_best_other"], r["best_other_tput"])
    )
    if ratio is None:
        return "—"
    return f"{fmt_x(ratio)} {name}" + (f" (b{r['best_other_tput_batch']})" if key != "b1" else "")


def best_rate(r: dict) -> str:
    """``29.1k (b256)``: the row's throughput at its best batch, and which batch that was."""
    return "—" if r.get("tput_best") is None else f"{fmt_rate(r['tput_best'])} (b{r['tput_best_batch']})"


RATIO_LEGEND = (
    "×Keras: the fastest of Keras' own inference paths here (model.predict, model(x), or the model "
    "in a tf.function: keras-predict, keras-call, keras-function) over this row's time at batch 1 "
    "(2× = twice as fast as Keras at its best; keras-predict is the seed's loop); ×fastest other: "
    "the fastest other contender's batch-1 time over this row's, "
    "that contender named (for lenet's rows the fastest engine that is not lenet; for the others "
    "the fastest contender but themselves, lenet included; rows timed through Python against rows "
    "timed through Python, lenet-cpp's C++ harness against none); above 1× this row is the faster; "
    "the same ratios in throughput compare each row at its own best batch, named; every ratio is "
    "taken on each row's best round, as a hand-written loop's minimum over its blocks is"
)


def fmt_dp(d: Optional[float]) -> str:
    return "—" if d is None else f"{d:.1e}"


def fmt_units(r: dict) -> str:
    """A row's distance from the float64 answers: "RMS / max" in float32 rounding units."""
    if r.get("f64_rms_units") is None:
        return "—"
    return f"{r['f64_rms_units']:.2f} / {r['f64_max_units']:.1f}"


EXACTNESS_LEGEND = (
    "vs float64: each contender's probabilities against the model evaluated in float64, in units of "
    "float32's rounding scale (every sum rounded once; root mean square / largest over every digit "
    "and class): float32 engines land at 0.3-0.8 / 2-5, a less exact algorithm several units further"
)


def _onnx_models(header: dict) -> tuple[int, int]:
    """(models checked against ONNX Runtime on their file, models) of the run."""
    models = [a for a in header.get("models", {}).values() if not a.get("error")]
    return sum(1 for a in models if "ONNX Runtime" in (a.get("reference") or "")), len(models)


def reference_label(header: dict) -> str:
    """What the agreement columns compare with: "Keras" (either backend), "ONNX Runtime" (a run
    of ONNX files), "the reference" (both kinds), or "lenet CPU"."""
    onnx, models = _onnx_models(header)
    if models and onnx == models:
        return "ONNX Runtime"
    name = (header.get("reference") or {}).get("name", REFERENCE)
    keras = "Keras" if name.startswith("keras") else "lenet CPU"
    return "the reference" if onnx else keras


def reference_line(header: dict) -> str:
    ref = header.get("reference") or {"name": REFERENCE, "what": "Keras 3 model.predict, TensorFlow backend"}
    onnx, models = _onnx_models(header)
    if models and onnx == models:
        return "reference for agreement: ONNX Runtime (CPU) on each ONNX file itself"
    line = f"reference for agreement: `{ref['name']}`, {ref['what']}" + (f" ({ref['why']})" if ref.get("why") else "")
    return line + ("; for an ONNX file, ONNX Runtime (CPU) on the file itself" if onnx else "")


def agree_text(r: dict) -> str:
    if r["agree"] is None:
        return "unchecked"
    return "yes" if r["agree"] else f"DISAGREES ({r['mismatches']})"


def model_line(model: str, about: dict, images: int) -> str:
    if about.get("error"):
        return f"{model}: {about['error']}"
    line = f"{model} — {about['parameters']:,} parameters ({Path(about['weights']).name})"
    if about.get("input_shape"):
        line += f"; fed (n, {', '.join(map(str, about['input_shape']))})"
    if about.get("macs"):
        line += (
            f"; {about['macs'] / 1e6:.2f} M multiply-adds per image, FMA floor "
            f"{fmt_time(about['floor_s'])} per image = {fmt_rate(about['floor_images_per_s'])} img/s"
        )
    if about.get("keras_accuracy") is not None:
        line += f"; Keras accuracy {about['keras_accuracy']:.2%} on these {images} digits"
    elif about.get("reference_accuracy") is not None:
        line += f"; reference accuracy {about['reference_accuracy']:.2%} on these {images} digits"
    if about.get("reference"):  # a model with its own reference (an ONNX file: ONNX Runtime on it)
        line += f"; checked against {about['reference']}"
    if about.get("reference_error"):
        line += f"; no reference, predictions unchecked ({about['reference_error']})"
    if about.get("largest_batch"):
        line += f"; largest batch {about['largest_batch']} ({about['largest_batch_why']})"
    return line


def infer_lines(header: dict) -> list[str]:
    """Where Engine.infer's time goes on PNG files, per model measured."""
    lines = []
    for model, about in header["models"].items():
        got = about.get("infer_png")
        if not got:
            continue
        parts = []
        for key, t in ((k, k.split("_")[1]) for k in got if k.startswith("threads_")):
            m = got[key]
            parts.append(
                f"{t} thread{'s' if t != '1' else ''}: {fmt_time(m['total'])} = decode "
                f"{fmt_time(m['decode'])} + prepare {fmt_time(m['prepare'])} + engine "
                f"{fmt_time(m['engine'])} + results {fmt_time(m['rest'])}"
            )
        lines.append(f"{model}: lenet.infer on {got['images']} PNG files, " + "; ".join(parts))
        one = got.get("one_file")
        if one:
            lines.append(
                f"{model}: Engine.infer on one PNG file {fmt_time(one['infer'])} = {one['infer'] / one['floor']:.2f}x "
                f"its floor {fmt_time(one['floor'])} (read + decode in the core, then predict_proba, in one "
                f"call; each alone: {fmt_time(one['read_decode'])} + {fmt_time(one['engine'])})"
            )
    return lines


def busy(m: dict) -> bool:
    """Whether other work used the machine: a load above half its cores before the run, or
    at its end beyond the run's own threads (the 1-minute average then counts them)."""
    start = m["load_average_start"]
    end = m.get("load_average_end", start) - m.get("threads", 0)
    return max(start, end) > m["cores"] / 2


def _load(m: dict) -> str:
    """The 1-minute load average at start and end, with a warning when others used the machine."""
    loads = [m["load_average_start"], m.get("load_average_end", m["load_average_start"])]
    text = " at start, ".join(f"{v:.2f}" for v in loads) + " at end"
    if busy(m):
        text += f" on {m['cores']} cores: the machine was busy with other work, the figures are noisy"
    return text


def header_lines(h: dict) -> list[str]:
    m = h["machine"]
    gpu = m["gpu"] or f"no GPU ({m['gpu_note']})"
    lines = [
        f"{m['cpu']} ({m['isa']}; lenet's kernels {m.get('lenet_kernels', '?')}), {m['cores']} cores, "
        f"{m['memory_gib']} GiB, {m['os']}; {gpu}",
        f"threads: {m['threads']} for every CPU contender (TF intra/inter-op, ONNX Runtime, torch, BLAS, "
        f"lenet); load average {_load(m)}",
        f"work: {h['images']} digits from {h['source']}; {h['rounds']} interleaved rounds of timed blocks "
        f"(batch 1: {h['latency_block_s']:g} s, batches {h['block_s']:g} s); warm-up excluded",
        "versions: " + ", ".join(f"{k} {v}" for k, v in h["versions"].items()),
        reference_line(h),
        f"FMA floor: {h['fma']['gmacs_per_thread']:.1f} G multiply-adds/s per thread with {h['fma']['threads']} "
        f"threads busy (measured, {h['fma']['kernels']} loop); a model's floor is its multiply-adds over "
        f"{h['fma']['threads']} threads at that rate",
        f"date: {m['date']}; {h['elapsed_s']:.0f} s in all",
    ]
    return lines


# --- files ------------------------------------------------------------------------------------------


def _clean(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def write_json(path: Path, header: dict, results: list[dict]) -> None:
    path.write_text(json.dumps(_clean({"header": header, "results": results}), indent=1) + "\n")


def write_csv(path: Path, results: list[dict]) -> None:
    """One line per result: every scalar field (``series`` is in the JSON only)."""
    keys = [k for k in results[0] if k != "series"] if results else []
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for r in results:
            w.writerow({k: (";".join(v) if k == "flags" else v) for k, v in _clean(r).items() if k in keys})


def markdown(header: dict, results: list[dict]) -> str:
    m, sizes = header["machine"], header["batch_sizes"]
    lines = [
        f"lenet-bench on {m['cpu']} ({m['isa']}, lenet's kernels {m.get('lenet_kernels', '?')}, "
        f"{m['cores']} cores, {m['threads']} threads, "
        f"{m['gpu'] or 'no GPU'}), {m['date'][:10]}. {header['images']} MNIST digits, same weights and "
        f"array for all; {header['rounds']} interleaved rounds (b1 best, img/s best and the ratios: each row's "
        "best round; p50, p99 over every call; img/s per batch: the median round); "
        f"load average {_load(m)}; {reference_line(header)}.",
        "",
        "| model | contender | b1 best | b1 p50 | b1 p99 | "
        + " | ".join(f"img/s b{b}" for b in sizes)
        + " | img/s best (batch) | ×Keras (b1) | ×Keras (best batch) | ×fastest other (b1) "
        "| ×fastest other (best batch) "
        f"| agrees with {reference_label(header)} | max \\|Δp\\| | vs float64 (RMS / max units) |",
        "|---|---|---:|---:|---:|" + "---:|" * len(sizes) + "---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in results:
        if r["status"] == "skipped" or header["models"].get(r["model"], {}).get("error"):
            continue  # a model lenet could not load: one line in the summary below, not a row per contender
        cells = [r["model"], f"`{r['contender']}`", fmt_time(r["b1_best_s"]), fmt_time(r["b1_p50_s"])]
        cells += [fmt_time(r["b1_p99_s"])]
        cells += [fmt_rate(r.get(f"tput_b{b}")) for b in sizes]
        cells += [
            best_rate(r),
            fmt_x(r["speedup_b1_vs_keras"]),
            fmt_x(r["speedup_tput_vs_keras"]),
            other_text(r, "b1").replace(" ", " `", 1) + "`" if r["best_other_b1"] else "—",
            other_text(r, "tput").replace(" ", " `", 1).replace(" (", "` (", 1) if r["best_other_tput"] else "—",
            f"**failed**: {_md(r['reason'])}"
            if r["status"] == "failed"
            else "**" + agree_text(r) + "**"
            if r["agree"] is False
            else agree_text(r),
            fmt_dp(r["max_abs_dp"]),
            fmt_units(r),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", RATIO_LEGEND + ".", "", EXACTNESS_LEGEND + "."]
    lines += [f"{r['model']} `{r['contender']}`: {r['note']}." for r in results if r.get("note")]
    lines += [
        f"{m}: no float64 column ({a['float64_error']})." for m, a in header["models"].items() if a.get("float64_error")
    ]
    lines += [
        f"{m}: largest batch {a['largest_batch']} ({a['largest_batch_why']}); its best batches are "
        "among those up to that one."
        for m, a in header["models"].items()
        if a.get("largest_batch")
    ]
    skipped = skipped_line(results)
    if skipped:
        lines += ["", skipped[0].upper() + skipped[1:] + "."]
    lines += ["", *floor_table(header, results)]
    if infer_lines(header):
        lines += [
            "",
            "Where `Engine.infer` spends its time (medians of interleaved rounds):",
            "",
            *[f"- {line}" for line in infer_lines(header)],
        ]
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in header["versions"].items()) + "."]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def floor_table(header: dict, results: list[dict]) -> list[str]:
    """This engine against the fastest other engine (at batch 1 and in throughput at
    the largest batch) and against the model's FMA floor."""
    fma = header["fma"]
    lines = [
        f"This engine against the fastest other engine and the FMA floor ({fma['gmacs_per_thread']:.1f} G "
        f"multiply-adds/s per thread measured, {fma['threads']} threads):",
        "",
        "| model | M MACs/image | contender | b1 best | fastest other b1 | ratio | img/s best (batch) | "
        "best other (batch) | ratio | FMA floor img/s | of floor |",
        "|---|---:|---|---:|---|---:|---:|---|---:|---:|---:|",
    ]
    for model, about in header["models"].items():
        why = about.get("error") or about.get("lenet_error")
        if why:  # kept in the summary, with why it has no figures
            lines.append(f"| {model} | {about['macs'] / 1e6:.2f} |" if about.get("macs") else f"| {model} | — |")
            lines[-1] += f" no lenet row | {_md(why)} |" + " |" * 7
    for r in results:
        about = header["models"].get(r["model"], {})
        if r["status"] != "ok" or r["contender"] not in ("lenet-cpu", "lenet-cuda") or not about.get("macs"):
            continue
        by = {o["contender"]: o for o in results if o["model"] == r["model"] and o["status"] == "ok"}
        b1, tp = by.get(r["best_other_b1"]), by.get(r["best_other_tput"])
        floor = f"{r['fraction_of_fma_floor']:.0%}" if r.get("fraction_of_fma_floor") else "—"
        lines.append(
            "| "
            + " | ".join(
                [
                    r["model"],
                    f"{about['macs'] / 1e6:.2f}",
                    f"`{r['contender']}`",
                    fmt_time(r["b1_best_s"]),
                    f"`{b1['contender']}` {fmt_time(b1['b1_best_s'])}" if b1 else "—",
                    fmt_x(r["b1_best_s"] / b1["b1_best_s"]) if b1 else "—",
                    best_rate(r),
                    f"`{tp['contender']}` {best_rate(tp)}" if tp else "—",
                    fmt_x(r["speedup_tput_vs_best_other"]) if tp else "—",
                    fmt_rate(about["floor_images_per_s"]),
                    floor,
                ]
            )
            + " |"
        )
    lines += [
        "",
        "ratio at b1: this engine's latency over the fastest other's (lower is better); ratio in "
        "throughput: this engine's images/s over the best other's (higher is better); of floor: "
        "throughput over the FMA floor, which counts the model's nominal multiply-adds (the CPU's "
        "Winograd convolutions compute fewer: such a model can pass 100%)."
        + (
            " For `lenet-cuda` the others are the other engines on the GPU."
            if any(
                r["device"] == "cuda" and r["status"] == "ok" and not r["contender"].startswith("lenet-")
                for r in results
            )
            else ""
        ),
    ]
    return lines


def write_all(out: Path, header: dict, results: list[dict]) -> dict[str, Optional[str]]:
    """Writes every file; returns {file: None or why it was not written}."""
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", header, results)
    write_csv(out / "results.csv", results)
    (out / "README-table.md").write_text(markdown(header, results))
    return {
        "results.json": None,
        "results.csv": None,
        "README-table.md": None,
        "latency.png": figure(out / "latency.png", header, results, busy(header["machine"]), fmt_time),
    }


# --- the terminal -----------------------------------------------------------------------------------


def terminal():
    """A rich console and progress bar, or plain stand-ins without rich."""
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ImportError:
        return _Plain(), _Plain()
    console = Console() if sys.stdout.isatty() else Console(width=200)
    progress = Progress(
        TextColumn("{task.description:<48}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    return console, progress


class _Plain:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def print(self, text="", **_):
        print(text)

    def add_task(self, *a, **k):
        return 0

    def update(self, *a, description=None, **k):
        if description:
            print(description, file=sys.stderr)

    def advance(self, *a, **k):
        pass


def print_tables(console, header: dict, results: list[dict]) -> None:
    """One table per model of the columns people compare (the full one is README-table.md
    and results.csv), its failed rows kept with their reason; then the skipped contenders on
    one line."""
    from rich.markup import escape
    from rich.table import Table

    console.print()
    for line in header_lines(header):
        console.print(line, style="dim", highlight=False, markup=False)
    for model in dict.fromkeys(r["model"] for r in results):
        rows = [r for r in results if r["model"] == model and r["status"] != "skipped"]
        about = header["models"].get(model, {})
        title = model_line(model, about, header["images"])
        if about.get("lenet_error") and not about.get("error"):
            title += f"; lenet could not run it ({about['lenet_error']})"
        if not rows or about.get("error"):  # not loaded: the title says why, for every row
            console.print(escape(title), style="bold red" if about.get("error") else None, highlight=False)
            continue
        t = Table(title=escape(title), title_justify="left", header_style="bold")
        for col in ["contender", "b1 best", "img/s best", "×Keras", "×fastest other", "vs float64", "agrees"]:
            t.add_column(col, justify="left" if col in ("contender", "agrees", "×fastest other") else "right")
        for r in rows:
            if r["status"] == "failed":
                t.add_row(r["contender"], "—", "—", "—", "—", "—", f"[bold red]failed[/] — {escape(r['reason'])}")
                continue
            agree = agree_text(r)
            t.add_row(
                r["contender"],
                fmt_time(r["b1_best_s"]),
                best_rate(r),
                fmt_x(r["speedup_b1_vs_keras"]),
                other_text(r, "b1"),
                fmt_units(r),
                f"[bold red]{agree}[/]" if r["agree"] is False else agree,
            )
        console.print(t)
        for r in rows:
            if r.get("note"):
                console.print(f"{r['contender']}: {r['note']}", style="dim", highlight=False, markup=False)
        if about.get("float64_error"):
            console.print(f"no float64 column: {about['float64_error']}", style="yellow", highlight=False, markup=False)
    console.print(
        "b1 best: time per image at batch 1, the median of the row's best round (of "
        f"{header['rounds']}, interleaved); img/s best: images per second in the best round at the row's best "
        f"batch (of {', '.join(map(str, header['batch_sizes']))}); {RATIO_LEGEND}; "
        f"agrees: same argmax as the reference ({reference_label(header)}) on all "
        f"{header['images']} digits but ties (top two within 2e-5); {EXACTNESS_LEGEND}. Every column (p90, "
        "p99, each batch size, CPU use, load, first call, memory, max |Δp|): README-table.md, results.csv.",
        style="dim",
        highlight=False,
        markup=False,
    )
    console.print()
    for line in floor_table(header, results):
        console.print(line, highlight=False, markup=False)
    for line in infer_lines(header):
        console.print(line, highlight=False, markup=False)
    skipped = skipped_line(results)
    if skipped:
        console.print(skipped, style="yellow", highlight=False, markup=False)
    for r in results:
        if r.get("probe_error"):
            console.print(
                f"{r['model']} {r['contender']}: no load/first-call/memory figures — {r['probe_error']}",
                style="yellow",
                highlight=False,
                markup=False,
            )
