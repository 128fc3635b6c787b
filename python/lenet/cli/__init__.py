"""lenet-cli: classify image files from a shell.

    lenet-cli digit.png scans/ 'more/*.png' - [--files-from FILE|- [-0]]
              [--weights FILE] [--device auto|cpu|cuda] [--mode auto|mnist|photo]
              [--digits] [--debug-dir DIR] [--top-k K] [--json] [--output FILE]
              [--batch-size N] [--threads N] [--save OUT] [-q] [--no-progress] [--version]

Inputs: image files; directories, searched recursively (image files by extension, other
files by their first bytes; names starting with "." are skipped); globs the shell did not
expand ('scans/**/*.png'); ``-`` for one image on standard input; ``--files-from FILE``
for a list of paths, one per line (``-0``: separated by NUL characters; ``-`` reads
standard input). Also run as ``python -m lenet``.

Prints one line per image, ``path: 7 (99.2%)``, as soon as its batch is done (with
``--digits``, the number each image holds: ``path: 4071 (93.1%)  [4: 99.0%, ...]``); an
image that holds several digits where one is asked for says so: ``path: 0 (100.0%);
several digits seen: --digits reads them as a number``.
Inputs are read, decoded and classified as a stream: memory does not grow with their
number. An input that cannot be read, or holds no digit, gets a one-line error on stderr
and the others go on. ``--output FILE`` also writes every result (and every error) to
FILE, as JSON lines (.jsonl, .json) or CSV (.csv): written to a temporary file beside it
and renamed when the run ends, so that FILE is never half written. A progress bar (count,
rate, time left) goes to stderr when it is a terminal. Ctrl-C stops the run cleanly: what
was done is printed and written out, and the exit status is 130.

Exit status: 0 when every input was classified, 1 when some could not be read or held no
digit, 2 for a usage error or an unusable model, 130 when interrupted, 141 when standard
output was closed before the end (``| head``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Iterator, Optional

from .. import preprocess
from .inputs import Inputs, progress_bar
from .output import SEVERAL_DIGITS, DebugWriter, Output, print_number, result_record


def add_precision_argument(p: argparse.ArgumentParser) -> None:
    """--precision, as lenet-cli and lenet-serve take it (Engine's ``precision``)."""
    p.add_argument(
        "--precision",
        default="exact",
        choices=["exact", "fast"],
        help="exact (the default: answers at least as close to the exact ones as Keras' float32) or fast "
        "(the CPU's Winograd convolutions in float32: faster on models with 3x3 or 5x5 convolutions of "
        "16+ channels, several times further from the exact answers)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lenet-cli",
        description="Classify images of handwritten digits with a LeNet (Keras HDF5 weights) on lenet's C++ engine.",
        epilog="Exit status: 0 when every image was classified, 1 when some could not be read or held no digit, "
        "2 for a usage error or an unusable model, 130 when interrupted, 141 when standard output was "
        "closed (| head).",
    )
    p.add_argument(
        "images",
        nargs="*",
        help="image files (PNG, JPEG, BMP, TIFF, WebP, ...), directories (searched recursively), globs, "
        "or - for one image on standard input",
    )
    p.add_argument(
        "--files-from", metavar="FILE", help="read input paths from FILE, one per line (- for standard input)"
    )
    p.add_argument("-0", "--null", action="store_true", help="with --files-from: paths are separated by NUL bytes")
    p.add_argument(
        "--weights",
        metavar="FILE",
        help="a model file (Keras .h5 / .keras, or ONNX), or a shipped model name (lenet5, lenet-keras, "
        "lenet-tf); default lenet5",
    )
    p.add_argument(
        "--arch", metavar="JSON", help="architecture (Keras JSON file or shipped name) for a weights-only file"
    )
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all available)")
    add_precision_argument(p)
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="N",
        help="at most N images per call of the engine (default 1024; fewer for big photos)",
    )
    p.add_argument(
        "--mode",
        default="auto",
        choices=["auto", "mnist", "photo"],
        help="preprocessing: photo (a photo, scan or drawing of a digit anywhere in the image), "
        "mnist (already MNIST-like: only resized), auto (mnist for images of the model's size "
        "on a dark background, or their negative for a clean drawing of that size dark on white; "
        "else photo; the default)",
    )
    p.add_argument(
        "--digits",
        action="store_true",
        help="read each image as a number written left to right and print it, with each digit's "
        "confidence (the digits are always found as in photo mode)",
    )
    p.add_argument(
        "--debug-dir",
        metavar="DIR",
        help="write the 28x28 image the network received, per input (with --digits, per digit)",
    )
    preprocess.add_arguments(p)
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="also show the K most probable digits")
    p.add_argument(
        "--unsure-below",
        type=float,
        default=0.0,
        metavar="P",
        help="say 'unsure' for a digit whose confidence is below P (0..1; the shipped models' "
        "confidences are calibrated on held-out MNIST digits: read at 0.6, a digit is right about "
        "60%% of the time); with --digits, such digits print as '?'. Default 0: never",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per image (JSON lines)")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="also write the results to FILE: JSON lines (.jsonl, .json) or CSV (.csv), atomically",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors (and no progress bar)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    p.add_argument(
        "--ray",
        nargs="?",
        const=True,
        default=False,
        metavar="ADDRESS",
        help="classify on Ray Data (pip install 'lenet[ray]'): a local Ray, or the cluster at ADDRESS "
        "(default: $RAY_ADDRESS when set); one Engine per actor, Ray's progress display",
    )
    p.add_argument("--summary", action="store_true", help="print the model's layers before the results")
    p.add_argument(
        "--save",
        metavar="OUT",
        help="write the model, read and checked, as lenet's own file (.lenet: what the C++ API loads, "
        "docs/cpp.md); with no images, only that",
    )
    p.add_argument("--version", action="store_true", help="print version, backends and libraries, then exit")
    return p


