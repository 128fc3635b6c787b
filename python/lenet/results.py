"""What callers get back: a ``Result`` per image, a ``Number`` per number read, and the
answers of a prepared chunk in the places of its inputs (``answers``): the one place
where probabilities become answers, for ``infer``, ``infer_iter``, the server, the CLI
and Ray alike."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import repeat
from typing import Optional, Union

import numpy as np

from .errors import InputError


class Result:
    """One classified image, a value: immutable, equal to another Result of the same digit,
    probabilities (bit for bit), source and mode; hashable (in sets, as dict keys).

    ``probabilities`` is a distribution over the classes, whatever the model ends
    in: a softmax's outputs as they are; sigmoid outputs (one per class) divided by
    their sum; anything else (logits, ReLU outputs) through a softmax. ``predict``
    gives the model's own outputs.

    ``several_digits``: the photo path saw several digits side by side where one was
    asked for (a number): ``digit`` is one of them, the largest, and ``read_number`` (the
    CLI's ``--digits``) reads them all."""

    # A plain class with slots, not a frozen dataclass: a stream makes one per image, and
    # the dataclass's __init__ (object.__setattr__ per field) cost 4 us of the GIL each.
    # _several is set only where several digits were seen (results()): unset, it reads as
    # False, and the engine's answer for an MNIST array pays nothing for it.
    __slots__ = ("digit", "probabilities", "source", "mode", "_input", "_scale", "_several")

    digit: int  # the most probable class
    probabilities: np.ndarray  # float32 (classes,), sums to 1 (read-only)
    source: str  # the path, "<bytes>", "<array>[i]", ...
    mode: str  # the preprocessing the image took: "mnist" or "photo"

    def __init__(
        self,
        digit: int,
        probabilities: np.ndarray,
        source: str = "",
        mode: str = "",
        *,
        several_digits: bool = False,
        _input: Optional[np.ndarray] = None,
        _scale: float = 1.0,
    ):
        if type(probabilities) is not np.ndarray:
            probabilities = np.asarray(probabilities)
        if probabilities.flags.writeable:  # a value's contents do not change: a read-only copy
            probabilities = probabilities.copy()
            probabilities.flags.writeable = False
        set_ = object.__setattr__
        set_(self, "digit", digit)
        set_(self, "probabilities", probabilities)
        set_(self, "source", source)
        set_(self, "mode", mode)
        # The pixels the network received, (H, W, C) 0..255 (or scaled by _scale): see `image`.
        set_(self, "_input", _input)
        set_(self, "_scale", _scale)
        if several_digits:
            set_(self, "_several", True)

    def __setattr__(self, name, value):
        raise AttributeError(f"Result is immutable: cannot set {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"Result is immutable: cannot delete {name!r}")

    def __eq__(self, other):
        if not isinstance(other, Result):
            return NotImplemented
        return (
            self.digit == other.digit
            and self.source == other.source
            and self.mode == other.mode
            and self.several_digits == other.several_digits
            and self.probabilities.shape == other.probabilities.shape
            and self.probabilities.tobytes() == other.probabilities.tobytes()
        )

    def __hash__(self) -> int:
        return hash((self.digit, self.source, self.mode, self.probabilities.tobytes()))

    def __reduce__(self):
        return (
            _result,
            (self.digit, np.array(self.probabilities), self.source, self.mode, self._input, self._scale)
            + ((True,) if self.several_digits else ()),
        )

    @property
    def confidence(self) -> float:
        return float(self.probabilities[self.digit])

    @property
    def several_digits(self) -> bool:
        """Whether the image seemed to hold several digits side by side (a number) where
        one was asked for: read it with ``read_number`` (``lenet-cli --digits``)."""
        return getattr(self, "_several", False)

    @property
    def image(self) -> Optional[np.ndarray]:
        """What the network received, as a picture: uint8 (H, W) — (H, W, 3) for a
        colour model — 0..255, the digit white on black. None for a hand-made Result."""
        if self._input is None:
            return None
        img = (
            self._input
            if self._input.dtype == np.uint8
            else np.clip(np.rint(self._input / self._scale), 0, 255).astype(np.uint8)
        )
        # (H, W, C), or (H, W) for a gray digit kept as it was given (infer's short way)
        return img[:, :, 0] if img.ndim == 3 and img.shape[2] == 1 else img

    def top(self, k: int = 3) -> list[tuple[int, float]]:
        """The k most probable classes as (class, probability), best first."""
        order = np.argsort(-self.probabilities, kind="stable")[:k]
        return [(int(i), float(self.probabilities[i])) for i in order]

    def __repr__(self) -> str:
        several = ", several_digits=True" if self.several_digits else ""
        return f"Result(digit={self.digit}, confidence={self.confidence:.4f}, source={self.source!r}{several})"


def _result(digit, probabilities, source, mode, input_, scale, several=False) -> Result:
    return Result(digit, probabilities, source, mode, several_digits=several, _input=input_, _scale=scale)


_new_result = Result.__new__
_set_digit, _set_probabilities, _set_source, _set_mode, _set_input, _set_scale, _set_several = (
    getattr(Result, name).__set__ for name in Result.__slots__
)


def result_of(digit: int, probabilities: np.ndarray, source: str, mode: str, input_: np.ndarray) -> Result:
    """A Result of the engine's own making: probabilities a read-only float32 row, digit its
    argmax, input_ the row's pixels (0..255; (H, W, C), or (H, W) for one gray image).
    Skips __init__'s checks, which such values pass by construction: the engine's answer
    costs about 1 us more than its probabilities."""
    r = _new_result(Result)
    _set_digit(r, digit)
    _set_probabilities(r, probabilities)
    _set_source(r, source)
    _set_mode(r, mode)
    _set_input(r, input_)
    _set_scale(r, 1.0)
    return r


# A digit whose top probability is under IN_DOUBT_BELOW is in doubt (``Number.in_doubt``;
# lenet-cli --digits says so): the shipped models are calibrated on held-out MNIST digits,
# so a digit read at 0.6 is right about 60% of the time, and read_number's second reader
# (number.RECHECK_BELOW) takes the same line.
IN_DOUBT_BELOW = 0.6
# A number's length is in doubt (``Number.length_in_doubt``) when a reading of another number
# of digits is less probable than the one given by under LENGTH_DOUBT in log odds (read_number's
# scores: the network's log probabilities times number.DOUBT and the priors of size, ink and
# cuts). Chosen on tools/photoset/rows.py's numbers at seeds 0-999 (lenet5): at 1.0, 8 of the 9
# read with another length than written are in doubt, and 17 of the 991 read with the right
# one (0.5: 6 of 9 and 4; 2.0: 8 of 9 and 79) (issue 63).
LENGTH_DOUBT = 1.0


@dataclass(frozen=True)
class Skipped:
    """Ink in a number's image, a digit's size or larger, that no digit read holds: its box
    (x, y, w, h in the image's pixels) and why it was left out: "rule line" (a long thin
    stroke across the row), "margin" (it touches the image's edge), "off the row" (above or
    below the digits), or "stray mark" (in the row, but read better as no digit)."""

    box: tuple[int, int, int, int]
    why: str


@dataclass(frozen=True)
class Number:
    """A number read from one image: its digits left to right, and the ink of a digit's
    size that was left out (``skipped``), so that no mark is lost without a word; the most
    probable reading with another number of digits (``runner_up``, "" where there is none)
    and how much less probable it is (``length_margin``, log odds), so that a length the
    reading cannot stand behind says so (``length_in_doubt``)."""

    digits: list[Result]  # one per digit, left to right
    boxes: list[tuple[int, int, int, int]]  # each digit's x, y, width, height in the image's pixels
    source: str = ""
    skipped: tuple[Skipped, ...] = ()  # left to right
    runner_up: str = ""
    length_margin: float = float("inf")

    def in_doubt(self, below: float = IN_DOUBT_BELOW) -> list[int]:
        """The indices of the digits whose confidence (top probability) is under ``below``."""
        return [k for k, r in enumerate(self.digits) if r.confidence < below]

    @property
    def length_in_doubt(self) -> bool:
        """Whether a reading of another number of digits (``runner_up``) came within
        LENGTH_DOUBT log odds of this one: a digit may be lost, merged or split."""
        return self.length_margin < LENGTH_DOUBT

    @property
    def number(self) -> str:
        return "".join(str(r.digit) for r in self.digits)

    @property
    def confidence(self) -> float:
        """The product of the digits' confidences: the probability that the whole
        number is right, if the digits' errors are independent."""
        return float(np.prod([r.confidence for r in self.digits]))

    def __repr__(self) -> str:
        skipped = f", skipped={len(self.skipped)}" if self.skipped else ""
        doubt = f", runner_up={self.runner_up!r}" if self.length_in_doubt else ""
        return f"Number({self.number!r}, confidence={self.confidence:.4f}, source={self.source!r}{skipped}{doubt})"


class _Batch:
    """What the Results of one batch share: its probabilities (n, classes), read-only; their
    argmax as a list; the rows' sources (a list, or None: ``label[k]``) and modes (a list, or
    one for all); the rows' pixels (n, h, w, c); and the several-digits flags (or None)."""

    __slots__ = ("probabilities", "digits", "sources", "label", "modes", "x", "several")


class _BatchResult(Result):
    """A Result of a batch: row ``_k`` of the ``_Batch`` ``_b``, read from it when asked. Two
    slot writes make one (a Result of its own takes six, and two NumPy views: 0.7 µs, which at
    batch 64 was most of what ``infer`` cost above ``predict_proba``); it is a Result in every
    documented way (its attributes, equality, hashing, pickling as a plain Result)."""

    __slots__ = ("_b", "_k")

    @property
    def digit(self) -> int:  # type: ignore[override]
        return self._b.digits[self._k]

    @property
    def probabilities(self) -> np.ndarray:  # type: ignore[override]
        return self._b.probabilities[self._k]  # a read-only view of the row

    @property
    def source(self) -> str:  # type: ignore[override]
        b = self._b
        return b.sources[self._k] if b.sources is not None else f"{b.label}[{self._k}]"

    @property
    def mode(self) -> str:  # type: ignore[override]
        modes = self._b.modes
        return modes if type(modes) is str else modes[self._k]

    @property
    def _input(self) -> np.ndarray:  # type: ignore[override]
        return self._b.x[self._k]

    _scale = 1.0  # the rows hold pixels 0..255

    @property
    def several_digits(self) -> bool:
        several = self._b.several
        return several is not None and bool(several[self._k])


_set_b, _set_k = _BatchResult._b.__set__, _BatchResult._k.__set__  # type: ignore[attr-defined]


def batch_results(probabilities: np.ndarray, x: np.ndarray, sources, modes, several=None, label: str = "") -> list:
    """One Result per row of a batch: ``probabilities`` (n, classes), made read-only; ``x`` the
    rows' pixels; ``sources`` a list per row, or None for ``label[k]``; ``modes`` a list per
    row, or one string for all; ``several`` bool per row, or None. Built with no Python per row."""
    probabilities.flags.writeable = False
    n = len(probabilities)
    b = _Batch()
    b.probabilities, b.x, b.sources, b.label, b.modes, b.several = probabilities, x, sources, label, modes, several
    b.digits = probabilities.argmax(1).tolist() if n else []
    out = list(map(_new_result, repeat(_BatchResult, n)))
    deque(map(_set_b, out, repeat(b, n)), 0)
    deque(map(_set_k, out, range(n)), 0)
    return out


def results(rows, probabilities: np.ndarray) -> list[Result]:
    """One Result per row of a prepared table (``images.Rows``), from the probabilities of
    its rows. Each Result's probabilities are a read-only view of that row."""
    return batch_results(probabilities, rows.x, rows.source, rows.mode, rows.several)


def answers(prepared, probabilities: np.ndarray, inputs: Optional[int] = None) -> list[Union[Result, InputError]]:
    """The answers of a prepared chunk (``images.Prepared``) in input order: each input's
    Results (one per image it held), or its InputError in its place. ``inputs``: how many
    inputs the chunk had (default: one more than the last that gave a row or an error)."""
    rows = prepared.rows
    out = results(rows, probabilities)
    items = rows.item.tolist()
    if inputs is None:
        inputs = 1 + max(items[-1] if items else -1, prepared.errors[-1][0] if prepared.errors else -1)
    if not prepared.errors and items == list(range(inputs)):  # one image per input: row k is input k
        return out
    failed = dict(prepared.errors[::-1])  # the first error of each input
    by_item: dict = {}
    for r, item in zip(out, items):
        by_item.setdefault(item, []).append(r)
    answers_: list = []
    for k in range(inputs):
        if k in failed:
            answers_.append(failed[k])
        else:
            answers_ += by_item.get(k, ())
    return answers_
