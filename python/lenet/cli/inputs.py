"""What lenet-cli reads: image files, directories (walked), globs, lists of paths
(--files-from, a pipe), standard input; and the progress bar over them."""

from __future__ import annotations

import glob
import os
import sys
import threading
from typing import Iterator

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


class Inputs:
    """The inputs the command line names, one at a time, in order: files as they are,
    directories walked (sorted, recursively), globs expanded, '-' read from stdin, and the
    lines of --files-from. Paths that name nothing are passed on (the engine reports
    them, in their place); a directory without images or a glob without a match is an
    InputError in its place. ``total`` is the count when it is known without a walk."""

    def __init__(self, args):
        self.args = args
        self.total = None
        self.directories: list[str] = []
        if not args.files_from and all(a == "-" or os.path.isfile(a) for a in args.images):
            self.total = len(args.images)
        else:
            self.directories = [a for a in args.images if a != "-" and os.path.isdir(a)]

    def __iter__(self) -> Iterator:
        from ..images import Named

        for arg in self.args.images:
            if arg == "-":
                yield Named(sys.stdin.buffer.read(), "<stdin>")
            elif os.path.isdir(arg):
                found = 0
                for path in walk(arg):
                    found += 1
                    yield path
                if not found:
                    yield failure(arg, "a directory with no image files")
            elif GLOB_CHARACTERS & set(arg) and not os.path.exists(arg):
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
        if self.args.files_from:
            yield from listed(self.args.files_from, self.args.null)


def failure(source: str, why: str):
    """An input that names nothing to classify: its error goes through the stream in its place."""
    from ..errors import InputError

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
    from ..images.sniff import format_of

    if os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS:
        return True
    try:
        with open(path, "rb") as f:
            return format_of(f.read(32)) is not None
    except OSError:
        return False


def listed(source: str, null: bool) -> Iterator:
    """The paths of a list file (or stdin), one per line or NUL-separated, read lazily."""
    try:
        f = sys.stdin.buffer if source == "-" else open(source, "rb")
    except OSError as e:
        yield failure(f"--files-from {source}", e.strerror or str(e))
        return
    sep = b"\0" if null else b"\n"
    try:
        rest = b""
        while True:
            block = f.read1(1 << 16)  # what has come: a slow producer's paths are classified as they come
            if not block:
                break
            pieces = (rest + block).split(sep)
            rest = pieces.pop()
            for piece in pieces:
                path = piece if null else piece.rstrip(b"\r")
                if path:
                    yield os.fsdecode(path)
        if rest.rstrip(b"\r") if not null else rest:
            yield os.fsdecode(rest if null else rest.rstrip(b"\r"))
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def progress_bar(args, inputs: Inputs):
    """A tqdm bar on stderr when it is a terminal (not with -q or --no-progress). Its total
    is the input count where known at once, else counted by a walk in the background."""
    if args.quiet or args.no_progress or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    bar = tqdm(total=inputs.total, unit="img", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
    if (
        inputs.total is None
        and inputs.directories
        and not args.files_from
        and all(a == "-" or os.path.isdir(a) or os.path.isfile(a) for a in args.images)
    ):

        def count():
            n = sum(1 for a in args.images if not os.path.isdir(a))
            for d in inputs.directories:
                n += sum(1 for _ in walk(d))
            bar.total = n
            bar.refresh()

        threading.Thread(target=count, daemon=True, name="lenet-cli-count").start()
    return bar
