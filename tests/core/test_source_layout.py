"""Rules of csrc/ that hold by construction, checked from the source.

* Folder dependencies run one way, as docs/architecture.md draws them:
  support <- net <- backends <- runtime <- api <- bindings, and io <- api; tools/
  (programs on the public API) include nothing of csrc/ (only <lenet/lenet.h>). Within
  backends/, a backend's folder (cpu/, cuda/) may use backends/ and nchw/, never
  another backend's folder.
* No iostream formatting in the core: numbers become text through std::to_chars
  (csrc/support/format.h). iostreams read the process's locale facets, which a
  library loaded with RTLD_DEEPBIND once did not share (a crash on a GPU machine).
"""

import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
SOURCES = sorted(p for p in CSRC.rglob("*") if p.suffix in {".h", ".cpp", ".cu", ".cuh", ".in"})
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# What each top folder may include, besides itself.
ALLOWED = {
    "support": set(),
    "net": {"support"},
    "backends": {"support", "net"},
    "runtime": {"support", "net", "backends"},
    "io": {"support"},
    "api": {"support", "net", "backends", "runtime", "io"},
    "bindings": {"support", "net", "backends", "runtime", "io", "api"},
    "tools": set(),
}


def _edges():
    for src in SOURCES:
        for target in INCLUDE.findall(src.read_text()):
            dest = (src.parent / target).resolve()
            if dest.is_relative_to(CSRC) and dest.exists():
                yield src.relative_to(CSRC), dest.relative_to(CSRC)


def test_every_source_is_in_a_known_folder():
    assert {p.relative_to(CSRC).parts[0] for p in SOURCES} <= set(ALLOWED)


def test_folder_dependencies_run_one_way():
    wrong = []
    for src, dest in _edges():
        a, b = src.parts[0], dest.parts[0]
        if a != b and b not in ALLOWED[a]:
            wrong.append(f"{src} includes {dest}")
        # backends/cpu must not reach into backends/cuda, nor the other way.
        if a == b == "backends" and len(src.parts) > 2 and len(dest.parts) > 2:
            if src.parts[1] != dest.parts[1] and dest.parts[1] != "nchw":
                wrong.append(f"{src} includes {dest} (another backend)")
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_the_includes():
    """The checker is not vacuous: it finds the executor's include of the backend interface."""
    assert (Path("runtime/executor.h"), Path("backends/backend.h")) in set(_edges())


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: str(p.relative_to(CSRC)))
def test_no_iostream_formatting(src):
    text = src.read_text()
    assert not re.search(r"#\s*include\s*<(sstream|iostream|ostream|istream|iomanip)>", text), src
    assert "ostringstream" not in text and "std::cout" not in text and "std::cerr" not in text, src
