"""``device="auto"`` that sends each call where it is answered soonest (issue 67): the CPU
engine for a few images, the GPU past the batch where the GPU answers sooner.

Opt-in until a GPU run confirms the crossover (``LENET_AUTO_ROUTES=1``; docs/gpu.md):
without it, ``device="auto"`` runs everything on the GPU where one is usable, as before.

The router holds a CPU executor from the start and makes the GPU's on the first call that
needs it, so that ``lenet-cli one.png`` or ``lenet.infer(one image)`` never creates a CUDA
context or loads cuDNN. Where a call goes: the faster of the two devices' best measured
time for calls of its size (batch sizes in powers of two), once both have been timed at
that size; until then a latency model, ``t_cpu(n) = n * cpu_per_image`` (the CPU's own
calls measure it) against ``t_gpu(n) = gpu_call + n * gpu_per_image`` (defaults from the
H200 run of 2026-11-26 until the GPU's calls measure them): the GPU from the batch where
its fixed cost is paid back. ``device="cuda"`` and ``"cpu"`` still force."""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any, Callable, Optional

# The opt-in (see the module's docstring).
OPT_IN_VARIABLE = "LENET_AUTO_ROUTES"

# The GPU's time for a call of one image, host to host, and per image more: the H200
# run of 2026-11-26 (PERFORMANCE.md: batch 1 at 45 µs; about 10 M images/s uint8 at
# large batches). Replaced by what the GPU's own calls measure.
GPU_CALL_S = 45e-6
GPU_PER_IMAGE_S = 0.1e-6
# Before the CPU has been timed: lenet5's batch-1 time on one core (PERFORMANCE.md).
CPU_PER_IMAGE_S = 7e-6
# Batch sizes routed, in powers of two (the larger ones are routed as the largest).
MAX_BUCKET = 1 << 13


def gpu_unusable() -> str:
    """Why device="cuda" cannot run here, "" when it can (asked by a router on first need)."""
    from .device import cuda_available, cuda_unavailable_reason

    return "" if cuda_available() else cuda_unavailable_reason()


def executor_for(device: str, network: Any, options: tuple) -> tuple[str, Any]:
    """An Engine's device and executor (of ``network``, with the executor's ``options`` after
    the device) for ``device`` as asked: routed ("auto") where opted in and a GPU may be usable,
    else on the device ``resolve_device`` decides."""
    from . import _native
    from ._native import _core
    from .device import cuda_built, resolve_device

    def make(on: str) -> Any:
        return _core.Executor(network, on, *options)

    if device == "auto" and opted_in() and cuda_built() and _native.driver_present():
        return "auto", RoutedExecutor(make, gpu_unusable)
    device = resolve_device(device)
    return device, make(device)


def opted_in() -> bool:
    return os.environ.get(OPT_IN_VARIABLE, "") not in ("", "0")


def bucket(n: int) -> int:
    """The power of two that calls of ``n`` images are timed and routed as."""
    return min(MAX_BUCKET, 1 << max(0, math.ceil(math.log2(max(1, n)))))


