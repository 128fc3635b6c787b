"""The user's surface: load a model, build an Engine on a device, classify images."""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence, Union, overload

import numpy as np

from . import _native, pipeline
from ._native import _core
from .errors import CudaError, InputError
from .keras import SHIPPED_MODELS, read_model, shipped_weights
from .preprocess import Batch, as_array, check_batch_size, number_batch, to_batch
from .spec import ModelSpec

DEFAULT_MODEL = "lenet5"
# Pixel scale assumed for a file that does not record one (lenet_input_scale) and
# does not start with a Rescaling layer: Keras MNIST models are almost always
# trained on x / 255.
DEFAULT_INPUT_SCALE = 1.0 / 255.0


class Result:
    """One classified image, a value: immutable, equal to another Result of the same digit,
    probabilities (bit for bit), source and mode; hashable (in sets, as dict keys).

    ``probabilities`` is a distribution over the classes, whatever the model ends
    in: a softmax's outputs as they are; sigmoid outputs (one per class) divided by
    their sum; anything else (logits, ReLU outputs) through a softmax. ``predict``
    gives the model's own outputs."""

    # A plain class with slots, not a frozen dataclass: a stream makes one per image, and
    # the dataclass's __init__ (object.__setattr__ per field) cost 4 us of the GIL each.
    __slots__ = ("digit", "probabilities", "source", "mode", "_input", "_scale")

    digit: int                  # the most probable class
    probabilities: np.ndarray   # float32 (classes,), sums to 1 (read-only)
    source: str                 # the path, "<bytes>", "<array>[i]", ...
    mode: str                   # the preprocessing the image took: "mnist" or "photo"

    def __init__(self, digit: int, probabilities: np.ndarray, source: str = "", mode: str = "", *,
                 _input: Optional[np.ndarray] = None, _scale: float = 1.0):
        if type(probabilities) is not np.ndarray:
            probabilities = np.asarray(probabilities)
        if probabilities.flags.writeable:   # a value's contents do not change: a read-only copy
            probabilities = probabilities.copy()
            probabilities.flags.writeable = False
        set_ = object.__setattr__
        set_(self, "digit", digit)
        set_(self, "probabilities", probabilities)
        set_(self, "source", source)
        set_(self, "mode", mode)
        # The network's input for this image, (H, W, C) scaled, and the scale: see `image`.
        set_(self, "_input", _input)
        set_(self, "_scale", _scale)

    def __setattr__(self, name, value):
        raise AttributeError(f"Result is immutable: cannot set {name!r}")

    def __delattr__(self, name):
        raise AttributeError(f"Result is immutable: cannot delete {name!r}")

    def __eq__(self, other):
        if not isinstance(other, Result):
            return NotImplemented
        return (self.digit == other.digit and self.source == other.source and self.mode == other.mode
                and self.probabilities.shape == other.probabilities.shape
                and self.probabilities.tobytes() == other.probabilities.tobytes())

    def __hash__(self) -> int:
        return hash((self.digit, self.source, self.mode, self.probabilities.tobytes()))

    def __reduce__(self):
        return (_result, (self.digit, np.array(self.probabilities), self.source, self.mode, self._input, self._scale))

    @property
    def confidence(self) -> float:
        return float(self.probabilities[self.digit])

    @property
    def image(self) -> Optional[np.ndarray]:
        """What the network received, as a picture: uint8 (H, W) — (H, W, 3) for a
        colour model — 0..255, the digit white on black. None for a hand-made Result."""
        if self._input is None:
            return None
        img = np.clip(np.rint(self._input / self._scale), 0, 255).astype(np.uint8)
        return img[:, :, 0] if img.shape[2] == 1 else img

    def top(self, k: int = 3) -> list[tuple[int, float]]:
        """The k most probable classes as (class, probability), best first."""
        order = np.argsort(-self.probabilities, kind="stable")[:k]
        return [(int(i), float(self.probabilities[i])) for i in order]

    def __repr__(self) -> str:
        return f"Result(digit={self.digit}, confidence={self.confidence:.4f}, source={self.source!r})"


def _result(digit, probabilities, source, mode, input_, scale) -> Result:
    return Result(digit, probabilities, source, mode, _input=input_, _scale=scale)


