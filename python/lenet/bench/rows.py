"""The rows of lenet-bench's results: one flat dict per (model, contender), made, failed, summarised
from its timed series and compared with the other rows (report.py prints them)."""

from __future__ import annotations


def new_row(model: str, name: str, sizes: list[int]) -> dict:
    from .contenders import CONTENDERS

    c = CONTENDERS[name]
    row = {
        "model": model,
        "contender": name,
        "what": c.what,
        "device": c.device,
        "status": "ok",
        "reason": None,
        "b1_p50_s": None,
        "b1_p90_s": None,
        "b1_p99_s": None,
        "b1_calls": None,
        "b1_best_s": None,
        "tput_best": None,
        "tput_best_batch": None,
    }
    row.update({f"tput_b{b}": None for b in sizes})
    row.update(
        dict.fromkeys(
            [
                "cpu_ratio",
                "load_s",
                "first_call_s",
                "import_s",
                "peak_rss_mib",
                "rss_import_mib",
                "probe_error",
                "prepare_s",
                "agree",
                "mismatches",
                "max_abs_dp",
                "timed_checked",
                "timed_error",
                "f64_max_abs",
                "f64_rms_units",
                "f64_max_units",
                "note",
                "speedup_b1_vs_keras",
                "keras_b1",
                "speedup_tput_vs_keras",
                "keras_tput",
                "speedup_b1_vs_best_other",
                "best_other_b1",
                "speedup_tput_vs_best_other",
                "best_other_tput",
                "best_other_tput_batch",
                "fraction_of_fma_floor",
            ]
        )
    )
    row.update(flags=[], series=[])
    return row


def one_line(text: str, limit: int = 200) -> str:
    """A reason for a row: the first line of ``text``, without terminal colour codes, cut
    before any array it prints (TensorFlow's errors carry the whole input) and at ``limit``."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", str(text))
    line = next((t.strip() for t in text.splitlines() if t.strip()), "")
    cut = line.find("[[")
    if cut >= 0:
        line = line[:cut].rstrip(" :=,") + " [...]"
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def fail(row: dict, status: str, reason: str) -> None:
    row.update(status=status, reason=one_line(reason))
    if status == "failed":
        row["flags"].append("FAILED")


def summarise(row: dict, series: dict, threads: int) -> None:
    row["series"] = [s.summary() for s in series.values()]
    b1 = row["series"][0]
    row.update(b1_p50_s=b1["p50_s"], b1_p90_s=b1["p90_s"], b1_p99_s=b1["p99_s"], b1_calls=b1["calls"])
    row["b1_best_s"] = b1["best_round_s"]
    for s in row["series"]:
        row[f"tput_b{s['batch']}"] = s["images_per_s"]
    # The engine at its best batch (issue 75: throughput compared at each engine's best, not at
    # the largest batch alone, where one engine splits the batch into cache-sized plans and
    # another takes it in one call).
    best = max(row["series"], key=lambda s: s["images_per_s_best_round"])
    row.update(tput_best=best["images_per_s_best_round"], tput_best_batch=best["batch"])
    row["cpu_ratio"] = max(s["cpu_ratio"] for s in row["series"])
    if row["cpu_ratio"] > threads * 1.1 + 0.1:
        row["flags"].append("cpu>threads")


# Keras' own inference paths, timed through Python (rows "×Keras" compares with the fastest of).
KERAS_PATHS = ("keras-predict", "keras-call", "keras-function")


def rung(row: dict) -> str:
    """Where a row's timed call is made from: "C++" (a harness of its own, no Python in the call)
    or "Python"."""
    from .contenders import CONTENDERS

    return "C++" if CONTENDERS[row["contender"]].process == "cpp" else "Python"


def speedups(rows: list[dict], floor_images_per_s: float) -> None:
    """Each row's speed-ups over Keras' fastest path and over the fastest other contender, both
    named, at batch 1 and in throughput at each row's own best batch (``tput_best``): for this
    engine's rows the other engines (its own variants do not count), for any other row every
    contender but itself; only rows timed from the same rung (issue 75: lenet's C++ harness is
    no peer of an engine timed through Python); on the GPU, the other GPU rows where there are
    some. Both on each row's best round (``b1_best_s``, ``tput_best``), as a hand-written loop's
    minimum over its blocks is."""
    # Keras' fastest inference path here (issue 75: model.predict builds a data pipeline a call,
    # 100 ms at batch 1 where a tf.function of the model takes 1): the fastest Keras row at batch 1
    # and in throughput, whichever of model.predict, model(x) and tf.function(model) it is.
    keras_rows = [o for o in rows if o["contender"] in KERAS_PATHS and o["b1_best_s"]]
    keras_b1 = min(keras_rows, key=lambda o: o["b1_best_s"], default=None)
    keras_tput = max(keras_rows, key=lambda o: o["tput_best"] or 0, default=None)
    for r in rows:
        mine = r["contender"].startswith("lenet-")
        others = [
            o for o in rows if o is not r and rung(o) == rung(r) and not (mine and o["contender"].startswith("lenet-"))
        ]
        if r["device"] == "cuda" and any(o["device"] == "cuda" for o in others):
            others = [o for o in others if o["device"] == "cuda"]
        if r["device"] == "cpu" and r["tput_best"]:
            r["fraction_of_fma_floor"] = r["tput_best"] / floor_images_per_s
        if keras_b1:
            r["speedup_b1_vs_keras"] = keras_b1["b1_best_s"] / r["b1_best_s"]
            r["keras_b1"] = keras_b1["contender"]
        if keras_tput and keras_tput["tput_best"] and r["tput_best"]:
            r["speedup_tput_vs_keras"] = r["tput_best"] / keras_tput["tput_best"]
            r["keras_tput"] = keras_tput["contender"]
        if others:
            best = min(others, key=lambda o: o["b1_best_s"])
            r["best_other_b1"] = best["contender"]
            r["speedup_b1_vs_best_other"] = best["b1_best_s"] / r["b1_best_s"]
            best = max(others, key=lambda o: o["tput_best"])
            r["best_other_tput"] = best["contender"]
            r["best_other_tput_batch"] = best["tput_best_batch"]
            r["speedup_tput_vs_best_other"] = r["tput_best"] / best["tput_best"]
