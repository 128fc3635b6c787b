"""lenet-cli: classify image files from a shell.

    lenet-cli digit.png scans/ 'more/*.png' - [--files-from FILE|- [-0]]
              [--weights FILE] [--device auto|cpu|cuda] [--mode auto|mnist|photo]
              [--digits] [--debug-dir DIR] [--top-k K] [--json] [--output FILE]
              [--batch-size N] [--threads N] [-q] [--no-progress] [--version]

Inputs: image files; directories, searched recursively (image files by extension, other
files by their first bytes; names starting with "." are skipped); globs the shell did not
expand ('scans/**/*.png'); ``-`` for one image on standard input; ``--files-from FILE``
for a list of paths, one per line (``-0``: separated by NUL characters; ``-`` reads
standard input). Also run as ``python -m lenet``.

Prints one line per image, ``path: 7 (99.2%)``, as soon as its batch is done (with
``--digits``, the number each image holds: ``path: 4071 (93.1%)  [4: 99.0%, ...]``).
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
import csv
import glob
import io
import json
import os
import signal
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Iterator, Optional

# Files in a directory taken as images by their name; others by their first bytes.
IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".jpe", ".jfif", ".bmp", ".dib", ".gif", ".webp", ".tif", ".tiff",
                    ".pbm", ".pgm", ".ppm", ".pnm", ".pam"}
GLOB_CHARACTERS = set("*?[")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lenet-cli",
        description="Classify images of handwritten digits with a LeNet (Keras HDF5 weights) on lenet's C++ engine.",
        epilog="Exit status: 0 when every image was classified, 1 when some could not be read or held no digit, "
               "2 for a usage error or an unusable model, 130 when interrupted, 141 when standard output was "
               "closed (| head).")
    p.add_argument("images", nargs="*",
                   help="image files (PNG, JPEG, BMP, TIFF, WebP, ...), directories (searched recursively), globs, "
                        "or - for one image on standard input")
    p.add_argument("--files-from", metavar="FILE",
                   help="read input paths from FILE, one per line (- for standard input)")
    p.add_argument("-0", "--null", action="store_true", help="with --files-from: paths are separated by NUL bytes")
    p.add_argument("--weights", metavar="FILE",
                   help="a model file (Keras .h5 / .keras, or ONNX), or a shipped model name (lenet5, lenet-keras, "
                        "lenet-tf); default lenet5")
    p.add_argument("--arch", metavar="JSON", help="architecture (Keras JSON file or shipped name) for a weights-only file")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="where to run (default: auto)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all available)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help="at most N images per call of the engine (default 1024; fewer for big photos)")
    p.add_argument("--mode", default="auto", choices=["auto", "mnist", "photo"],
                   help="preprocessing: photo (a photo, scan or drawing of a digit anywhere in the image), "
                        "mnist (already MNIST-like: only resized), auto (mnist for images of the model's size "
                        "on a dark background, else photo; the default)")
    p.add_argument("--digits", action="store_true",
                   help="read each image as a number written left to right and print it, with each digit's "
                        "confidence (the digits are always found as in photo mode)")
    p.add_argument("--debug-dir", metavar="DIR",
                   help="write the 28x28 image the network received, per input (with --digits, per digit)")
    p.add_argument("--top-k", type=int, default=1, metavar="K", help="also show the K most probable digits")
    p.add_argument("--unsure-below", type=float, default=0.0, metavar="P",
                   help="say 'unsure' for a digit whose confidence is below P (0..1; the shipped models' "
                        "confidences are calibrated on held-out MNIST digits: read at 0.6, a digit is right about "
                        "60%% of the time); with --digits, such digits print as '?'. Default 0: never")
    p.add_argument("--json", action="store_true", help="print one JSON object per image (JSON lines)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="also write the results to FILE: JSON lines (.jsonl, .json) or CSV (.csv), atomically")
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors (and no progress bar)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar, even on a terminal")
    p.add_argument("--ray", nargs="?", const=True, default=False, metavar="ADDRESS",
                   help="classify on Ray Data (pip install 'lenet[ray]'): a local Ray, or the cluster at ADDRESS "
                        "(default: $RAY_ADDRESS when set); one Engine per actor, Ray's progress display")
    p.add_argument("--summary", action="store_true", help="print the model's layers before the results")
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
        except (OSError, AttributeError):   # not glibc
            self.trim = None
        self.last = 0.0

    def __call__(self) -> None:
        import time
        now = time.monotonic()
        if self.trim is not None and now - self.last >= 1.0:
            self.trim(0)
            self.last = now


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    import lenet

    if args.version:
        for k, v in lenet.info().items():
            print(f"{k}: {v}")
        return 0
    try:
        _check_usage(args)
    except UsageError as e:
        parser.print_usage(sys.stderr)
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        return 2
    try:
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always", RuntimeWarning)  # the CUDA fallback: one line, below
            engine = lenet.Engine(args.weights, device=args.device, threads=args.threads, arch=args.arch)
    except lenet.Error as e:
        print(f"lenet-cli: error: {e}", file=sys.stderr)
        return 2
    for note in notes if not args.quiet else ():
        print(f"lenet-cli: note: {str(note.message).removeprefix('lenet: ')}", file=sys.stderr)
    if args.summary:
        engine.summary()
    if args.debug_dir:
        try:
            os.makedirs(args.debug_dir, exist_ok=True)
        except OSError as e:
            print(f"lenet-cli: error: --debug-dir {args.debug_dir}: {e.strerror or e}", file=sys.stderr)
            return 2
    try:
        output = _Output(args.output, engine.classes) if args.output else None
    except OSError as e:
        print(f"lenet-cli: error: --output {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    return _Run(engine, args, output).run()


def _check_usage(args) -> None:
    if not args.images and not args.files_from:
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

    def __init__(self, engine, args, output: Optional["_Output"]):
        self.engine, self.args, self.output = engine, args, output
        self.failed = self.done = 0
        self.bar = None
        self.seen = _DebugWriter(args.debug_dir, self.error)
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
        if len(paths) != len(items):   # stdin, or an input that failed before: theirs are not files Ray reads
            for item in items:
                if isinstance(item, lenet.InputError):
                    yield [item]
                elif not isinstance(item, str):
                    raise lenet.InputError("--ray reads files: standard input ('-') cannot be sent to a cluster")
        if not paths:
            return
        ray.init(address=None if self.args.ray is True else self.args.ray, configure_logging=False)
        ds = lenet.ray.classify(paths, weights=self.engine.model, device=self.args.device, mode=self.args.mode,
                                batch_size=self.args.batch_size or 1024, threads=self.args.threads,
                                preserve_order=True)
        for row in ds.iter_rows():
            if row["error"]:
                e = lenet.InputError(row["error"])
                e.source = row["path"]
                yield [e]
            else:
                yield [lenet.Result(int(row["digit"]), np.asarray(row["probabilities"], np.float32), row["path"],
                                    row["mode"])]

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
        previous = (signal.signal(signal.SIGTERM, self._terminate)
                    if threading.current_thread() is threading.main_thread() else None)
        inputs = _Inputs(self.args)
        self.bar = None if self.args.ray else _progress(self.args, inputs)   # Ray shows its own
        status = None
        try:
            if self.args.digits:
                self._numbers(inputs)
            else:
                parts = (self._ray_stream(inputs) if self.args.ray else
                         lenet.stream.batches(self.engine, inputs, batch_size=self.args.batch_size, mode=self.args.mode))
                for part in parts:
                    for r in part:
                        if isinstance(r, lenet.InputError):
                            self.error(r)
                        else:
                            self._result(r)
                    self._flush(len(part))
        except BrokenPipeError:   # stdout closed (| head): stop quietly, like a shell tool on SIGPIPE
            status = 141
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())   # the interpreter's final flush must not fail again
            os.close(devnull)
        except KeyboardInterrupt:
            status = 130
            self._stderr(f"lenet-cli: interrupted after {self.done:,} inputs"
                         + (f"; what was done is in {self.args.output}" if self.output else ""))
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
                status = 141
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
                os.close(devnull)
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
        if self.args.debug_dir:   # r.image is made for it only (it costs as much as the rest)
            self.seen.write(r.source, [r.image], numbered=False)
        if self.output is not None:
            self.output.result(r)
        if self.args.quiet:
            return
        top = r.top(self.args.top_k)
        unsure = r.confidence < self.args.unsure_below
        if self.args.json:
            print(json.dumps({"path": r.source, "digit": r.digit, "confidence": r.confidence, "mode": r.mode,
                              "top": [{"digit": d, "probability": p} for d, p in top],
                              "probabilities": r.probabilities.tolist()}
                             | ({"unsure": unsure} if self.args.unsure_below else {})))
        else:
            line = (f"{r.source}: unsure (perhaps {r.digit}, {100 * r.confidence:.1f}%)" if unsure
                    else f"{r.source}: {r.digit} ({100 * r.confidence:.1f}%)")
            if self.args.top_k > 1:
                line += "  [" + ", ".join(f"{d}: {100 * p:.1f}%" for d, p in top) + "]"
            print(line)

    def _numbers(self, inputs) -> None:
        import lenet
        from .images import Named
        for item in inputs:
            if isinstance(item, lenet.InputError):   # named nothing to read
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
            number = lenet.Number(number.digits, number.boxes, path)
            self.seen.write(path, [r.image for r in number.digits], numbered=True)
            self.done += 1
            if self.output is not None:
                self.output.number(number)
            if not self.args.quiet:
                _print_number(number, self.args)
            self._flush(1)


class _Inputs:
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
        from .images import Named
        for arg in self.args.images:
            if arg == "-":
                yield Named(sys.stdin.buffer.read(), "<stdin>")
            elif os.path.isdir(arg):
                found = 0
                for path in _walk(arg):
                    found += 1
                    yield path
                if not found:
                    yield _failed(arg, "a directory with no image files")
            elif GLOB_CHARACTERS & set(arg) and not os.path.exists(arg):
                matches = sorted(glob.glob(arg, recursive=True))
                if not matches:
                    yield _failed(arg, "no file matches")
                recursive = os.path.basename(arg.rstrip("/")) == "**"   # 'dir/**' lists the files itself
                for m in matches:
                    if os.path.isdir(m):
                        if not recursive:
                            yield from _walk(m)
                    elif not recursive or _is_image(m):   # 'dir/**': what a walk would take
                        yield m
            else:
                yield arg
        if self.args.files_from:
            yield from _listed(self.args.files_from, self.args.null)


def _failed(source: str, why: str):
    """An input that names nothing to classify: its error goes through the stream in its place."""
    from .errors import InputError
    e = InputError(f"{source}: {why}")
    e.source = source
    return e


def _walk(directory: str) -> Iterator[str]:
    """Image files under a directory, sorted, recursively; hidden names skipped."""
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = os.path.join(root, name)
            if not name.startswith(".") and _is_image(path):
                yield path


def _is_image(path: str) -> bool:
    """An image file by its extension, or else by its first bytes."""
    from .images.sniff import format_of
    if os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS:
        return True
    try:
        with open(path, "rb") as f:
            return format_of(f.read(32)) is not None
    except OSError:
        return False


def _listed(source: str, null: bool) -> Iterator:
    """The paths of a list file (or stdin), one per line or NUL-separated, read lazily."""
    try:
        f = sys.stdin.buffer if source == "-" else open(source, "rb")
    except OSError as e:
        yield _failed(f"--files-from {source}", e.strerror or str(e))
        return
    sep = b"\0" if null else b"\n"
    try:
        rest = b""
        while True:
            block = f.read1(1 << 16)   # what has come: a slow producer's paths are classified as they come
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


def _progress(args, inputs: _Inputs):
    """A tqdm bar on stderr when it is a terminal (not with -q or --no-progress). Its total
    is the input count where known at once, else counted by a walk in the background."""
    if args.quiet or args.no_progress or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:   # pragma: no cover - tqdm is a dependency
        return None
    bar = tqdm(total=inputs.total, unit="img", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
    if inputs.total is None and inputs.directories and not args.files_from and \
            all(a == "-" or os.path.isdir(a) or os.path.isfile(a) for a in args.images):
        def count():
            n = sum(1 for a in args.images if not os.path.isdir(a))
            for d in inputs.directories:
                n += sum(1 for _ in _walk(d))
            bar.total = n
            bar.refresh()
        threading.Thread(target=count, daemon=True, name="lenet-cli-count").start()
    return bar


class _Output:
    """--output FILE: JSON lines or CSV, written to a temporary file beside FILE and renamed
    onto it by ``commit`` (so FILE is either absent, as it was, or whole)."""

    def __init__(self, path: str, classes: int):
        self.path = Path(path)
        self.csv = self.path.suffix.lower() == ".csv"
        fd, self.tmp = tempfile.mkstemp(dir=self.path.parent or ".", prefix=f".{self.path.name}.",
                                        suffix=".part")
        self.file = io.open(fd, "w", encoding="utf-8", newline="")
        self.classes = classes
        if self.csv:
            self.writer = csv.writer(self.file)
            self.writer.writerow(["path", "digit", "confidence", "mode", "error",
                                  *[f"p{k}" for k in range(classes)]])

    def result(self, r) -> None:
        if self.csv:
            self.writer.writerow([r.source, r.digit, f"{r.confidence:.6g}", r.mode, "",
                                  *[f"{p:.6g}" for p in r.probabilities.tolist()]])
        else:
            self.file.write(json.dumps({"path": r.source, "digit": r.digit, "confidence": r.confidence,
                                        "mode": r.mode, "probabilities": r.probabilities.tolist()})
                            + "\n")

    def number(self, n) -> None:
        if self.csv:
            self.writer.writerow([n.source, n.number, f"{n.confidence:.6g}", "number", ""] + [""] * self.classes)
        else:
            self.file.write(json.dumps({"path": n.source, "number": n.number, "confidence": n.confidence,
                                        "digits": [r.digit for r in n.digits]}) + "\n")

    def error(self, source: str, message: str) -> None:
        if self.csv:
            self.writer.writerow([source, "", "", "", message] + [""] * self.classes)
        else:
            self.file.write(json.dumps({"path": source, "error": message}) + "\n")

    def commit(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        os.chmod(self.tmp, 0o644)
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.file.close()
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def _print_number(number, args) -> None:
    unsure = [r.confidence < args.unsure_below for r in number.digits]
    if args.json:
        print(json.dumps({"path": number.source, "number": number.number, "confidence": number.confidence,
                          "digits": [{"digit": r.digit, "confidence": r.confidence, "box": list(box),
                                      "top": [{"digit": d, "probability": p} for d, p in r.top(args.top_k)]}
                                     | ({"unsure": u} if args.unsure_below else {})
                                     for r, box, u in zip(number.digits, number.boxes, unsure)]}))
    else:
        shown = "".join("?" if u else str(r.digit) for r, u in zip(number.digits, unsure))
        digits = ", ".join(f"{r.digit}: {100 * r.confidence:.1f}%" for r in number.digits)
        print(f"{number.source}: {shown} ({100 * number.confidence:.1f}%)  [{digits}]")


class _DebugWriter:
    """Writes what the network saw: DIR/<name>.png per input, DIR/<name>-<k>.png per
    digit of a number (k from 1); <name> is the input's file name without its
    extension, made unique with _2, _3, ... when inputs share it."""

    def __init__(self, directory: str | None, report):
        self.directory, self.report = directory, report
        self.used: set[str] = set()

    def write(self, path: str, images: list, numbered: bool) -> None:
        if not self.directory:
            return
        import cv2

        stem = name = Path(path).stem
        k = 2
        while name in self.used:
            name, k = f"{stem}_{k}", k + 1
        self.used.add(name)
        for i, img in enumerate(images, 1):
            out = os.path.join(self.directory, f"{name}-{i}.png" if numbered else f"{name}.png")
            if img.ndim == 3:  # a colour model's input is RGB
                img = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
            if not cv2.imwrite(out, img):
                self.report(f"cannot write {out}")


if __name__ == "__main__":
    sys.exit(main())
