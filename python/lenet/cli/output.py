"""What lenet-cli writes: the --output file (JSON lines or CSV, replaced atomically),
numbers as text, and the --debug-dir images."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path

from ..results import IN_DOUBT_BELOW

# The CLI's line for an image that holds several digits where one was asked for
# (Result.several_digits): the digit printed is one of them.
SEVERAL_DIGITS = "several digits seen: --digits reads them as a number"


def result_record(r, top_k: int, unsure_below: float) -> dict:
    """A result as JSON, the same on standard output (--json) and in --output's JSON lines."""
    return {
        "path": r.source,
        "digit": r.digit,
        "confidence": r.confidence,
        "mode": r.mode,
        "top": [{"digit": d, "probability": p} for d, p in r.top(top_k)],
        "probabilities": r.probabilities.tolist(),
        "several_digits": r.several_digits,
    } | ({"unsure": r.confidence < unsure_below} if unsure_below else {})


def number_record(number, top_k: int, unsure_below: float) -> dict:
    """A number read (--digits) as JSON, the same on standard output and in --output's JSON
    lines: each digit with its confidence and whether it is in doubt (under --unsure-below,
    else results.IN_DOUBT_BELOW), the marks of a digit's size left out (``skipped``), and
    whether the number's length is in doubt, with the reading of another length that came
    near (``runner_up``, its ``length_margin`` in log odds; null where there is none)."""
    below = unsure_below or IN_DOUBT_BELOW
    return {
        "path": number.source,
        "number": number.number,
        "confidence": number.confidence,
        "digits": [
            {
                "digit": r.digit,
                "confidence": r.confidence,
                "box": list(box),
                "top": [{"digit": d, "probability": p} for d, p in r.top(top_k)],
                "in_doubt": r.confidence < below,
            }
            | ({"unsure": r.confidence < unsure_below} if unsure_below else {})
            for r, box in zip(number.digits, number.boxes)
        ],
        "in_doubt_below": below,
        "skipped": [{"box": list(s.box), "why": s.why} for s in number.skipped],
        "length_in_doubt": number.length_in_doubt,
        "runner_up": number.runner_up or None,
        "length_margin": number.length_margin if number.runner_up else None,
    }


class Output:
    """--output FILE: JSON lines or CSV, written to a temporary file beside FILE and renamed
    onto it by ``commit`` (so FILE is either absent, as it was, or whole)."""

    def __init__(self, path: str, classes: int, top_k: int = 1, unsure_below: float = 0.0):
        self.path = Path(path)
        self.top_k, self.unsure_below = top_k, unsure_below
        self.csv = self.path.suffix.lower() == ".csv"
        fd, self.tmp = tempfile.mkstemp(dir=self.path.parent or ".", prefix=f".{self.path.name}.", suffix=".part")
        self.file = io.open(fd, "w", encoding="utf-8", newline="")
        self.classes = classes
        if self.csv:
            self.writer = csv.writer(self.file)
            # several_digits last: the columns before it are where they always were.
            self.writer.writerow(
                ["path", "digit", "confidence", "mode", "error", *[f"p{k}" for k in range(classes)], "several_digits"]
            )

    def result(self, r) -> None:
        if self.csv:
            self.writer.writerow(
                [r.source, r.digit, f"{r.confidence:.6g}", r.mode, "", *[f"{p:.6g}" for p in r.probabilities.tolist()]]
                + [int(r.several_digits)]
            )
        else:
            self.file.write(json.dumps(result_record(r, self.top_k, self.unsure_below)) + "\n")

    def number(self, n) -> None:
        if self.csv:
            self.writer.writerow([n.source, n.number, f"{n.confidence:.6g}", "number", ""] + [""] * (self.classes + 1))
        else:
            self.file.write(json.dumps(number_record(n, self.top_k, self.unsure_below)) + "\n")

    def error(self, source: str, message: str) -> None:
        if self.csv:
            self.writer.writerow([source, "", "", "", message] + [""] * (self.classes + 1))
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


def doubt_line(number, below: float) -> str:
    """What a number's line adds when a digit is in doubt (top probability under
    ``below``), its length is (a reading of another length came near), or ink of a digit's
    size was skipped: "" when none."""
    said = []
    doubted = number.in_doubt(below)
    if doubted:
        said.append(
            "in doubt: "
            + ", ".join(
                f"digit {k + 1} ({number.digits[k].digit} at {100 * number.digits[k].confidence:.1f}%)" for k in doubted
            )
        )
    if number.length_in_doubt:
        said.append(f"length in doubt: {number.runner_up} nearly as likely")
    if number.skipped:
        said.append("skipped: " + ", ".join(f"{s.why} at {tuple(s.box)}" for s in number.skipped))
    return "".join(f"; {s}" for s in said)


def print_number(number, args) -> None:
    unsure = [r.confidence < args.unsure_below for r in number.digits]
    if args.json:
        print(json.dumps(number_record(number, args.top_k, args.unsure_below)))
    else:
        shown = "".join("?" if u else str(r.digit) for r, u in zip(number.digits, unsure))
        digits = ", ".join(f"{r.digit}: {100 * r.confidence:.1f}%" for r in number.digits)
        doubt = doubt_line(number, args.unsure_below or IN_DOUBT_BELOW)
        print(f"{number.source}: {shown} ({100 * number.confidence:.1f}%)  [{digits}]{doubt}")


class DebugWriter:
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
