"""The README and docs/ as a newcomer reads them (issue 32).

* The README is a front page: short, its two set-up commands the ones .ci/run runs,
  and a link to every page of docs/.
* Every relative link of the README, docs/, PERFORMANCE.md and SECURITY.md reaches a
  file, and its #anchor a heading there.
* Every example written as a session runs as it stands, from the checkout's root (a
  copy of its examples/), and prints what the page shows: ```console blocks ("$ "
  commands, each followed by its standard output, run by bash; what goes to standard
  error, such as lenet-cli's note that a CUDA build found no GPU, varies by machine and
  is not compared) and ```pycon blocks (Python doctests, a page's blocks sharing one
  namespace). "..." in an output stands for anything (doctest's ELLIPSIS); runs of
  whitespace compare equal.
"""

from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS, REPO / "PERFORMANCE.md", REPO / "SECURITY.md"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"!?\[[^\]]*\]\(([^()\s]+)\)")
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _code_blocks(page: Path):
    """(info string, line number of its first line, text) of each code block of page, as a
    Markdown parser reads them (markdown-it-py, CommonMark): a fence's own lines, its
    closing one included, are never part of its text."""
    from markdown_it import MarkdownIt

    for token in MarkdownIt("commonmark").parse(page.read_text()):
        if token.type in ("fence", "code_block"):
            first = token.map[0] + (2 if token.type == "fence" else 1)
            yield token.info.strip().split(" ")[0] if token.type == "fence" else "", first, token.content


def _blocks(page: Path, lang: str):
    """(line number, text) of each code block of `lang` in page; for "pycon", every block
    that holds a Python session (a line starting with ">>> "), whatever its info string says
    (```python, ```pycon, none): a session shown is a session run."""
    for info, line, text in _code_blocks(page):
        if info == lang or lang == "pycon" and re.search(r"^[ \t]*>>> ", text, re.M):
            yield line, text


def _prose(text: str) -> str:
    """text without its fenced blocks and inline code (their brackets are not links)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of page's headings: lower case, punctuation dropped, spaces to '-'."""
    out = set()
    for m in re.finditer(r"^#{1,6} (.+)$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


# ------------------------------------------------------------------ the front page


def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 160, f"README.md has {len(lines)} lines: what a newcomer needs not first goes to docs/"
    linked = {(README.parent / t.split("#")[0]).resolve() for t in LINK.findall(_prose(README.read_text()))}
    unlinked = [_rel(p) for p in DOCS if p.resolve() not in linked]
    assert unlinked == [], f"docs pages the README does not link to: {unlinked}"


def test_the_readme_set_up_is_what_ci_runs():
    """Two commands: install and classify a shipped digit; install the test extras and test.
    .ci/run runs exactly the second, then the keras_reference tests again with TensorFlow's
    oneDNN on (issue 51)."""
    setup = README.read_text().split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = [block.strip() for lang, block in FENCE.findall(setup) if lang == "sh"]
    assert commands == [
        "pip install . && lenet-cli examples/digit-7.png",
        'pip install ".[test]" && python -m pytest',
    ], commands
    ci = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip() and line[0] != "#"]
    runs = [line for line in ci if "pytest" in line and not line.startswith("echo")]
    assert runs == [commands[1], "TF_ENABLE_ONEDNN_OPTS=1 python -m pytest -m keras_reference -p no:cacheprovider"], (
        runs
    )
    assert ci.index("export TF_ENABLE_ONEDNN_OPTS=0") < ci.index(commands[1]), "the first pass is oneDNN off"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_links_resolve(page):
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
    assert broken == [], f"{_rel(page)}: {broken}"


# ------------------------------------------------------------------ the examples, run


def _console_cases():
    for page in [README, *DOCS]:
        for line, block in _blocks(page, "console"):
            commands = []
            for text in block.splitlines():
                if text.startswith("$ "):
                    commands.append([text[2:], []])
                else:
                    assert commands, f"{_rel(page)}:{line}: output before any command"
                    commands[-1][1].append(text)
            for k, (command, out) in enumerate(commands):
                yield pytest.param(command, "\n".join(out), id=f"{_rel(page)}:{line}:{k + 1}")