@dataclass(frozen=True)
class Number:
    """A number read from one image: its digits left to right."""

    digits: list[Result]                     # one per digit, left to right
    boxes: list[tuple[int, int, int, int]]   # each digit's x, y, width, height in the image's pixels
    source: str = ""

    @property
    def number(self) -> str:
        return "".join(str(r.digit) for r in self.digits)

    @property
    def confidence(self) -> float:
        """The product of the digits' confidences: the probability that the whole
        number is right, if the digits' errors are independent."""
        return float(np.prod([r.confidence for r in self.digits]))

    def __repr__(self) -> str:
        return f"Number({self.number!r}, confidence={self.confidence:.4f}, source={self.source!r})"


class Model:
    """A loaded, checked model: the file's layers with their shapes and weights.

    Immutable; several Engines (on different devices) may share one.
    """

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self._network = _core.Network(spec.layers, list(spec.input_shape), spec.source)
        self._image_shape = _image_shape(spec, self._network)
        self._input_shape = (None,) + tuple(self._network.input_shape)
        self._output_shape = (None,) + tuple(self._network.output_shape)

    def __reduce__(self):   # its spec: the layer records and their weights (lenet.spec)
        return Model, (self.spec,)

    @property
    def source(self) -> str:
        return self.spec.source

    @property
    def input_shape(self) -> tuple:
        """The model's input shape as Keras gives it: (None, 28, 28, 1), (None, 784), ..."""
        return self._input_shape

    @property
    def output_shape(self) -> tuple:
        """The model's output shape as Keras gives it: (None, 10), ..."""
        return self._output_shape

    @property
    def image_shape(self) -> Optional[tuple[int, int, int]]:
        """(height, width, channels) of the images ``infer`` feeds the model; None when
        the input does not say (a flat input whose length is not a square)."""
        return self._image_shape

    @property
    def channels_first(self) -> bool:
        return bool(self._network.channels_first)

    @property
    def classes(self) -> int:
        """Values per image in the output."""
        return int(self._network.output_size)

    @property
    def macs(self) -> int:
        """Multiply-adds per image in the convolutions and dense layers."""
        return self._network.macs

    @property
    def input_scale(self) -> float:
        """The factor applied to 0..255 pixels before the network: the file's
        ``lenet_input_scale``, 1.0 when the model starts with a Rescaling or
        Normalization layer, else 1/255."""
        if self.spec.input_scale is not None:
            return float(self.spec.input_scale)
        if any(l.kind in ("rescaling", "normalization") and list(l.inputs) == [-1] for l in self.spec.layers):
            return 1.0
        return DEFAULT_INPUT_SCALE

    def summary(self, print_fn: Optional[Callable[[str], Any]] = None) -> None:
        """Prints the layers, their output shapes and parameter counts, as Keras'
        ``model.summary()`` does: with ``print`` unless ``print_fn`` is given (which
        receives the whole text, e.g. ``lines.append``)."""
        (print_fn or print)(self._summary_text())

    def _summary_text(self) -> str:
        rows = self._network.layers()
        lines = [f"Model {self.spec.name or '?'} from {self.source}",
                 f"input {self.input_shape}{', channels_first' if self.channels_first else ''}, "
                 f"pixels x {self.input_scale:g}"]
        width = max([len(f"{n} ({c})") for n, c, _, _ in rows] + [10])
        lines.append(f"{'layer':<{width}}  {'output shape':<20}{'params':>10}")
        for name, cls, shape, params in rows:
            lines.append(f"{name + ' (' + cls + ')':<{width}}  {str((None,) + tuple(shape)):<20}{params:>10,}")
        lines.append(f"total parameters: {self._network.params:,}")
        kind = self._network.output_kind
        if kind != "softmax" and len(self.output_shape) == 2:
            lines.append("outputs: " + ("sigmoids; probabilities are them divided by their sum" if kind == "sigmoid"
                                        else "scores (logits); probabilities are their softmax"))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Model({self.spec.name!r}, source={self.source!r}, input={self.input_shape}, classes={self.classes})"


def _image_shape(spec: ModelSpec, network: Any) -> Optional[tuple[int, int, int]]:
    """What image the model's input holds: an image input as it is; (h, w) as one
    channel; a flat input reshaped into an image by its first layer, or square."""
    shape = tuple(network.input_shape)
    if len(shape) == 3:
        return (shape[1], shape[2], shape[0]) if network.channels_first else shape
    if len(shape) == 2:
        return (shape[0], shape[1], 1)
    first = next((l for l in spec.layers if list(l.inputs) == [-1]), None)
    if first is not None and first.kind == "reshape" and len(first.target_shape) in (2, 3) and \
            -1 not in first.target_shape:
        t = tuple(first.target_shape)
        return (t[0], t[1], 1) if len(t) == 2 else ((t[1], t[2], t[0]) if network.channels_first else t)
    side = int(round(shape[0] ** 0.5))
    return (side, side, 1) if side * side == shape[0] else None


