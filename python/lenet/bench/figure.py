"""lenet-bench's figure, latency.png: per model, batch-1 latency and throughput against the
batch size, one colour family per framework."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional


def _colors(plt, names: list[str]) -> dict:
    """One colour family per framework, this engine in red."""
    families = {
        "lenet": "Reds",
        "keras": "Blues",
        "tf": "Oranges",
        "onnxruntime": "Greens",
        "torch": "Purples",
        "jax": "Greys",
    }
    out = {}
    for prefix, cmap in families.items():
        members = [n for n in names if n.split("-")[0] == prefix]
        for i, n in enumerate(members):
            out[n] = plt.get_cmap(cmap)(0.85 - 0.45 * i / max(len(members), 2))
    return {n: out.get(n, "grey") for n in names}


def figure(path: Path, header: dict, results: list[dict], busy: bool, time_text: Callable) -> Optional[str]:
    """latency.png: per model, batch-1 latency (log) and throughput vs batch size. ``busy``:
    the machine was busy with other work (the title says so); ``time_text``: seconds as the
    tables print them. Returns why no figure was made, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed"
    ok = [r for r in results if r["status"] == "ok"]
    models = list(dict.fromkeys(r["model"] for r in ok))
    if not models:
        return "no results"
    names = list(dict.fromkeys(r["contender"] for r in ok))
    colors = _colors(plt, names)
    fig, axes = plt.subplots(len(models), 2, figsize=(14, 3.2 + 0.35 * len(names) * len(models)), squeeze=False)
    for (ax_l, ax_t), model in zip(axes, models):
        rows = sorted((r for r in ok if r["model"] == model and r["b1_p50_s"]), key=lambda r: -r["b1_p50_s"])
        p50 = [r["b1_p50_s"] * 1e6 for r in rows]
        ax_l.barh(
            [r["contender"] for r in rows],
            p50,
            color=[colors[r["contender"]] for r in rows],
            xerr=[[0] * len(rows), [r["b1_p99_s"] * 1e6 - v for r, v in zip(rows, p50)]],
            capsize=3,
        )
        for i, r in enumerate(rows):
            bad = r["agree"] is False
            ax_l.text(
                r["b1_p99_s"] * 1e6 * 1.15,
                i,
                time_text(r["b1_p50_s"]) + ("  DISAGREES" if bad else ""),
                va="center",
                fontsize=8,
                color="red" if bad else "black",
            )
        ax_l.set_xscale("log")
        ax_l.set_xlim(min(p50) / 2, max(r["b1_p99_s"] for r in rows) * 1e6 * 8)
        ax_l.set_xlabel("batch-1 latency per image, µs (bar p50, whisker p99; log)")
        ax_l.set_title(f"{model}: time to classify one image")
        for r in ok:
            if r["model"] == model:
                pts = [(s["batch"], s["images_per_s"]) for s in r["series"]]
                ax_t.plot(
                    *zip(*pts),
                    marker="o",
                    label=r["contender"],
                    color=colors[r["contender"]],
                    linewidth=2.5 if r["contender"].startswith("lenet") else 1.2,
                )
        ax_t.set_xscale("log", base=2)
        ax_t.set_yscale("log")
        ax_t.set_xticks(header["batch_sizes"], [str(b) for b in header["batch_sizes"]])
        ax_t.set_xlabel("batch size")
        ax_t.set_ylabel("images / s (log)")
        ax_t.set_title(f"{model}: throughput")
        ax_t.grid(True, which="both", alpha=0.3)
        ax_t.legend(fontsize=7, loc="best")
    m = header["machine"]
    fig.suptitle(
        f"lenet-bench — {m['cpu']}"
        + (f" ({m['isa']}; lenet's kernels {m['lenet_kernels']})" if m.get("isa") else "")
        + f", {m['cores']} cores, {m['threads']} threads, "
        f"{m['gpu'] or 'no GPU'} — {m['date'][:10]}"
        + (" — the machine was busy with other work: noisy figures" if busy else ""),
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / fig.get_figheight()))  # room for the title above the first row
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