@pytest.fixture(scope="module")
def checkout_root(tmp_path_factory):
    """A directory standing for the checkout's root: a copy of examples/, so that what the
    examples write (results.csv, seen/) lands there and not in the checkout."""
    root = tmp_path_factory.mktemp("root")
    shutil.copytree(REPO / "examples", root / "examples")
    return root


def _env():
    # The interpreter running the tests and its scripts (lenet-cli) come first on the PATH.
    return dict(
        os.environ,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        PYTHONWARNINGS="ignore",
        TF_CPP_MIN_LOG_LEVEL="3",
    )


# The files docs/cpp.md's session writes, relative to the checkout root (checked last).
WRITTEN_BY_CPP_PAGE: set[str] = set()


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


@pytest.mark.parametrize("command,expected", list(_console_cases()))
def test_console_examples(command, expected, checkout_root, request):
    cpp_page = request.node.callspec.id.startswith("docs/cpp.md:")
    before = _files(checkout_root) if cpp_page else set()
    run = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=checkout_root,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if cpp_page:
        WRITTEN_BY_CPP_PAGE.update(_files(checkout_root) - before)
    assert doctest.OutputChecker().check_output(expected + "\n", run.stdout, OPTIONS), (
        f"$ {command}\nexpected:\n{expected}\ngot (exit {run.returncode}):\n{run.stdout}\nstderr:\n{run.stderr}"
    )


@pytest.mark.parametrize("page", [README, *DOCS], ids=_rel)
def test_every_python_session_shown_is_run(page):
    """Each ">>> " line of a page is an example test_python_examples runs (before, a session in
    a ```python block, docs/python.md's ONNX example, was not run, and showed a wrong answer)."""
    shown = len(re.findall(r"^[ \t]*>>> ", page.read_text(), re.M))
    parser = doctest.DocTestParser()
    run = sum(len(parser.get_examples(text)) for _, text in _blocks(page, "pycon"))
    assert run == shown, f"{_rel(page)}: {shown} '>>> ' lines, {run} of them run as examples"


def test_a_closing_fence_is_not_expected_output(tmp_path):
    """The blocks are read as Markdown: an example's expected output ends where its fence does."""
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```pycon\n>>> print(1)\n1\n```\n\n    >>> 2 + 2\n    4\n\n```python\n>>> 3\n3\n```\n")
    blocks = list(_blocks(page, "pycon"))
    assert [line for line, _ in blocks] == [4, 8, 12], blocks
    examples = [e for _, text in blocks for e in doctest.DocTestParser().get_examples(text)]
    assert [(e.source, e.want) for e in examples] == [("print(1)\n", "1\n"), ("2 + 2\n", "4\n"), ("3\n", "3\n")]


def test_the_cpp_walkthrough_leaves_nothing_untracked(checkout_root):
    """What docs/cpp.md's session writes (its commands ran above, in this module's checkout
    root, their files recorded) lies where the checkout's .gitignore keeps it out of `git
    status`: issue 65 found build-example/, installed/ and lenet5.lenet left there. (The
    other pages' sessions write only the outputs their commands name, a user's files.)"""
    git = shutil.which("git")
    if git is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout")
    if not WRITTEN_BY_CPP_PAGE:
        pytest.skip("docs/cpp.md's session did not run in this process (-k, or another worker)")
    written = sorted(WRITTEN_BY_CPP_PAGE)
    ignored = subprocess.run(
        [git, "check-ignore", "--no-index", "--stdin"],
        input="\n".join(written),
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout.split()
    assert sorted(set(written) - set(ignored)) == []


@pytest.mark.parametrize("page", [p for p in [README, *DOCS] if any(_blocks(p, "pycon"))], ids=_rel)
def test_python_examples(page, checkout_root, monkeypatch):
    monkeypatch.chdir(checkout_root)
    parser, globs = doctest.DocTestParser(), {}
    runner = doctest.DocTestRunner(optionflags=OPTIONS)
    report = []
    for line, block in _blocks(page, "pycon"):
        test = parser.get_doctest(block, globs, f"{_rel(page)}:{line}", str(page), line)
        runner.run(test, out=report.append, clear_globs=False)
        globs = test.globs  # a DocTest runs in a copy: the next block goes on from this one
    assert runner.failures == 0, "".join(report)
