"""lenet.infer and infer_iter take what lenet-cli takes (issue 64): folders, walked as the
CLI walks them (lenet.paths, the one walker), globs, and on_error."""

import shutil

import pytest
from conftest import REPO

import lenet
from lenet.cli.inputs import Inputs

EXAMPLES = sorted((REPO / "examples").glob("digit-*.png"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """digits/ with images in a subfolder, a hidden file, a file without an extension
    (a PNG by its bytes) and one that is not an image: what a walk takes and skips."""
    root = tmp_path_factory.mktemp("walk") / "digits"
    (root / "sub").mkdir(parents=True)
    for d in (3, 1):
        shutil.copyfile(EXAMPLES[d], root / f"{d}.png")
    shutil.copyfile(EXAMPLES[7], root / "sub" / "seven")
    shutil.copyfile(EXAMPLES[5], root / ".hidden.png")
    (root / "notes.txt").write_text("not an image")
    return root


def _cli_order(*args):
    class Args:
        images, files_from, null = list(args), None, False

    return [str(p) for p in Inputs(Args())]


def test_a_folder_is_walked_as_lenet_cli_walks_it(folder):
    """Was InputError: 'digits: is a directory, not an image'."""
    got = lenet.infer(str(folder), device="cpu")
    assert [r.source for r in got] == _cli_order(str(folder))
    assert [r.source for r in got] == [str(folder / "1.png"), str(folder / "3.png"), str(folder / "sub" / "seven")]
    assert [r.digit for r in got] == [1, 3, 7]
    assert [r.source for r in lenet.infer(folder, device="cpu")] == [r.source for r in got]  # a Path too
    assert [r.source for r in lenet.infer_iter(str(folder), device="cpu")] == [r.source for r in got]


def test_a_glob_is_expanded_as_lenet_cli_expands_it(folder):
    """Was 'no such file' for 'd/000*.png'."""
    pattern = str(folder / "**" / "*")
    got = lenet.infer(str(folder / "[13].png"), device="cpu")
    assert [(r.source, r.digit) for r in got] == [(str(folder / "1.png"), 1), (str(folder / "3.png"), 3)]
    assert [r.source for r in lenet.infer(pattern, device="cpu", on_error=print)] == [
        p for p in _cli_order(pattern) if not p.endswith(".txt")
    ]


def test_folders_and_globs_in_a_list_and_on_error(folder, tmp_path):
    """on_error was refused by lenet.infer (only Engine.infer took it)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    errors = []
    inputs = [str(EXAMPLES[2]), str(folder / "sub"), str(empty), str(tmp_path / "none*.png"), str(EXAMPLES[0])]
    got = lenet.infer(inputs, device="cpu", on_error=errors.append)
    assert [(r.source, r.digit) for r in got] == [
        (str(EXAMPLES[2]), 2),
        (str(folder / "sub" / "seven"), 7),
        (str(EXAMPLES[0]), 0),
    ]
    assert [(e.source, str(e)) for e in errors] == [
        (str(empty), f"{empty}: a directory with no image files"),
        (str(tmp_path / "none*.png"), f"{tmp_path / 'none*.png'}: no file matches"),
    ]
    with pytest.raises(lenet.InputError, match="a directory with no image files"):
        lenet.infer(str(empty), device="cpu")
    streamed = list(lenet.infer_iter(inputs, device="cpu"))
    assert [getattr(r, "digit", None) for r in streamed] == [2, 7, None, None, 0]


def test_a_file_named_like_a_glob_is_a_file(tmp_path):
    odd = tmp_path / "digit[7].png"
    shutil.copyfile(EXAMPLES[7], odd)
    r = lenet.infer(str(odd), device="cpu")
    assert isinstance(r, lenet.Result) and r.digit == 7 and r.source == str(odd)


def test_a_folder_without_the_cores_png_decoder(folder, monkeypatch):
    """A build without libpng reads every file through OpenCV: a folder is walked all the same."""
    from lenet import _native

    engine = lenet.Engine("lenet5", device="cpu")
    monkeypatch.setattr(_native._core, "png_decoder", "")
    assert [r.digit for r in engine.infer(str(folder))] == [1, 3, 7]