def load(path: Union[str, os.PathLike, None] = None, arch: Optional[str] = None) -> Model:
    """Loads and checks a model file: Keras (HDF5, .keras) or ONNX, told by its content.

    ``path``: a full-model ``.h5`` (Keras 1-3), a ``.keras`` archive, an ``.onnx`` file,
    or a weights-only file together
    with ``arch`` (a Keras JSON file or string, or a shipped model name). ``None``
    or a shipped name ("lenet5", "lenet-keras", "lenet-tf") loads shipped weights.
    Raises ModelFileError or UnsupportedModelError.
    """
    if path is None:
        path = DEFAULT_MODEL
    if isinstance(path, str) and path in SHIPPED_MODELS and not Path(path).exists():
        path = shipped_weights(path)
    if arch is None and _is_onnx(path):
        from . import onnx as onnx_format
        return Model(onnx_format.read_model(path))
    return Model(read_model(path, arch=arch))


def _is_onnx(path: Any) -> bool:
    """An ONNX file, told by its first bytes (lenet.onnx.looks_like_onnx); anything
    else, unreadable files included, goes to the Keras loader and its errors."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return False
    from .onnx import looks_like_onnx
    return looks_like_onnx(head, path)


# --- devices -----------------------------------------------------------------

def cuda_built() -> bool:
    """Whether this installation includes the CUDA backend module."""
    return _native.cuda_built()


def cuda_available() -> bool:
    """Whether ``device="cuda"`` can run here (backend loaded and a GPU present). Never raises.
    Without an NVIDIA driver it answers without loading the CUDA libraries."""
    try:
        return (_native.cuda_built() and _native.driver_present() and _native.cuda_module is not None
                and bool(_native.cuda_module.device_count() > 0))
    except Exception:
        return False


def _cuda_unavailable_reason() -> str:
    if _native.cuda_built() and not _native.driver_present():
        return "no NVIDIA driver (libcuda.so.1 not found)"
    if _native.cuda_module is None:
        return _native.cuda_missing_reason
    try:
        return _native.cuda_module.unavailable_reason() or "no CUDA device"
    except Exception as e:  # pragma: no cover - defensive: cuda_available() must not raise
        return str(e)


_auto_warned = False


def _resolve_device(device: str) -> str:
    global _auto_warned
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"unknown device {device!r} (expected 'auto', 'cpu' or 'cuda')")
    if device == "cuda" and not cuda_available():
        raise CudaError(f"device='cuda' requested but CUDA is not usable: {_cuda_unavailable_reason()}")
    if device == "auto":
        if cuda_available():
            return "cuda"
        if not _auto_warned and cuda_built():
            warnings.warn(f"lenet: using the CPU ({_cuda_unavailable_reason()})", RuntimeWarning, stacklevel=3)
        _auto_warned = True
        return "cpu"
    return device


def default_threads() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Engine:
    """A model ready to run on one device.

    ``weights``: a path, a shipped model name, a loaded ``Model``, or None for the
    default shipped model. ``device``: "auto" (CUDA when usable, else the CPU),
    "cpu" or "cuda". ``threads``: CPU worker threads (default: the CPUs available).
    ``input_scale`` overrides the pixel scale the file records. CUDA only:
    ``allow_tf32`` permits TF32 tensor-core math (faster, no longer within 1e-5 of
    Keras); ``cuda_graphs=False`` launches each layer instead of replaying a graph.
    CPU only: ``cpu_kernels`` is "auto" (the best hand-written kernels this CPU
    runs), "avx512", "avx2", "generic", or "blas" (im2col + OpenBLAS SGEMM: the
    reference path); ``lenet.cpu_kernel_sets()`` lists what this CPU runs.
    One Engine may be called from several threads at once.
    """

    def __init__(self, weights: Union[str, os.PathLike, Model, None] = None, device: str = "auto",
                 threads: Optional[int] = None, *, arch: Optional[str] = None,
                 input_scale: Optional[float] = None, allow_tf32: bool = False, cuda_graphs: bool = True,
                 cpu_kernels: str = "auto"):
        self.model = weights if isinstance(weights, Model) else load(weights, arch=arch)
        threads_asked = threads
        if threads is None:
            threads = default_threads()
        if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 1024:
            raise InputError(f"threads must be an integer in [1, 1024], got {threads!r}")
        if input_scale is not None and not (isinstance(input_scale, (int, float)) and np.isfinite(input_scale)):
            raise InputError(f"input_scale must be a finite number, got {input_scale!r}")
        self.input_scale = float(input_scale) if input_scale is not None else self.model.input_scale
        self.device = _resolve_device(device)
        if not isinstance(cpu_kernels, str):
            raise InputError(f"cpu_kernels must be a string, got {cpu_kernels!r}")
        self._executor = _core.Executor(self.model._network, self.device, threads, allow_tf32, cuda_graphs,
                                        cpu_kernels)
        # What a copy of this Engine in another process is made with (see __reduce__): the
        # device and thread count as asked ("auto" is decided again where it lands).
        self._made_with = {"device": device, "threads": threads_asked, "input_scale": self.input_scale,
                           "allow_tf32": allow_tf32, "cuda_graphs": cuda_graphs, "cpu_kernels": cpu_kernels}
        self._options = {"tf32": bool(allow_tf32) and self.device == "cuda",
                         "graphs": bool(cuda_graphs) and self.device == "cuda", "cpu_kernels": cpu_kernels}
        self._rank = len(self.model.input_shape)
        # Asked per call on the serving path: the core answers through pybind11 each time.
        self._nchw_images = self._rank == 4 and self.model.channels_first
        self._input_rest = tuple(self.model.input_shape[1:])

    @property
    def threads(self) -> int:
        return self._executor.threads

    @property
    def classes(self) -> int:
        return self.model.classes

    def summary(self, print_fn: Optional[Callable[[str], Any]] = None) -> None:
        """Prints the layers, output shapes and parameter counts, the device, and what the
        engine decided for it (see describe()), as Keras' ``model.summary()`` prints:
        with ``print`` unless ``print_fn`` is given (it receives the whole text)."""
        (print_fn or print)(self._summary_text())

    def _summary_text(self) -> str:
        lines = [self.model._summary_text(), f"device: {self._executor.description}"]
        d = self.describe()
        for plan in d["plans"]:
            if plan["execution"]:
                lines.append(f"batch capacity {plan['capacity']}: {plan['execution']} ({plan['why']})")
        for s in d["steps"]:
            facts = [f"{k}={s[k]}" for k in ("algorithm", "math", "fused", "workspace_bytes") if s.get(k) is not None]
            if facts:
                lines.append(f"  {s['op']:<12} {s['layers']:<24} " + ", ".join(facts) +
                             (f" ({s['fusion']})" if s.get("fusion") else ""))
        return "\n".join(lines)

    def describe(self) -> dict:
        """What the engine decided for its device, as data: ``device``,
        ``description``, ``tf32`` and ``graphs`` (as asked), ``plans`` (one per batch
        capacity planned so far: ``capacity``, ``execution`` "graph", "eager" or
        "pending" on CUDA, None on the CPU, and ``why``), and ``steps`` (per kernel
        of each plan: ``op``, ``layers``, ``capacity``, ``algorithm`` ("winograd"
        for the CPU's Winograd convolutions, None for its direct ones; cuDNN's on
        CUDA), and on CUDA ``math``, ``deterministic``, ``fused`` with ``fusion``
        saying why or why not, ``workspace_bytes``). Plans are made by calls: when none was made yet,
        one call on a batch of zeros makes the batch-1 plan."""
        plans = self._executor.describe()
        if not plans:
            self._executor.run(np.zeros((1,) + tuple(self.model.input_shape[1:]), np.float32))
            plans = self._executor.describe()
        rows = self.model._network.steps()
        out = {"device": self.device, "description": self._executor.description, "tf32": self._options["tf32"],
               "graphs": self._options["graphs"], "plans": [], "steps": []}
        for plan in plans:
            stream = plan["stream"]
            out["plans"].append({"capacity": plan["capacity"], "execution": stream.get("execution"),
                                 "why": stream.get("why", "")})
            for kernel in plan["kernels"]:
                first, last = kernel.pop("steps")
                out["steps"].append({
                    "op": "+".join(rows[i][0] for i in range(first, last + 1)),
                    "layers": ", ".join(rows[i][1] for i in range(first, last + 1)),
                    "capacity": plan["capacity"],
                    "algorithm": kernel.pop("algorithm", None), "fused": kernel.pop("fused", None),
                    "fusion": kernel.pop("fusion", ""), "workspace_bytes": kernel.pop("workspace_bytes", None),
                    **kernel})
        return out

    @property
    def input_shape(self) -> tuple:
        """The model's input shape as Keras gives it: (None, 28, 28, 1), (None, 784), ..."""
        return self.model.input_shape

    @property
    def output_shape(self) -> tuple:
        return self.model.output_shape

    def predict(self, x: Any, batch_size: Optional[int] = None, verbose: Any = "auto") -> np.ndarray:
        """The model's outputs for a batch in its own input shape (``input_shape``),
        exactly as Keras' ``model.predict(x)`` gives them for the same array:
        probabilities from a softmax, logits from a linear layer, sigmoids from a
        sigmoid; float32 (n, classes). ``x``: a NumPy array (any integer or float
        dtype, converted to float32 as Keras does), anything with ``__array__`` (a CPU
        torch tensor, a JAX array) or a nested list. ``batch_size``: inputs per call of
        the engine (all at once by default; the outputs are the same). ``verbose`` is
        accepted for Keras' signature and ignored (no progress bar)."""
        if type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous and batch_size is None and \
                x.ndim == self._rank:
            return self._executor.run(x)  # the common case: the core checks the shape
        return self._run(x, self._executor.run, batch_size, "predict")

    def predict_proba(self, x: Any, batch_size: Optional[int] = None) -> np.ndarray:
        """A distribution over the classes per input (see ``Result``): ``predict``'s
        outputs when the model ends in a softmax. A single input without the batch
        axis is accepted too."""
        if type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous and batch_size is None and \
                x.ndim == self._rank:
            return self._executor.probabilities(x)  # the common case: the core checks the shape
        return self._run(x, self._executor.probabilities, batch_size, "predict_proba")

    def _run(self, x: Any, run: Callable, batch_size: Optional[int], what: str) -> np.ndarray:
        """predict / predict_proba on anything but a ready batch: checked, converted, chunked."""
        if not isinstance(x, np.ndarray):
            converted = as_array(x, what) if not isinstance(x, (list, tuple)) else None
            if converted is None and isinstance(x, (list, tuple)):
                try:   # a nested list of numbers, as Keras takes it
                    converted = np.asarray(x, dtype=np.float32)
                except (ValueError, TypeError) as e:
                    raise InputError(f"{what}: a list that is not an array of numbers ({e})") from None
            if converted is None:
                raise InputError(f"{what} takes a NumPy array (or an array-like), got {type(x).__name__}")
            x = converted
        if x.dtype.kind not in "fiu" or x.dtype == np.bool_:
            raise InputError(f"{what} takes a float32 array, got dtype {x.dtype}")
        sample = tuple(self.input_shape[1:])
        if what == "predict_proba" and x.shape == sample:
            x = x[None]
        if x.shape[1:] != sample:   # before any copy: a huge or zero-stride view costs nothing
            raise InputError(f"{what}: expected an array of shape (n, {', '.join(map(str, sample))}) "
                             f"(the model's input shape {self.input_shape}), got {x.shape}")
        check_batch_size(batch_size)
        step = batch_size or max(1, len(x))
        parts = [run(np.ascontiguousarray(x[i:i + step], dtype=np.float32)) for i in range(0, len(x), step)]
        if not parts:
            return run(np.zeros((0,) + sample, np.float32))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    # One image gives a Result, a batch or an iterable a list (for editors and type checkers).
    @overload
    def infer(self, images: Union[str, os.PathLike, bytes, bytearray, memoryview], mode: str = ...,
              on_error: Optional[Callable[[InputError], Any]] = ..., *, channel_order: str = ...) -> Result: ...

    @overload
    def infer(self, images: Union[Sequence[Any], Iterator[Any]], mode: str = ...,
              on_error: Optional[Callable[[InputError], Any]] = ..., *, channel_order: str = ...) -> list[Result]: ...

    @overload
    def infer(self, images: Any, mode: str = ..., on_error: Optional[Callable[[InputError], Any]] = ..., *,
              channel_order: str = ...) -> Union[Result, list[Result]]: ...

    def infer(self, images: Any, mode: str = "auto", on_error: Optional[Callable[[InputError], Any]] = None, *,
              channel_order: str = "rgb") -> Union[Result, list[Result]]:
        """Classifies images: a path, bytes of an encoded image, an array (one image
        or a batch), a Pillow image, an array-like (``__array__``), or any iterable of
        these (a list, a generator; see ``lenet.preprocess``). One image gives a
        ``Result``; a batch or an iterable gives a list of ``Result``.

        ``mode``: "auto" (the default), "mnist" (the image already looks like MNIST:
        only resized) or "photo" (a photo, scan or drawing: the digit is found and
        normalized as MNIST was made); "auto" takes "mnist" for images of the model's
        size with a dark background, "photo" for the rest. ``on_error``: for an
        iterable, a callable given the InputError of each input that cannot be read or
        has no digit; that input is left out of the results instead of failing the
        call. ``channel_order``: "rgb" (the default) or "bgr" for colour arrays in
        OpenCV's order (files, bytes and Pillow images are decoded as RGB whatever it
        says). An iterable is read as ``infer_iter`` reads it (ahead, on the engine's
        threads, in bounded memory besides the results)."""
        items, single = pipeline.items_of(images)
        if single or isinstance(images, np.ndarray) or (not isinstance(images, (list, tuple))
                                                        and hasattr(images, "__array__")):
            # in memory already: one vectorized batch
            return self._classify(to_batch(images, self._image_shape(), self.input_scale,
                                           self._images_channels_first(), mode, on_error, self.threads,
                                           channel_order))
        out = []
        for part in pipeline.stream(self, items, mode=mode, errors="raise" if on_error is None else "yield",
                                    channel_order=channel_order):
            for r in part:
                if isinstance(r, InputError):
                    on_error(r)
                else:
                    out.append(r)
        return out

    __call__ = infer   # engine(image), as a Keras model or a torch module is called

    def infer_iter(self, inputs: Any, *, batch_size: Optional[int] = None, mode: str = "auto",
                   errors: str = "yield", channel_order: str = "rgb") -> Iterator[Union[Result, InputError]]:
        """Classifies any number of inputs lazily: yields, in input order, one ``Result``
        per image as soon as its batch is done, while the next inputs are read and
        decoded ahead on the engine's threads. ``inputs``: an iterable of paths, bytes
        or image arrays (a generator, a list, the lines of a file), or a batch array.
        Memory stays bounded whatever the number of inputs (a few batches and one
        decoded image per thread; results you keep are yours).

        An input that cannot be read, decoded, or holds no digit yields its
        ``InputError`` in its place (``error.source`` names it) and the stream goes
        on; ``errors="raise"`` raises it there instead. ``batch_size``: at most this
        many inputs per call of the engine (default 1024; fewer for large photos, whose
        batches are sized to about 50 ms of decoding). ``channel_order``: as for
        ``infer``. Closing the generator early stops the reading."""
        return pipeline.iterate(self, inputs, batch_size=batch_size, mode=mode, errors=errors,
                                channel_order=channel_order)

    def _stream(self, inputs: Any, batch_size: Optional[int] = None, mode: str = "auto") -> Iterator[list]:
        """``infer_iter``'s answers a batch at a time (lists of Result and InputError)."""
        return pipeline.stream(self, inputs, batch_size=batch_size, mode=mode)

    def __reduce__(self):
        """An Engine pickles as its model (the layer records and weights, not a path that
        may not exist where it lands) and the options it was made with, so it can be
        sent to process pools, joblib, Ray or Spark workers; each copy builds its own
        executor there (device "auto" and the thread count are decided again)."""
        return _engine, (self.model, self._made_with)

    def read_number(self, image: Any, *, channel_order: str = "rgb") -> Number:
        """Reads a number written left to right in one image (a path, bytes or an
        array): the digits are found and split (broken strokes merged, touching
        digits split where their shape allows) and classified in one batch. Raises
        InputError when there is no digit."""
        batch, boxes, source = number_batch(image, self._image_shape(), self.input_scale,
                                            self._images_channels_first(), self._probabilities, channel_order)
        return Number(self._classify(batch), boxes, source)

    def _image_shape(self) -> tuple[int, int, int]:
        shape = self.model.image_shape
        if shape is None:
            raise InputError(f"{self.model.source}: the model's input {self.input_shape} is not an image, and its "
                             "length is not a square: lenet cannot tell what size to draw images at; give it "
                             "arrays with predict()")
        if self.model.output_shape[1:] and len(self.model.output_shape) != 2:
            raise InputError(f"{self.model.source}: the model's output {self.model.output_shape} is not a vector "
                             "of class scores; predict() gives it")
        return shape

    def _images_channels_first(self) -> bool:
        return self._nchw_images

    def _scaled(self, x: np.ndarray) -> np.ndarray:
        """Prepared images (n, H, W, C) of pixels 0..255, scaled in place, as the network
        takes them ((n, C, H, W) for a channels_first model)."""
        x *= np.float32(self.input_scale)
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if self._images_channels_first() else x

    def _probabilities(self, x: np.ndarray) -> np.ndarray:
        """Probabilities for a batch of images as preprocess gives them (n, H, W, C), or
        (n, C, H, W) for a channels_first model: reshaped to the model's input."""
        return self._executor.probabilities(x.reshape((len(x),) + self._input_rest))

    def _classify(self, batch: Batch) -> Union[Result, list[Result]]:
        probs = self._probabilities(batch.x)
        probs.flags.writeable = False   # each Result's row is a read-only view
        results = [Result(int(np.argmax(p)), p, s, m, _input=row, _scale=self.input_scale)
                   for p, s, m, row in zip(probs, batch.sources, batch.modes, batch.hwc)]
        return results[0] if batch.single else results

    def __repr__(self) -> str:
        return f"Engine({self.model.source!r}, device={self.device!r}, threads={self.threads})"


