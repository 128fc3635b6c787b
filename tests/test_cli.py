"""lenet-cli end to end, through a subprocess."""

import json
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest

from conftest import REPO

EXAMPLES = sorted((REPO / "examples").glob("digit-*.png"))


def cli(*args):
    return subprocess.run([sys.executable, "-m", "lenet.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_examples_are_there():
    assert len(EXAMPLES) == 10


def test_classifies_the_examples_in_one_call():
    out = cli("--device", "cpu", *EXAMPLES)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 10
    for path, line in zip(EXAMPLES, lines):
        m = re.fullmatch(r"(.+): (\d) \((\d+\.\d)%\)", line)
        assert m, line
        assert m.group(1) == str(path)
        assert int(m.group(2)) == int(path.stem[-1])


def test_json_and_top_k():
    out = cli("--json", "--top-k", "3", "--device", "cpu", EXAMPLES[7])
    assert out.returncode == 0, out.stderr
    rec = json.loads(out.stdout)
    assert rec["digit"] == 7 and len(rec["top"]) == 3 and len(rec["probabilities"]) == 10
    assert rec["top"][0]["digit"] == 7
    assert abs(sum(rec["probabilities"]) - 1) < 1e-4


def test_bad_files_are_reported_and_the_rest_classified(tmp_path):
    missing = tmp_path / "missing.png"
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    out = cli("--device", "cpu", EXAMPLES[3], missing, text, EXAMPLES[5])
    assert out.returncode == 1
    assert [l.split(":")[0] for l in out.stdout.strip().splitlines()] == [str(EXAMPLES[3]), str(EXAMPLES[5])]
    errors = out.stderr.strip().splitlines()
    assert len(errors) == 2
    assert "missing.png" in errors[0] and "no such file" in errors[0]
    assert "notes.png" in errors[1]


def test_weights_option_and_bad_weights(tmp_path):
    out = cli("--weights", "lenet-tf", "--device", "cpu", EXAMPLES[0])
    assert out.returncode == 0 and out.stdout.startswith(str(EXAMPLES[0]))
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"garbage")
    out = cli("--weights", bad, EXAMPLES[0])
    assert out.returncode == 2 and "bad.h5" in out.stderr


def test_usage_errors():
    assert cli().returncode == 2
    assert cli("--device", "tpu", "x.png").returncode == 2
    out = cli("--help")
    assert out.returncode == 0 and "--weights" in out.stdout and "--top-k" in out.stdout


def test_version_reports_backends():
    out = cli("--version")
    assert out.returncode == 0
    assert "version:" in out.stdout and "backends_built" in out.stdout


def test_non_mnist_sized_png(tmp_path):
    img = cv2.imread(str(EXAMPLES[2]), cv2.IMREAD_GRAYSCALE)
    path = tmp_path / "big.png"
    cv2.imwrite(str(path), cv2.resize(img, (84, 84), interpolation=cv2.INTER_CUBIC))
    out = cli("--device", "cpu", path)
    assert out.returncode == 0 and out.stdout.strip().endswith(")")
    assert ": 2 (" in out.stdout
