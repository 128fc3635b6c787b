"""What an Engine decided for its device, as data (``Engine.describe``): the plans per
batch capacity and the kernels of each, from the core's Executor."""

from __future__ import annotations

from typing import Any

import numpy as np


def describe_plans(executor: Any, model: Any, device: str, options: dict) -> dict:
    """``Engine.describe()``'s dictionary (see there)."""
    plans = executor.describe()
    if not plans:
        executor.run(np.zeros((1,) + tuple(model.input_shape[1:]), np.float32))
        plans = executor.describe()
    rows = model.network.steps()
    annotate = getattr(type(executor), "annotate", None)  # a router (lenet.routing) adds its routes
    out = {
        "device": device,
        "description": executor.description,
        "tf32": options["tf32"],
        "graphs": options["graphs"],
        "precision": options.get("precision", "exact"),
        "plans": [],
        "steps": [],
    }
    for plan in plans:
        stream = plan["stream"]
        out["plans"].append(
            {
                "capacity": plan["capacity"],
                "execution": stream.get("execution"),
                "why": stream.get("why", ""),
                "transfer": stream.get("transfer"),
                "transfer_why": stream.get("transfer_why", ""),
                "kernels": "network" if plan["whole_network"] else "steps",
                "kernels_why": plan["why"],
            }
        )
        for kernel in plan["kernels"]:
            first, last = kernel.pop("steps")
            out["steps"].append(
                {
                    "op": "+".join(rows[i][0] for i in range(first, last + 1)),
                    "layers": ", ".join(rows[i][1] for i in range(first, last + 1)),
                    "capacity": plan["capacity"],
                    "algorithm": kernel.pop("algorithm", None),
                    "fused": kernel.pop("fused", None),
                    "fusion": kernel.pop("fusion", ""),
                    "workspace_bytes": kernel.pop("workspace_bytes", None),
                    **kernel,
                }
            )
    if annotate:
        annotate(executor, out)
    return out


# What precision="fast" costs where it applies (the CPU's Winograd convolutions in float32;
# issue 74, PERFORMANCE.md): the model's answers against a float64 evaluation.
FAST_COST = (
    "float32 transforms and sums: lenet-tf's probabilities 8x as far from float64 as with "
    "precision='exact' (tools/precision/float64.py measures a model)"
)


def describe_lines(d: dict) -> list:
    """``describe()``'s dictionary as the lines ``Engine.summary`` prints."""
    lines = []
    routing = d.get("routing")
    if routing:  # device="auto" routing: where each batch size goes, and why
        cross = routing["crossover"]
        lines.append(
            "routing: every batch on the CPU"
            if cross is None
            else f"routing: batches under {cross} on the CPU, from {cross} on the GPU"
        )
        if routing.get("gpu_unusable"):
            lines.append(f"  the GPU cannot be used: {routing['gpu_unusable']}")
        for r in routing["routes"]:
            lines.append(f"  batch {r['batch']:>5}: {'GPU' if r['device'] == 'cuda' else 'CPU'} ({r['why']})")
    for plan in d["plans"]:
        if plan.get("device"):
            lines.append(f"{'GPU' if plan['device'] == 'cuda' else 'CPU'} plan:")
        if plan["execution"]:
            lines.append(f"batch capacity {plan['capacity']}: {plan['execution']} ({plan['why']})")
        if plan["kernels"] == "network" or plan["kernels_why"]:  # on CUDA: the fused kernel, or why not
            lines.append(f"  kernels: {plan['kernels']} ({plan['kernels_why'] or 'one for the whole network'})")
        if plan.get("transfer"):  # on CUDA
            lines.append(f"  transfer: {plan['transfer']} ({plan['transfer_why']})")
    for s in d["steps"]:
        keys = ("algorithm", "tile", "precision", "math", "fused", "workspace_bytes", "program")
        facts = [f"{k}={s[k]}" for k in keys if s.get(k) is not None]
        if s.get("precision") == "fast":
            facts.append(FAST_COST)
        if facts:
            lines.append(
                f"  {s['op']:<12} {s['layers']:<24} "
                + ", ".join(facts)
                + (f" ({s['fusion']})" if s.get("fusion") else "")
            )
    return lines
