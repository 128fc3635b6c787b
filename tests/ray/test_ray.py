"""lenet on Ray Data (lenet.ray, issue 19): a local Ray with 2 CPUs classifies 2,000 MNIST
test digits written as PNG files, with corrupt files among them; every answer must be the
single-process lenet.infer answer for the same file, and every bad file an error row."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import cv2
import numpy as np
import pytest
from conftest import REPO

import lenet

ray = pytest.importorskip("ray", reason="Ray Data is not installed (pip install 'lenet[ray]')")
import lenet.ray  # noqa: E402

N = 2000


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def files(tmp_path_factory, mnist_test):
    images, _ = mnist_test
    d = tmp_path_factory.mktemp("ray-digits")
    paths = []
    for i in range(N):
        p = d / f"sub{i % 3}" / f"digit-{i:05d}.png"  # directories are read recursively
        p.parent.mkdir(exist_ok=True)
        cv2.imwrite(str(p), images[i])
        paths.append(str(p))
    bad = {
        d / "truncated.png": paths and open(paths[0], "rb").read()[:60],
        d / "not-an-image.jpg": b"plain text, not a JPEG",
        d / "empty.png": b"",
    }
    for p, data in bad.items():
        p.write_bytes(data)
    (d / "notes.txt").write_text("not an image: not read")  # skipped by extension
    return d, paths, [str(p) for p in bad]


@pytest.mark.parametrize("read_in_actors", [None, False], ids=["paths read by the actors", "bytes read by Ray"])
def test_every_row_is_the_single_process_answer(local_ray, files, read_in_actors):
    d, paths, bad = files
    rows = lenet.ray.classify(str(d), device="cpu", read_in_actors=read_in_actors).take_all()
    by_path = {r["path"]: r for r in rows}
    assert len(rows) == len(by_path) == N + len(bad)
    want = lenet.infer(paths, device="cpu")
    for p, w in zip(paths, want):
        r = by_path[p]
        assert r["error"] == "" and r["digit"] == w.digit, p
        np.testing.assert_allclose(r["probabilities"], w.probabilities, rtol=1e-5, atol=1e-7)
        assert r["confidence"] == pytest.approx(w.confidence, rel=1e-5)
    for p in bad:
        r = by_path[p]
        assert r["digit"] == -1 and np.isnan(r["confidence"]) and np.isnan(r["probabilities"]).all()
        with pytest.raises(lenet.InputError) as e:
            lenet.infer(p, device="cpu")
        assert r["error"] == str(e.value)  # the error lenet.infer raises, as a column value


def test_read_images_datasets_and_order(local_ray, files):
    d, paths, _ = files
    ds = ray.data.read_images(paths[:50], include_paths=True, mode="L")
    rows = ds.map_batches(
        lenet.ray.Classifier,
        fn_constructor_kwargs={"weights": "lenet5", "device": "cpu"},
        batch_size=16,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=1),
    ).take_all()
    want = {p: r for p, r in zip(paths[:50], lenet.infer(paths[:50], device="cpu"))}
    assert len(rows) == 50
    for r in rows:
        assert r["error"] == "" and r["digit"] == want[r["path"]].digit
    ordered = lenet.ray.classify(paths[:300], device="cpu", preserve_order=True, batch_size=64).take_all()
    assert [r["path"] for r in ordered] == paths[:300]


def test_the_example_writes_one_json_line_per_file(local_ray, files, tmp_path):
    d, paths, bad = files
    out = tmp_path / "predictions.jsonl"
    # The example joins the running cluster through RAY_ADDRESS, as on a real one.
    address = ray.get_runtime_context().gcs_address
    run = subprocess.run(
        [sys.executable, str(REPO / "examples" / "ray_classify.py"), str(d / "sub0"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "RAY_ADDRESS": address},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    sub0 = [p for p in paths if "/sub0/" in p]
    assert sorted(x["path"] for x in lines) == sorted(sub0)
    assert all(set(x) == {"path", "digit", "confidence", "error"} and x["error"] == "" for x in lines)


def test_the_cli_on_ray_answers_as_without(local_ray, files, tmp_path):
    d, paths, bad = files
    address = ray.get_runtime_context().gcs_address
    args = [sys.executable, "-m", "lenet", "--device", "cpu", "-q", str(d / "sub1"), bad[0]]
    plain = subprocess.run(args + ["-o", str(tmp_path / "plain.jsonl")], capture_output=True, text=True, timeout=600)
    on_ray = subprocess.run(
        args[:3] + ["--ray", address] + args[3:] + ["-o", str(tmp_path / "ray.jsonl")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert plain.returncode == on_ray.returncode == 1, on_ray.stderr[-3000:]  # the truncated file
    a = [json.loads(x) for x in (tmp_path / "plain.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "ray.jsonl").read_text().splitlines()]
    assert [x["path"] for x in a] == [x["path"] for x in b]  # input order kept
    assert [(x.get("digit"), x.get("error"), x.get("several_digits")) for x in a] == [
        (x.get("digit"), x.get("error"), x.get("several_digits")) for x in b
    ]