class RoutedExecutor:
    """An executor (``_core.Executor``'s calls) over a CPU executor and a GPU executor made
    on first need. ``make(device)`` makes either; ``gpu_usable()`` says why the GPU cannot
    be used ("" when it can: asked once, on the first call routed to it); ``clock`` times
    the calls (tests give a fake one)."""

    def __init__(
        self,
        make: Callable[[str], Any],
        gpu_usable: Callable[[], str],
        clock: Callable[[], float] = time.perf_counter,
    ):
        self._make = make
        self._gpu_usable = gpu_usable
        self._clock = clock
        self.cpu = make("cpu")
        self.gpu: Optional[Any] = None
        self.gpu_unusable = ""  # why the GPU was not used, once it was asked
        self._lock = threading.Lock()
        self._best: dict = {"cpu": {}, "cuda": {}}  # device -> bucket -> best seconds a call
        self.threads = self.cpu.threads

    # --- what the engine calls ----------------------------------------------------------

    @property
    def description(self) -> str:
        gpu = self.gpu.description if self.gpu is not None else "not made yet" + self._unusable_note()
        return f"auto: {self.cpu.description} for few images; {gpu} past the crossover"

    def run(self, x, *args, **kw):
        return self._call("run", len(x), x, *args, **kw)

    def probabilities(self, x, *args, **kw):
        return self._call("probabilities", len(x), x, *args, **kw)

    def pixel_probabilities(self, x, *args, **kw):
        return self._call("pixel_probabilities", len(x), x, *args, **kw)

    def __getattr__(self, name):
        # One image's calls (pixel_answer, ...), buffers (host_array: plain memory, which
        # both devices read) and anything else: the CPU executor's.
        return getattr(self.__dict__["cpu"], name)

    def describe(self) -> list:
        plans = [dict(p, device="cpu") for p in self.cpu.describe()]
        if self.gpu is not None:
            plans += [dict(p, device="cuda") for p in self.gpu.describe()]
        return plans

    def annotate(self, d: dict) -> None:
        """Engine.describe()'s dictionary ``d`` with each plan's device and ``routing``."""
        for plan, raw in zip(d["plans"], self.describe()):
            plan["device"] = raw["device"]
        d["routing"] = {
            "crossover": self.crossover(),
            "routes": self.routes(),
            "gpu_unusable": self.gpu_unusable or None,
        }

    # --- routing ------------------------------------------------------------------------

    def device_for(self, n: int) -> tuple[str, str]:
        """Where a call of ``n`` images goes and why."""
        b = bucket(n)
        if self.gpu is None and self.gpu_unusable:
            return "cpu", f"the GPU cannot be used ({self.gpu_unusable})"
        cpu, gpu = self._best["cpu"].get(b), self._best["cuda"].get(b)
        if cpu is not None and gpu is not None:
            device = "cuda" if gpu < cpu else "cpu"
            return device, f"measured at batch {b}: CPU {_us(cpu)}, GPU {_us(gpu)} a call"
        t_cpu, t_gpu = self._model(b)
        device = "cuda" if t_gpu < t_cpu else "cpu"
        return device, f"modelled at batch {b}: CPU {_us(t_cpu)}, GPU {_us(t_gpu)} a call"

    def crossover(self) -> Optional[int]:
        """The smallest batch size (a power of two) routed to the GPU, or None."""
        b = 1
        while b <= MAX_BUCKET:
            if self.device_for(b)[0] == "cuda":
                return b
            b *= 2
        return None

    def routes(self) -> list:
        """Where each batch size from 1 to MAX_BUCKET (powers of two) goes, and why."""
        out, b = [], 1
        while b <= MAX_BUCKET:
            device, why = self.device_for(b)
            out.append({"batch": b, "device": device, "why": why})
            b *= 2
        return out

    def _model(self, b: int) -> tuple[float, float]:
        per_image = self._per_image("cpu") or CPU_PER_IMAGE_S
        call, per_gpu = GPU_CALL_S, GPU_PER_IMAGE_S
        g = self._best["cuda"]
        if g:  # the GPU's fixed cost from its smallest batch timed, per image from its largest
            small, large = min(g), max(g)
            call = g[small] - small * per_gpu
            if large > small:
                per_gpu = max(0.0, (g[large] - g[small]) / (large - small))
                call = max(0.0, g[small] - small * per_gpu)
        return b * per_image, call + b * per_gpu

    def _per_image(self, device: str) -> Optional[float]:
        times = self._best[device]
        return min(t / b for b, t in times.items()) if times else None

    def _call(self, method: str, n: int, *args, **kw):
        device, _ = self.device_for(n)
        executor = self._gpu_executor() if device == "cuda" else self.cpu
        if executor is None:
            executor, device = self.cpu, "cpu"
        start = self._clock()
        out = getattr(executor, method)(*args, **kw)
        took = self._clock() - start
        if n >= 1:
            b = bucket(n)
            # A call of n images in bucket b, as if of b: the model's and the records' unit.
            t = took * b / n
            with self._lock:
                best = self._best[device]
                best[b] = min(best.get(b, math.inf), t)
        return out

    def _gpu_executor(self) -> Optional[Any]:
        with self._lock:
            if self.gpu is None and not self.gpu_unusable:
                why = self._gpu_usable()
                if why:
                    self.gpu_unusable = why
                else:
                    try:
                        self.gpu = self._make("cuda")
                    except Exception as e:  # the GPU said no: the CPU answers, describe() says why
                        self.gpu_unusable = f"{type(e).__name__}: {e}"
            return self.gpu

    def _unusable_note(self) -> str:
        return f" (the GPU cannot be used: {self.gpu_unusable})" if self.gpu_unusable else ""


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} µs"
