"""The code reads as the last person left it: csrc/ as clang-format writes it
(.clang-format), the Python as ruff formats and lints it (pyproject.toml's [tool.ruff]).
Both tools come from the test extra, pinned, so that every machine formats alike. To
fix a failure: `clang-format -i <files>` / `ruff format . && ruff check --fix .`."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CPP = sorted(
    p
    for d in ("csrc", "tests")
    for p in (REPO / d).rglob("*")
    if p.suffix in {".cpp", ".h", ".cu", ".cuh"} and "data" not in p.relative_to(REPO).parts
)


def _tool(name: str) -> str:
    found = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(found).exists():
        pytest.fail(f'{name} is not installed: it comes with the test extra (pip install ".[test]")')
    return found


def test_csrc_is_clang_formatted():
    assert CPP, "no C++ sources found"
    out = subprocess.run(
        [_tool("clang-format"), "--dry-run", "--Werror", *map(str, CPP)], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr[-4000:]


def test_python_is_ruff_formatted_and_clean():
    ruff = _tool("ruff")
    fmt = subprocess.run([ruff, "format", "--check", "--diff", "."], capture_output=True, text=True, cwd=REPO)
    assert fmt.returncode == 0, fmt.stdout[-4000:] + fmt.stderr[-2000:]
    lint = subprocess.run([ruff, "check", "--output-format", "concise", "."], capture_output=True, text=True, cwd=REPO)
    assert lint.returncode == 0, lint.stdout[-4000:] + lint.stderr[-2000:]