def _engine(model: "Model", options: dict) -> Engine:
    return Engine(model, **options)


_default_engines: dict = {}
_default_lock = threading.Lock()


def _default_engine(weights: Union[str, os.PathLike, None], device: str, threads: Optional[int]) -> Engine:
    key = (os.fspath(weights) if weights is not None else None, device, threads)
    with _default_lock:
        engine = _default_engines.get(key)
        if engine is None:
            engine = _default_engines[key] = Engine(weights, device=device, threads=threads)
    return engine


@overload
def infer(images: Union[str, os.PathLike, bytes, bytearray, memoryview], *, mode: str = ...,
          weights: Union[str, os.PathLike, None] = ..., device: str = ..., threads: Optional[int] = ...,
          channel_order: str = ...) -> Result: ...


@overload
def infer(images: Union[Sequence[Any], Iterator[Any]], *, mode: str = ...,
          weights: Union[str, os.PathLike, None] = ..., device: str = ..., threads: Optional[int] = ...,
          channel_order: str = ...) -> list[Result]: ...


@overload
def infer(images: Any, *, mode: str = ..., weights: Union[str, os.PathLike, None] = ..., device: str = ...,
          threads: Optional[int] = ..., channel_order: str = ...) -> Union[Result, list[Result]]: ...


def infer(images: Any, *, mode: str = "auto", weights: Union[str, os.PathLike, None] = None, device: str = "auto",
          threads: Optional[int] = None, channel_order: str = "rgb") -> Union[Result, list[Result]]:
    """Classifies images with the shipped default model (or ``weights``) on the best
    available device (see ``Engine.infer`` for ``mode`` and ``channel_order``). The
    Engine is built on first use and reused."""
    return _default_engine(weights, device, threads).infer(images, mode, channel_order=channel_order)


def infer_iter(inputs: Any, *, batch_size: Optional[int] = None, mode: str = "auto", errors: str = "yield",
               weights: Union[str, os.PathLike, None] = None, device: str = "auto",
               threads: Optional[int] = None, channel_order: str = "rgb") -> Iterator[Union[Result, InputError]]:
    """``Engine.infer_iter`` on the engine ``infer`` uses (the shipped default model, or
    ``weights``, on the best available device): yields a Result (or an InputError in
    its place) per input, in input order, reading ahead in bounded memory."""
    return _default_engine(weights, device, threads).infer_iter(inputs, batch_size=batch_size, mode=mode,
                                                                errors=errors, channel_order=channel_order)


def read_number(image: Any, *, weights: Union[str, os.PathLike, None] = None, device: str = "auto",
                threads: Optional[int] = None, channel_order: str = "rgb") -> Number:
    """Reads a number written left to right in one image (see ``Engine.read_number``)
    with the shipped default model (or ``weights``), on the engine ``infer`` uses."""
    return _default_engine(weights, device, threads).read_number(image, channel_order=channel_order)