class UsageError(Exception):
    pass


class _Trimmer:
    """In this process only (the command's, not a library user's): glibc's malloc raises its
    mmap threshold each time a large block is freed, so after the first photos their decoded
    pixels come from the heaps and the freed space stays resident, fragmented (lenet-cli's
    peak RSS: 120 MB over 200 photos, 149 MB over 2,000). Giving the free pages back once a
    second (malloc_trim) keeps the peak flat; a fixed mmap threshold did too, but made the
    run 1.4x slower (a fresh mapping, zero-filled, per image)."""

    def __init__(self):
        try:
            import ctypes

            self.trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc
            self.trim = None
        self.last = 0.0

    def __call__(self) -> None:
        import time

        now = time.monotonic()
        if self.trim is not None and now - self.last >= 1.0:
            self.trim(0)
            self.last = now


def _stdout_closed() -> int:
    """stdout's reader went away (| head): stop quietly, like a shell tool on SIGPIPE, with
    stdout pointed at /dev/null so that the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    import lenet

    if args.version:
        try:
            for k, v in lenet.info().items():
                print(f"{k}: {v}")
            sys.stdout.flush()
        except BrokenPipeError:
            return _stdout_closed()
        return 0
    try:
        _check_usage(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        return 2
    if args.ray:
        try:
            import ray  # noqa: F401
        except ImportError:
            print(
                'lenet-cli: error: --ray needs Ray, which is not installed: pip install "lenet[ray]"', file=sys.stderr
            )
            return 2
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", RuntimeWarning)  # the CUDA fallback: one line, below
            engine = lenet.Engine(
                args.weights,
                device=args.device,
                threads=args.threads,
                arch=args.arch,
                precision=args.precision,
                **preprocess.options(args),
            )
    except lenet.Error as e:
        print(f"lenet-cli: error: {as_flags(str(e))}", file=sys.stderr)
        return 2
    for note in notes if not args.quiet else ():
        print(f"lenet-cli: note: {str(note.message).removeprefix('lenet: ')}", file=sys.stderr)
    if args.summary:
        engine.summary()
    if args.save:
        try:
            engine.save(args.save)
        except lenet.Error as e:
            print(f"lenet-cli: error: --save: {e}", file=sys.stderr)
            return 2
        if not args.quiet:  # on stderr: standard output is the results'
            size = os.path.getsize(args.save)
            model = engine.model
            print(
                f"lenet-cli: wrote {args.save} ({size:,} bytes): {model.source}, input {model.input_shape}, "
                f"{model.classes} classes, {engine.preprocessing}",
                file=sys.stderr,
            )
        if not args.images and not args.files_from:
            return 0
    if args.debug_dir:
        try:
            os.makedirs(args.debug_dir, exist_ok=True)
        except OSError as e:
            print(f"lenet-cli: error: --debug-dir {args.debug_dir}: {e.strerror or e}", file=sys.stderr)
            return 2
    try:
        output = Output(args.output, engine.classes, args.top_k, args.unsure_below) if args.output else None
    except OSError as e:
        print(f"lenet-cli: error: --output {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    return _Run(engine, args, output).run()


# The Engine's keyword arguments, as the library's messages name them, and the flags that
# set them here: a message the command prints names what its user types.
_KEYWORD = re.compile(
    r"(?<![\w-])(arch|input_scale|mean|std|device|threads)=(?:\.\.\.)?(?:'(\w+)'|(-?\d[\d.]*(?:e[-+]?\d+)?))?"
)


def as_flags(message: str) -> str:
    """A library message with the Engine's keywords (``arch=...``) written as lenet-cli's flags (``--arch``)."""

    def flag(m: re.Match) -> str:
        name = "--" + m.group(1).replace("_", "-")
        value = m.group(2) or m.group(3)  # a quoted word or a number
        return f"{name} {value}" if value else name

    return _KEYWORD.sub(flag, message)


def _check_usage(args) -> None:
    if not args.images and not args.files_from and not args.save:
        raise UsageError("give at least one image, directory or glob (or --files-from FILE)")
    if not 0.0 <= args.unsure_below <= 1.0:
        raise UsageError(f"--unsure-below must be between 0 and 1, not {args.unsure_below}")
    if args.top_k < 1:
        raise UsageError("--top-k must be at least 1")
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    if args.null and not args.files_from:
        raise UsageError("-0 goes with --files-from")
    if args.images.count("-") > 1 or ("-" in args.images and args.files_from == "-"):
        raise UsageError("standard input can be read once: one '-' among the images or --files-from -")
    if args.output and Path(args.output).suffix.lower() not in (".jsonl", ".json", ".csv", ".ndjson"):
        raise UsageError(f"--output {args.output}: the name must end in .jsonl, .json or .csv (the format)")


class _Run:
    """One invocation: the inputs streamed through the engine, each answer printed and
    written as it comes, errors counted."""

    def __init__(self, engine, args, output: Optional["Output"]):
        self.engine, self.args, self.output = engine, args, output
        self.failed = self.done = 0
        self.bar = None
        self.seen = DebugWriter(args.debug_dir, self.error)
        self.trim = _Trimmer()

    def error(self, e) -> None:
        self.failed += 1
        self.done += 1
        self._stderr(f"lenet-cli: error: {e}")
        if self.output is not None and hasattr(e, "source"):
            self.output.error(getattr(e, "source", None) or "", str(e))

    def _ray_stream(self, inputs) -> Iterator[list]:
        """The inputs classified on Ray Data (lenet.ray), in input order, as the engine's
        stream gives them: lists of Result and InputError."""
        import numpy as np
        import ray

        import lenet
        import lenet.ray

        items = list(inputs)
        paths = [item for item in items if isinstance(item, str)]
        if len(paths) != len(items):  # stdin, or an input that failed before: theirs are not files Ray reads
            for item in items:
                if isinstance(item, lenet.InputError):
                    yield [item]
                elif not isinstance(item, str):
                    raise lenet.InputError("--ray reads files: standard input ('-') cannot be sent to a cluster")
        if not paths:
            return
        ray.init(address=None if self.args.ray is True else self.args.ray, configure_logging=False)
        ds = lenet.ray.classify(
            paths,
            weights=self.engine.model,
            device=self.args.device,
            mode=self.args.mode,
            batch_size=self.args.batch_size or 1024,
            threads=self.args.threads,
            precision=self.args.precision,
            preserve_order=True,
        )
        for row in ds.iter_rows():
            if row["error"]:
                e = lenet.InputError(row["error"])
                e.source = row["path"]
                yield [e]
            else:
                yield [
                    lenet.Result(
                        int(row["digit"]),
                        np.asarray(row["probabilities"], np.float32),
                        row["path"],
                        row["mode"],
                        several_digits=bool(row["several_digits"]),
                    )
                ]

    def _terminate(self, signum, frame) -> None:
        """SIGTERM: killed, so no output file, and exit 143 here, in the handler. An exception
        raised from a signal handler lands wherever the main thread is, inside a thread
        pool's submit or a thread's start included, and a reader thread then printed a
        traceback; ending here runs no more Python, in any thread."""
        if self.output is not None:
            self.output.discard()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(143)

    def _stderr(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    def run(self) -> int:
        import lenet

        previous = (
            signal.signal(signal.SIGTERM, self._terminate)
            if threading.current_thread() is threading.main_thread()
            else None
        )
        inputs = Inputs(self.args)
        self.bar = None if self.args.ray else progress_bar(self.args, inputs)  # Ray shows its own
        status = None
        try:
            if self.args.digits:
                self._numbers(inputs)
            else:
                parts = (
                    self._ray_stream(inputs)
                    if self.args.ray
                    else lenet.stream.batches(self.engine, inputs, batch_size=self.args.batch_size, mode=self.args.mode)
                )
                for part in parts:
                    for r in part:
                        if isinstance(r, lenet.InputError):
                            self.error(r)
                        else:
                            self._result(r)
                    self._flush(len(part))
        except BrokenPipeError:
            status = _stdout_closed()
        except KeyboardInterrupt:
            status = 130
            self._stderr(
                f"lenet-cli: interrupted after {self.done:,} inputs"
                + (f"; what was done is in {self.args.output}" if self.output else "")
            )
        except lenet.Error as e:
            print(f"lenet-cli: error: {e}", file=sys.stderr)
            if self.output is not None:
                self.output.discard()
            return 2
        except BaseException:
            if self.output is not None:
                self.output.discard()
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if self.bar is not None:
                self.bar.close()
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                status = _stdout_closed()
        if self.output is not None:
            self.output.commit()
        if status is not None:
            return status
        return 1 if self.failed else 0

    def _flush(self, n: int) -> None:
        sys.stdout.flush()
        self.trim()
        if self.bar is not None:
            self.bar.update(n)

    def _result(self, r) -> None:
        self.done += 1
        if self.args.debug_dir:  # r.image is made for it only (it costs as much as the rest)
            self.seen.write(r.source, [r.image], numbered=False)
        if self.output is not None:
            self.output.result(r)
        if self.args.mode == "mnist" and not self.args.quiet and r.image is not None:
            from ..images.pixels import dark_ground

            if not dark_ground(r.image[None])[0]:  # what auto would have sent to the photo path
                self._stderr(
                    f"lenet-cli: warning: {r.source}: --mode mnist, but the image is dark on a light ground "
                    "(MNIST's digits are light on dark), so the answer may be wrong: --mode auto or photo "
                    "finds the digit"
                )
        if self.args.quiet:
            return
        top = r.top(self.args.top_k)
        unsure = r.confidence < self.args.unsure_below
        if self.args.json:
            print(json.dumps(result_record(r, self.args.top_k, self.args.unsure_below)))
        else:
            line = (
                f"{r.source}: unsure (perhaps {r.digit}, {100 * r.confidence:.1f}%)"
                if unsure
                else f"{r.source}: {r.digit} ({100 * r.confidence:.1f}%)"
            )
            if self.args.top_k > 1:
                line += "  [" + ", ".join(f"{d}: {100 * p:.1f}%" for d, p in top) + "]"
            if r.several_digits:  # one digit asked for, a number seen: the answer is one of its digits
                line += f"; {SEVERAL_DIGITS}"
            print(line)

    def _numbers(self, inputs) -> None:
        import lenet

        from ..images import Named

        for item in inputs:
            if isinstance(item, lenet.InputError):  # named nothing to read
                self.error(item)
                self._flush(1)
                continue
            path = item.label if isinstance(item, Named) else os.fspath(item)
            try:
                number = self.engine.read_number(item.data if isinstance(item, Named) else item)
            except lenet.InputError as e:
                e.source = path
                self.error(e)
                self._flush(1)
                continue
            number = dataclasses.replace(number, source=path)
            self.seen.write(path, [r.image for r in number.digits], numbered=True)
            self.done += 1
            if self.output is not None:
                self.output.number(number)
            if not self.args.quiet:
                print_number(number, self.args)
            self._flush(1)
