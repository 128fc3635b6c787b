"""lenet-bench files: image files to answers, end to end, against what a user would write
otherwise; each contender in a fresh process (its images/s and its peak RSS).

    lenet-bench files [--images N] [--photos N] [--rounds R] [--threads T] [--mnist DIR]
                      [--contenders a,b] [--out DIR]

Workloads: N MNIST test digits written as 28x28 PNG files (default 10,000), and N photos:
JPEGs of a digit on paper at 12 megapixels (default 200; 0 for none). Contenders:

  lenet-cli        lenet-cli --files-from LIST -q --output out.jsonl (the whole command)
  infer_iter       lenet.Engine(...).infer_iter(paths), every Result consumed
  plain-loop       what a user writes: cv2.imread in batches of 1,000 + Engine.predict_proba
                   (28x28 PNGs only: a photo needs the photo path)
  tfdata-keras     tf.data: read_file + decode_png + resize, batched 1,000, into Keras predict_on_batch
  tfdata-tflite    the same pipeline into the TFLite interpreter (the model converted once)

The physical limit of the PNG job is measured in the same run: one core's time per image
to read + decode a file (the faster of the core's read_files + cv2.imdecode and, in a build
with libpng, the core's own read-and-decode lane) plus the engine's per-image core time
(predict_proba at batch 1,000 on one thread), spread over the threads:
threads / (t_read_decode + t_engine) images/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONTENDERS = ("lenet-cli", "infer_iter", "plain-loop", "tfdata-keras", "tfdata-tflite")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lenet-bench files",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--images", type=int, default=10_000, help="MNIST test digits as 28x28 PNGs (default 10,000)")
    p.add_argument("--photos", type=int, default=200, help="12-megapixel JPEG photos (default 200; 0: none)")
    p.add_argument("--rounds", type=int, default=3, help="runs of each contender, interleaved (default 3)")
    p.add_argument("--threads", type=int, help="threads for every contender (default: the CPUs available)")
    p.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated (default: all)")
    p.add_argument("--mnist", type=Path, metavar="DIR", help="directory with the MNIST test set")
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="where files.json goes")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from lenet import default_threads

    from . import workload

    threads = args.threads or default_threads()
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = set(names) - set(CONTENDERS)
    if unknown:
        _parser().error(f"unknown contender(s) {', '.join(sorted(unknown))}")
    images, _, source = workload.load_digits(args.mnist, args.images)
    out: dict = {"threads": threads, "source": source, "workloads": {}}
    with tempfile.TemporaryDirectory(prefix="lenet-bench-files-") as tmp:
        tmp = Path(tmp)
        sets = {"png28": _list(tmp, "png28", workload.write_pngs(images, _mkdir(tmp / "png28")))}
        if args.photos:
            sets["photo12mp"] = _list(tmp, "photo12mp", _write_photos(images, args.photos, _mkdir(tmp / "photo")))
        limit = _limit(sets["png28"], threads)
        out["png28_limit"] = limit
        native = (
            f" (the core's PNG decoder: {limit['read_decode_native_us']:.1f} us)"
            if "read_decode_native_us" in limit
            else ""
        )
        print(
            f"PNG limit: read+decode with OpenCV {limit['read_decode_us']:.1f} us{native} + engine "
            f"{limit['engine_us']:.1f} us per image on one core -> {limit['images_per_s']:,.0f} images/s on "
            f"{threads} threads ({limit['opencv_images_per_s']:,.0f} with OpenCV's decode)",
            flush=True,
        )
        for name, listing in sets.items():
            runs: dict = {n: [] for n in names}
            for r in range(args.rounds):
                for n in names:
                    if n == "plain-loop" and name != "png28":
                        continue
                    got = _run(n, listing, threads, tmp)
                    runs[n].append(got)
                    print(
                        f"{name} round {r + 1}: {n}: "
                        + (
                            f"{got['images_per_s']:,.0f} images/s, peak RSS {got['peak_rss_mib']:.0f} MiB"
                            if "error" not in got
                            else got["error"]
                        ),
                        flush=True,
                    )
            out["workloads"][name] = {
                "count": sum(1 for _ in open(listing)),
                "runs": runs,
                "best": {n: _best(v) for n, v in runs.items() if v},
            }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "files.json").write_text(json.dumps(out, indent=1) + "\n")
    print(_table(out))
    return 0


def _mkdir(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    return d


def _list(tmp: Path, name: str, paths: list) -> Path:
    listing = tmp / f"{name}.txt"
    listing.write_text("".join(f"{p}\n" for p in paths))
    return listing


def _write_photos(images: np.ndarray, n: int, d: Path) -> list:
    """Photos of MNIST digits written on paper: 4000x3000 JPEGs, the digit ~1000 px tall."""
    import cv2

    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        page = np.full((3000, 4000, 3), 200, np.uint8) + rng.integers(0, 30, (1, 1, 3), dtype=np.uint8)
        ink = cv2.resize(images[i % len(images)], (1000, 1000), interpolation=cv2.INTER_CUBIC)
        y, x = 800 + int(rng.integers(0, 600)), 1200 + int(rng.integers(0, 1200))
        page[y : y + 1000, x : x + 1000][ink > 90] = (40, 40, 60)
        path = d / f"photo-{i:04d}.jpg"
        cv2.imwrite(str(path), cv2.GaussianBlur(page, (5, 5), 0), [cv2.IMWRITE_JPEG_QUALITY, 88])
        paths.append(str(path))
    return paths


def _limit(listing: Path, threads: int) -> dict:
    """Per-image core time of read + decode and of the engine, each on one thread. Read +
    decode is timed twice: with OpenCV (what a plain loop does) and, when this build has
    its own PNG decoder, with the core's one-call read and decode; the limit takes the
    faster (the job's physical limit on this machine is set by the best decoder at hand)."""
    import cv2

    import lenet
    from lenet._native import _core

    paths = [os.fsencode(p) for p in listing.read_text().splitlines()]
    best_read = best_native = best_engine = float("inf")
    engine = lenet.Engine("lenet5", device="cpu", threads=1)
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(0, len(paths), 1000):
            for data in _core.read_files(paths[i : i + 1000], 1 << 30):
                cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        best_read = min(best_read, (time.perf_counter() - t0) / len(paths))
        if _core.png_decoder:
            t0 = time.perf_counter()
            for i in range(0, len(paths), 1000):
                _core.read_gray_images(paths[i : i + 1000], 1 << 30, 28, 28)
            best_native = min(best_native, (time.perf_counter() - t0) / len(paths))
        x = np.zeros((1000, 28, 28, 1), np.float32)
        t0 = time.perf_counter()
        for _ in range(max(1, len(paths) // 1000)):
            engine.predict_proba(x)
        best_engine = min(best_engine, (time.perf_counter() - t0) / (max(1, len(paths) // 1000) * 1000))
    fastest = min(best_read, best_native)
    out = {
        "read_decode_us": best_read * 1e6,
        "engine_us": best_engine * 1e6,
        "images_per_s": threads / (fastest + best_engine),
        "opencv_images_per_s": threads / (best_read + best_engine),
    }
    if _core.png_decoder:
        out["read_decode_native_us"] = best_native * 1e6
    return out


# The tf.data pipeline both TensorFlow contenders read with: decode, resize, batches of 1,000.
_TFDATA = """
import tensorflow as tf, keras, lenet, numpy as np
paths = open(LISTING).read().splitlines()
model = keras.models.load_model(str(lenet.shipped_weights("lenet5")), compile=False)
def load(p):
    img = tf.io.decode_image(tf.io.read_file(p), channels=1, expand_animations=False)
    return tf.image.resize(tf.cast(img, tf.float32), (28, 28), antialias=True) / 255.0
ds = tf.data.Dataset.from_tensor_slices(paths).map(load, num_parallel_calls=THREADS).batch(1000).prefetch(2)
"""

# Each contender's code, run in a fresh Python process: argv = listing, threads, tmp.
_CODE = {
    "infer_iter": """
import lenet
paths = open(LISTING).read().splitlines()
eng = lenet.Engine("lenet5", device="cpu", threads=THREADS)
start()
n = sum(1 for r in eng.infer_iter(paths) if isinstance(r, lenet.Result))
""",
    "plain-loop": """
import cv2, numpy as np, lenet
paths = open(LISTING).read().splitlines()
eng = lenet.Engine("lenet5", device="cpu", threads=THREADS)
start()
n = 0
for i in range(0, len(paths), 1000):
    x = np.stack([cv2.imread(p, cv2.IMREAD_GRAYSCALE) for p in paths[i:i + 1000]]).astype(np.float32)
    p = eng.predict_proba(x.reshape(-1, 28, 28, 1) / np.float32(255))
    n += len(p)
""",
    "tfdata-keras": _TFDATA
    + """start()
n = 0
for x in ds:
    n += len(model.predict_on_batch(x))
""",
    "tfdata-tflite": _TFDATA
    + """tflite = tf.lite.TFLiteConverter.from_keras_model(model).convert()
interp = tf.lite.Interpreter(model_content=tflite, num_threads=THREADS)
inp, out = interp.get_input_details()[0]["index"], interp.get_output_details()[0]["index"]
start()
n = 0
for x in ds:
    x = x.numpy()
    interp.resize_tensor_input(inp, x.shape)
    interp.allocate_tensors()
    interp.set_tensor(inp, x)
    interp.invoke()
    n += len(interp.get_tensor(out))
""",
}

_WRAP = """
import json, os, resource, sys, time
LISTING, THREADS = sys.argv[1], int(sys.argv[2])
_t = [None]
def start():
    _t[0] = time.perf_counter()
{code}
seconds = time.perf_counter() - _t[0]
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, from the process that spawned us.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({{"images": n, "seconds": seconds, "peak_rss_mib": hwm / 1024}}))
"""


def _run(name: str, listing: Path, threads: int, tmp: Path) -> dict:
    from .contenders import thread_env

    env = {**os.environ, **thread_env(threads)}
    count = sum(1 for _ in open(listing))
    if name == "lenet-cli":
        # The whole command (start-up, model load, the output file), timed and measured by a
        # fresh, small process whose only child it is (RUSAGE_CHILDREN: that child's peak RSS,
        # which starts from the small parent's, ru_maxrss being kept across exec).
        out = tmp / "out.jsonl"
        argv = [
            sys.executable,
            "-m",
            "lenet",
            "--device",
            "cpu",
            "--threads",
            str(threads),
            "--files-from",
            str(listing),
            "-q",
            "--output",
            str(out),
        ]
        code = (
            "import json, resource, subprocess, sys, time\n"
            "t0 = time.perf_counter(); rc = subprocess.run(sys.argv[1:]).returncode\n"
            "print(json.dumps({'rc': rc, 'seconds': time.perf_counter() - t0,"
            " 'peak_rss_mib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=3600
        )
        got = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"rc": -1}
        if got["rc"] not in (0, 1):
            return {"error": f"exit {got['rc']}: {proc.stderr[-500:]}"}
        got["images"] = sum(1 for _ in open(out))
        got["images_per_s"] = count / got["seconds"]
        return got
    code = _WRAP.format(code=_CODE[name])
    proc = subprocess.run(
        [sys.executable, "-c", code, str(listing), str(threads)], capture_output=True, text=True, env=env, timeout=3600
    )
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1] if proc.stderr else ''}"}
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["images_per_s"] = count / got["seconds"]
    return got


def _best(runs: list) -> dict:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    return {
        "images_per_s": max(r["images_per_s"] for r in ok),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in ok),
        "runs": len(ok),
    }


def _table(out: dict) -> str:
    lines = []
    limit = out["png28_limit"]["images_per_s"]
    for name, w in out["workloads"].items():
        lines += [
            f"\n{name} ({w['count']:,} files, {out['threads']} threads, best of {len(next(iter(w['runs'].values())))})",
            "| contender | images/s | peak RSS | of the limit |",
            "|---|---:|---:|---:|",
        ]
        for n, b in w["best"].items():
            if "error" in b:
                lines.append(f"| {n} | {b['error'][:60]} | | |")
                continue
            frac = f"{b['images_per_s'] / limit:.0%}" if name == "png28" else "—"
            lines.append(f"| {n} | {b['images_per_s']:,.0f} | {b['peak_rss_mib']:.0f} MiB | {frac} |")
    return "\n".join(lines)
