"""What one path argument names, for lenet-cli and ``lenet.infer`` / ``infer_iter`` alike: a
file as it is, a directory walked (sorted, recursively; image files by extension, others
by their first bytes; hidden names skipped), a glob the shell did not expand."""

from __future__ import annotations

import glob
import os
from typing import Iterator, Union

from .errors import InputError

# Files in a directory taken as images by their name; others by their first bytes.
IMAGE_EXTENSIONS = {
    ".png",
    ".jpg",
    ".jpeg",
    ".jpe",
    ".jfif",
    ".bmp",
    ".dib",
    ".gif",
    ".webp",
    ".tif",
    ".tiff",
    ".pbm",
    ".pgm",
    ".ppm",
    ".pnm",
    ".pam",
}

GLOB_CHARACTERS = set("*?[")


def names_many(path: Union[str, os.PathLike]) -> bool:
    """Whether a path argument names several files: a directory, or a glob naming no file itself."""
    if not isinstance(path, str):
        path = os.fspath(path)
        if not isinstance(path, str):
            path = os.fsdecode(path)
    return os.path.isdir(path) or bool(GLOB_CHARACTERS.intersection(path)) and not os.path.exists(path)


def expand(arg: Union[str, os.PathLike]) -> Iterator[Union[str, InputError]]:
    """The paths one argument names, in order: a file (or a path naming nothing, which the
    reader reports) as it is; a directory's image files; a glob's matches (a directory it
    matches walked). A directory without images or a glob without a match is an InputError
    in its place."""
    arg = os.fsdecode(os.fspath(arg))
    if os.path.isdir(arg):
        found = 0
        for path in walk(arg):
            found += 1
            yield path
        if not found:
            yield failure(arg, "a directory with no image files")
    elif GLOB_CHARACTERS.intersection(arg) and not os.path.exists(arg):
        matches = sorted(glob.glob(arg, recursive=True))
        if not matches:
            yield failure(arg, "no file matches")
        recursive = os.path.basename(arg.rstrip("/")) == "**"  # 'dir/**' lists the files itself
        for m in matches:
            if os.path.isdir(m):
                if not recursive:
                    yield from walk(m)
            elif not recursive or is_image(m):  # 'dir/**': what a walk would take
                yield m
    else:
        yield arg


def failure(source: str, why: str) -> InputError:
    """An input that names nothing to classify: its error goes through the stream in its place."""
    e = InputError(f"{source}: {why}")
    e.source = source
    return e


def walk(directory: str) -> Iterator[str]:
    """Image files under a directory, sorted, recursively; hidden names skipped."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(root, name)
            if not name.startswith(".") and is_image(path):
                yield path


def is_image(path: str) -> bool:
    """An image file by its extension, or else by its first bytes."""
    from .images.sniff import format_of

    if os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS:
        return True
    try:
        with open(path, "rb") as f:
            return format_of(f.read(32)) is not None
    except OSError:
        return False


__all__ = ["IMAGE_EXTENSIONS", "GLOB_CHARACTERS", "expand", "failure", "is_image", "names_many", "walk"]
