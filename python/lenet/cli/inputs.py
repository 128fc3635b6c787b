"""What lenet-cli reads: image files, directories (walked), globs, lists of paths
(--files-from, a pipe), standard input; and the progress bar over them."""

from __future__ import annotations

import os
import sys
import threading
from typing import Iterator

from ..paths import GLOB_CHARACTERS, IMAGE_EXTENSIONS, expand, failure, is_image, walk  # noqa: F401


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
        from ..images.sniff import split_images

        for arg in self.args.images:
            if arg == "-":  # one image, or several one after another (cat a.png b.png)
                parts = split_images(sys.stdin.buffer.read())
                if len(parts) == 1:
                    yield Named(parts[0], "<stdin>")
                else:
                    yield from (Named(part, f"<stdin>[{k}]") for k, part in enumerate(parts))
            else:
                yield from expand(arg)
        if self.args.files_from:
            yield from listed(self.args.files_from, self.args.null)


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
