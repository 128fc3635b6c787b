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
    out = {
        "device": device,
        "description": executor.description,
        "tf32": options["tf32"],
        "graphs": options["graphs"],
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
    return out
