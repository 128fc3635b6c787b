"""500 load -> infer -> release cycles through the whole Python API (HDF5 file read,
C++ network and executor built, images decoded and classified, everything dropped):
no growth of the process's resident memory nor of the live Python objects.

Run in a fresh process, after 100 warm-up cycles (allocator pools, OpenBLAS buffers,
OpenCV's caches). Bounds: 8 MB over the 500 cycles and 4 MB over the last 250, so a
leak of 16 KB per cycle fails (one model's weights, lenet5's 247 KB, would add 120 MB);
seen here (2026-11-28): 1.1-2.3 MB over the 500 (allocator warm-up), -1.2 to 0.1 MB over
the last 250; 1,000 cycles took 20 s of the test suite's time and found no more. The live
Python objects must not grow. LeakSanitizer checks the C++ core alone for leaks of any size
(tests/core/test_sanitizers.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

CODE = r"""
import gc, json, sys
import cv2, numpy as np
import lenet

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

path, digit = sys.argv[1], sys.argv[2]
png = cv2.imencode(".png", cv2.imread(digit, cv2.IMREAD_GRAYSCALE))[1].tobytes()
x = np.random.default_rng(0).random((16, 28, 28, 1), dtype=np.float32)
answers = set()

def cycle(i):
    model = lenet.load(path)
    engine = lenet.Engine(model, device="cpu", threads=1 + i % 2)
    r = engine.infer([png, digit])
    answers.add((r[0].digit, r[1].digit))
    engine.predict_proba(x[: 1 + i % 16])
    try:
        engine.infer(b"not an image")          # the error path too
    except lenet.InputError:
        pass

for i in range(100):
    cycle(i)
gc.collect()
marks = [(rss(), len(gc.get_objects()))]
for i in range(500):
    cycle(i)
    if i in (249, 499):
        gc.collect()
        marks.append((rss(), len(gc.get_objects())))
print(json.dumps({"rss": [m[0] for m in marks], "objects": [m[1] for m in marks], "answers": sorted(answers)}))
"""


def test_load_infer_release_500_cycles_do_not_grow():
    digit = REPO / "examples" / "digit-7.png"
    out = subprocess.run(
        [sys.executable, "-c", CODE, str(REPO / "weights" / "lenet5.h5"), str(digit)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"\nRSS after 100 / 350 / 600 cycles: {[round(v / 2**20, 1) for v in r['rss']]} MB; "
        f"live Python objects: {r['objects']}"
    )
    assert r["answers"] == [[7, 7]]
    rss0, rss1, rss2 = r["rss"]
    assert rss2 - rss0 < 8 * 2**20, r
    assert rss2 - rss1 < 4 * 2**20, r
    obj0, obj1, obj2 = r["objects"]
    assert obj2 - obj0 < 200 and obj2 - obj1 < 100, r
