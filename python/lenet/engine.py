"""The user's surface: an Engine runs a model on a device; infer, infer_iter and
read_number classify images with the default engine."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any, Callable, Iterator, Optional, Sequence, Union, overload

import numpy as np

from . import paths, preprocess, routing, stream
from ._native import _core
from .device import cuda_available, cuda_built, default_threads
from .errors import Error, InputError
from .images import Named, Prepared, as_array, check_batch_size, is_one_image, label_of, prepare, prepare_number
from .images.decode import read_error
from .images.limits import MAX_FILE_BYTES, max_image_pixels
from .images.pixels import CLEAN_PAPER
from .model import DEFAULT_MODEL, Model, load
from .plans import describe_lines, describe_plans
from .results import Number, Result, answers, batch_results, result_of, results
from .shipped import NUMBER_RECHECK

__all__ = [
    "DEFAULT_MODEL",
    "Engine",
    "Model",
    "Number",
    "Result",
    "cuda_available",
    "cuda_built",
    "default_threads",
    "load",
]


_UINT8 = np.dtype(np.uint8)  # every uint8 array's dtype is this one object: `is` is the cheap test


class Engine:
    """A model ready to run on one device.

    ``weights``: a path, a shipped model name, a loaded ``Model``, or None for the
    default shipped model. ``device``: "auto" (CUDA when usable, else the CPU),
    "cpu" or "cuda". ``threads``: CPU worker threads (default: the CPUs available).
    How images' pixels are prepared for the model (``infer`` and the other image paths;
    ``predict`` takes the model's input as it is): 0..255 pixels times ``input_scale``,
    then ``(x - mean) / std`` per channel, as torchvision's ``Normalize`` and Keras'
    ``Normalization`` do (``mean``, ``std``: a number, or one per channel); each
    overrides what the file records (``preprocessing`` says what is used; a PyTorch
    MNIST model trained on ``Normalize((0.1307,), (0.3081,))``: ``mean=0.1307,
    std=0.3081``). CUDA only:
    ``allow_tf32`` permits TF32 tensor-core math (faster, no longer within 1e-5 of
    Keras); ``cuda_graphs=False`` launches each layer instead of replaying a graph;
    ``cuda_path`` is "auto" (a LeNet-sized chain of layers runs as one fused kernel
    of lenet's own, anything else on cuDNN + cuBLAS), "fused" (the fused kernel
    wherever it can run the network), "library" (cuDNN + cuBLAS always) or "fast"
    (docs/gpu.md: faster transfers, not yet run on a GPU); ``describe()`` says which
    each plan took, its transfer, and why. CPU only: ``cpu_kernels`` is
    "auto" (the best hand-written kernels this CPU runs), "avx512", "avx2",
    "neon" (aarch64), "generic", or "blas" (im2col + OpenBLAS SGEMM: the reference path);
    ``lenet.cpu_kernel_sets()`` lists what this CPU runs. ``precision``: "exact" (the default;
    docs/how-it-works.md#precision) or "fast" (the CPU's Winograd convolutions in float32:
    faster, answers several times further from the exact ones). The GPU ignores it.
    ``recheck_with``: the second reader of ``read_number``, which reads again the
    candidate digits this model is unsure of (weights as ``weights`` takes them, of the
    same image shape and classes; made and checked on first use); "auto" (the default): lenet-tf for
    the shipped lenet5, none for other models; None: none.
    One Engine may be called from several threads at once.

    ``close()`` (or a ``with`` block) releases what the engine holds (on CUDA: its
    handles, stream, graphs and device memory) now; engines still open when the
    interpreter exits are closed then, in order, while the CUDA runtime is still up.
    A closed engine raises ``lenet.Error`` when used.
    """

    def __init__(
        self,
        weights: Union[str, os.PathLike, Model, None] = None,
        device: str = "auto",
        threads: Optional[int] = None,
        *,
        arch: Optional[str] = None,
        input_scale: Optional[float] = None,
        mean: Union[float, Sequence[float], None] = None,
        std: Union[float, Sequence[float], None] = None,
        allow_tf32: bool = False,
        cuda_graphs: bool = True,
        cpu_kernels: str = "auto",
        cuda_path: str = "auto",
        recheck_with: Union[str, os.PathLike, Model, None] = "auto",
        precision: str = "exact",
    ):
        self.model = weights if isinstance(weights, Model) else load(weights, arch=arch)
        if isinstance(recheck_with, str) and recheck_with == "auto":
            shipped = DEFAULT_MODEL if weights is None else weights
            recheck_with = NUMBER_RECHECK.get(shipped) if isinstance(shipped, str) else None
        self._recheck_with = recheck_with
        self._recheck: Optional[Engine] = None
        self._recheck_lock = threading.Lock()
        threads_asked = threads
        if threads is None:
            threads = default_threads()
        if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 1024:
            raise InputError(f"threads must be an integer in [1, 1024], got {threads!r}")
        image = self.model.image_shape
        self.preprocessing = preprocess.resolve(
            input_scale, mean, std, self.model.preprocessing, image[2] if image else None
        )
        self.input_scale = self.preprocessing.scale
        for name, value in (("cpu_kernels", cpu_kernels), ("cuda_path", cuda_path), ("precision", precision)):
            if not isinstance(value, str):
                raise InputError(f"{name} must be a string, got {value!r}")
        options = (threads, allow_tf32, cuda_graphs, cpu_kernels, cuda_path, precision)
        self.device, self._executor = routing.executor_for(device, self.model.network, options)
        # What a copy of this Engine in another process is made with (see __reduce__): the
        # device and thread count as asked ("auto" is decided again where it lands).
        self._made_with = {
            "device": device,
            "threads": threads_asked,
            "input_scale": self.input_scale,
            "mean": self.preprocessing.mean,
            "std": self.preprocessing.std,
            "allow_tf32": allow_tf32,
            "cuda_graphs": cuda_graphs,
            "cpu_kernels": cpu_kernels,
            "cuda_path": cuda_path,
            "recheck_with": recheck_with,
            "precision": precision,
        }
        self._options = {
            "tf32": bool(allow_tf32) and self.device in ("cuda", "auto"),
            "graphs": bool(cuda_graphs) and self.device in ("cuda", "auto"),
            "precision": precision,
        }
        self._rank = len(self.model.input_shape)
        # Asked per call on the serving path: the core answers through pybind11 each time.
        self._input_rest = tuple(self.model.input_shape[1:])
        shape = self.model.image_shape
        # Rows (n, h, w, c) go to the network as they are in memory unless the model holds
        # several channels first.
        self._transpose_rows = shape is not None and shape[2] > 1 and self.model.images_channels_first
        self._scale32 = np.float32(self.input_scale)
        # infer's shortest way: one uint8 image of these shapes goes to the core as it is (a
        # one-channel model whose pixels only need scaling: the core scales uint8 itself).
        self._pixel_shapes = (
            ((shape[0], shape[1]), (shape[0], shape[1], 1))
            if shape is not None and shape[2] == 1 and self.preprocessing.plain and shape[0] > 1 and shape[1] > 1
            else ()
        )
        self._image_shape: Optional[tuple] = None  # image_shape, once checked
        self._threads = self._executor.threads
        _open_engines.add(self)

    def close(self) -> None:
        """Releases the executor (and on CUDA the GPU state) now; idempotent. A call
        running in another thread finishes first: it holds the executor until it returns."""
        if not isinstance(self._executor, _ClosedExecutor):
            self._executor = _ClosedExecutor(repr(self))
        _open_engines.discard(self)
        with self._recheck_lock:
            if self._recheck is not None:
                self._recheck.close()

    @property
    def closed(self) -> bool:
        return isinstance(self._executor, _ClosedExecutor)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def classes(self) -> int:
        return self.model.classes

    def summary(self, print_fn: Optional[Callable[[str], Any]] = None) -> None:
        """Prints the layers, output shapes and parameter counts, the device, and what the
        engine decided for it (see describe()), as Keras' ``model.summary()`` prints:
        with ``print`` unless ``print_fn`` is given (it receives the whole text)."""
        (print_fn or print)(self.summary_text())

    def summary_text(self) -> str:
        """The text ``summary`` prints."""
        head = [self.model.summary_text(self.preprocessing), f"device: {self._executor.description}"]
        return "\n".join(head + describe_lines(self.describe()))

    def describe(self) -> dict:
        """What the engine decided for its device, as data: ``device``,
        ``description``, ``tf32`` and ``graphs`` (as asked), ``plans`` (one per batch
        capacity planned so far: ``capacity``, ``execution`` "graph", "eager" or
        "pending" on CUDA, None on the CPU, and ``why``; ``kernels``: "network" when one
        fused kernel runs every layer, else "steps", and ``kernels_why``: why not, on
        CUDA; ``transfer`` and ``transfer_why``: how inputs and answers cross, on CUDA),
        and ``steps`` (per kernel
        of each plan: ``op``, ``layers``, ``capacity``, ``algorithm`` ("winograd"
        for the CPU's Winograd convolutions, None for its direct ones; cuDNN's on
        CUDA), and on CUDA ``math``, ``deterministic``, ``checked`` (how the
        algorithm's numbers were checked against IMPLICIT_GEMM), ``fused`` with ``fusion``
        saying why or why not, ``workspace_bytes``). Plans are made by calls: when none was made yet,
        one call on a batch of zeros makes the batch-1 plan. Routed (lenet.routing): each
        plan's ``device``, and ``routing`` (where each batch size goes, and why)."""
        return describe_plans(self._executor, self.model, self.device, self._options)

    @property
    def input_shape(self) -> tuple:
        """The model's input shape as Keras gives it: (None, 28, 28, 1), (None, 784), ..."""
        return self.model.input_shape

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes the model, with this engine's pixel preprocessing (scale, mean, std), as
        a .lenet file: what the C++ API loads (docs/cpp.md) and ``Engine(path)`` reads back
        (``Model.save``; UnsupportedModelError for an NHWC-image ONNX graph, whose layout
        the format cannot hold)."""
        self.model.save(path, self.preprocessing)

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
        if batch_size is None and self._as_is(x):
            return self._executor.run(x)  # the common case: the core checks the shape
        return self._run(x, self._executor.run, batch_size, "predict")

    def predict_proba(self, x: Any, batch_size: Optional[int] = None) -> np.ndarray:
        """A distribution over the classes per input (see ``Result``): ``predict``'s
        outputs when the model ends in a softmax. A single input without the batch
        axis is accepted too."""
        if batch_size is None and self._as_is(x):
            return self._executor.probabilities(x)  # the common case: the core checks the shape
        return self._run(x, self._executor.probabilities, batch_size, "predict_proba")

    def input_buffer(self, n: int, dtype: Any = np.float32) -> np.ndarray:
        """An empty array for ``n`` inputs (float32 as ``predict_proba`` takes them, or uint8
        rows (n, h, w, c) for ``row_probabilities``) that the engine reads without a copy of
        its own where it can: on CUDA pinned memory the GPU maps, read in place by
        ``cuda_path="fast"`` (docs/gpu.md). It lives as long as the array, after close() too."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise InputError(f"input_buffer takes a number of inputs >= 0, got {n!r}")
        shapes = {np.dtype(np.float32): tuple(self.input_shape[1:]), np.dtype(np.uint8): None}
        if np.dtype(dtype) not in shapes:
            raise InputError(f"input_buffer holds float32 inputs or uint8 rows, not {np.dtype(dtype)}")
        shape = shapes[np.dtype(dtype)] or self.image_shape
        return self._executor.host_array((n,) + tuple(shape), np.dtype(dtype))

    def _as_is(self, x: Any) -> bool:
        """Whether ``x`` goes to the core as it is: a C-contiguous float32 batch."""
        return type(x) is np.ndarray and x.dtype == np.float32 and x.flags.c_contiguous and x.ndim == self._rank

    def _run(self, x: Any, run: Callable, batch_size: Optional[int], what: str) -> np.ndarray:
        """predict / predict_proba on anything but a ready batch: checked, converted, chunked."""
        if not isinstance(x, np.ndarray):
            converted = as_array(x, what) if not isinstance(x, (list, tuple)) else None
            if converted is None and isinstance(x, (list, tuple)):
                try:  # a nested list of numbers, as Keras takes it
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
        if x.shape[1:] != sample:  # before any copy: a huge or zero-stride view costs nothing
            raise InputError(
                f"{what}: expected an array of shape (n, {', '.join(map(str, sample))}) "
                f"(the model's input shape {self.input_shape}), got {x.shape}"
            )
        check_batch_size(batch_size)
        step = batch_size or max(1, len(x))
        parts = [run(np.ascontiguousarray(x[i : i + step], dtype=np.float32)) for i in range(0, len(x), step)]
        if not parts:
            return run(np.zeros((0,) + sample, np.float32))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    # One image gives a Result, a batch or an iterable a list (for editors and type checkers).
    @overload
    def infer(
        self,
        images: Union[str, os.PathLike, bytes, bytearray, memoryview],
        mode: str = ...,
        on_error: Optional[Callable[[InputError], Any]] = ...,
        *,
        channel_order: str = ...,
    ) -> Result: ...

    @overload
    def infer(
        self,
        images: Union[Sequence[Any], Iterator[Any]],
        mode: str = ...,
        on_error: Optional[Callable[[InputError], Any]] = ...,
        *,
        channel_order: str = ...,
    ) -> list[Result]: ...

    @overload
    def infer(
        self,
        images: Any,
        mode: str = ...,
        on_error: Optional[Callable[[InputError], Any]] = ...,
        *,
        channel_order: str = ...,
    ) -> Union[Result, list[Result]]: ...

    def infer(
        self,
        images: Any,
        mode: str = "auto",
        on_error: Optional[Callable[[InputError], Any]] = None,
        *,
        channel_order: str = "rgb",
    ) -> Union[Result, list[Result]]:
        """Classifies images: a path (a file, or a directory or a glob, read as lenet-cli
        reads them), bytes of an encoded image, an array (one image or a batch), a Pillow
        image, an array-like (``__array__``), or any iterable of these (see ``lenet.images``).
        One image gives a ``Result``; anything else a list of ``Result``.

        ``mode``: "auto" (the default), "mnist" (the image already looks like MNIST:
        only resized) or "photo" (a photo, scan or drawing: the digit is found and
        normalized as MNIST was made); "auto" takes "mnist" for images of the model's size
        with a dark background (and, read as its negative, for a clean drawing of that size
        dark on white paper), "photo" for the rest. ``on_error``: for an iterable, a callable
        given the InputError of each input that cannot be read or has no digit (a directory
        without images, a glob without a match), left out of the results instead of failing
        the call. ``channel_order``: "rgb" (the default) or "bgr" for colour arrays in
        OpenCV's order (files, bytes and Pillow images are decoded as RGB whatever it
        says). An iterable is read as ``infer_iter`` reads it (ahead, on the engine's
        threads, in bounded memory besides the results)."""
        if self._pixel_shapes and mode in ("auto", "mnist") and channel_order in ("rgb", "bgr"):
            # The shortest ways, for the commonest calls: one uint8 digit, one file.
            if type(images) is np.ndarray:
                got = self._pixel_array(images, mode) if images.dtype is _UINT8 else None
                if got is not None:
                    return got
            elif isinstance(images, (str, os.PathLike)):
                got = self._one_file(images, mode, channel_order)
                if got is not None:
                    return got
        if (
            type(images) is np.ndarray
            or not isinstance(images, (list, tuple))
            and (stream.one_input(images) or hasattr(images, "__array__"))
            and not (isinstance(images, (str, os.PathLike)) and paths.names_many(images))
        ):
            # In memory already (one input, or one array of images): one vectorized batch.
            label = "<array>" if type(images) is np.ndarray else label_of(images, None)
            return self._in_memory(images, label, mode, channel_order)
        out = []
        for part in stream.batches(
            self, images, mode=mode, errors="raise" if on_error is None else "yield", channel_order=channel_order
        ):
            for r in part:
                if isinstance(r, InputError):
                    on_error(r)
                else:
                    out.append(r)
        return out

    __call__ = infer  # engine(image), as a Keras model or a torch module is called

    def _in_memory(self, item: Any, label: str, mode: str, channel_order: str) -> Union[Result, list[Result]]:
        """infer of one input (a path, bytes, an image or a batch array): one vectorized batch."""
        got = prepare([item], [label], self.image_shape, mode, self._threads, channel_order)
        if got.errors:
            raise got.errors[0][1]
        out = results(got.rows, self.row_probabilities(got.rows.x))
        return out[0] if got.single else out

    # infer's short ways give the general path's answer (the same rows, the same core calls),
    # which tests/api/test_fast_paths.py holds them to, in as few steps as there are.

    def _pixel_array(self, a: np.ndarray, mode: str) -> Union[Result, list[Result], None]:
        """One uint8 image (h, w[, 1]) or a batch (n, h, w[, 1]) of the model's size that takes
        the mnist path, in one core call (a batch's Results over its probabilities, as results()
        makes them); None for anything else: the general path then decides, and says what is wrong."""
        h, w = self._pixel_shapes[0]
        if h * w > max_image_pixels():
            return None
        if a.shape in self._pixel_shapes:
            return self._mnist_result(a, "<array>", mode == "auto")
        if a.shape[1:] not in self._pixel_shapes or not len(a) or is_one_image(a):
            return None
        x = a.reshape(len(a), h, w, 1)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if mode == "auto" and not _core.dark_ground(x).all():
            return None
        probabilities = self._executor.pixel_probabilities(x.reshape((len(a),) + self._input_rest), self._scale32)
        return batch_results(probabilities, x, None, "mnist", label="<array>")

    def _one_file(self, path: Union[str, os.PathLike], mode: str, channel_order: str) -> Optional[Result]:
        """One file: read, and decoded by the core when it is a gray PNG of the model's size (as
        prepare's PNG lane does); anything else goes on to the general path with its bytes.
        None for a directory or a glob (asked once the path could not be read), an iterable."""
        label = os.fspath(path)
        h, w = self._pixel_shapes[0]
        if not _core.png_decoder or h * w > max_image_pixels():
            return None if paths.names_many(path) else self._in_memory(path, label, mode, channel_order)
        got, pixels, _ = _core.read_gray_images([os.fsencode(path)], MAX_FILE_BYTES, h, w)
        data = got[0]
        if isinstance(data, int):
            if paths.names_many(path):
                return None
            raise read_error(label, data)
        if data is not None:  # read, but not a PNG the core decodes
            return self._in_memory(Named(data, label), label, mode, channel_order)
        got = self._mnist_result(pixels[0], label, mode == "auto")
        if got is None:  # not MNIST-like: the photo path
            return self._in_memory(Named(pixels[0], label), label, mode, channel_order)
        return got

    def _mnist_result(self, image: np.ndarray, label: str, auto: bool) -> Optional[Result]:
        """The Result of one uint8 image (h, w[, 1]) on the mnist path, in one call of the core;
        when ``auto``, None unless its ground is dark or it is a clean drawing dark on light
        (``images.pixels.clean_drawing``: read as its negative, as prepare reads it)."""
        got = self._executor.pixel_answer(image, self._scale32, auto, CLEAN_PAPER if auto else 0)
        if got is None:
            return None
        return result_of(got[0], got[1], label, "mnist", 255 - image if got[2] else image)

    def infer_iter(
        self,
        inputs: Any,
        *,
        batch_size: Optional[int] = None,
        mode: str = "auto",
        errors: str = "yield",
        channel_order: str = "rgb",
    ) -> Iterator[Union[Result, InputError]]:
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
        return stream.iterate(
            self, inputs, batch_size=batch_size, mode=mode, errors=errors, channel_order=channel_order
        )

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
        InputError when there is no digit. Candidate digits this model is unsure of
        are read by ``recheck_with``'s model instead (their probabilities are its)."""
        read = self.row_probabilities
        if self._recheck_with is not None:
            from .images.number import rechecked

            read = rechecked(read, self._second_reader)
        rows, found, source = prepare_number(image, self.image_shape, read, channel_order)
        return Number(results(rows, read(rows.x)), found.boxes, source, found.skipped, found.runner_up, found.margin)

    def _second_reader(self) -> Callable[[np.ndarray], np.ndarray]:
        """``recheck_with``'s engine's row_probabilities, the engine made on first use on
        this one's device and options."""
        with self._recheck_lock:
            if self._recheck is None:
                same = ("threads", "allow_tf32", "cuda_graphs", "cpu_kernels", "cuda_path", "precision")
                options = {k: self._made_with[k] for k in same}
                second = Engine(self._recheck_with, device=self.device, recheck_with=None, **options)
                if second.model.image_shape != self.model.image_shape or second.classes != self.classes:
                    second.close()
                    raise InputError(
                        f"recheck_with: {second.model.spec.source} takes {second.model.image_shape} images "
                        f"into {second.classes} classes; this engine's model {self.model.image_shape} "
                        f"into {self.classes}"
                    )
                self._recheck = second
            return self._recheck.row_probabilities

    # --- the seam from images to answers: what infer, infer_iter, the server, the CLI
    # and Ray share (images.prepare makes the rows, results.answers the answers).

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """(height, width, channels) of the images this engine classifies: what
        ``images.prepare`` draws inputs at. InputError for a model whose input is not an
        image (a flat input of a length that is not a square) or whose output is not a
        vector of class scores: ``predict`` serves those."""
        if self._image_shape is not None:
            return self._image_shape
        shape = self.model.image_shape
        if shape is None:
            raise InputError(
                f"{self.model.source}: the model's input {self.input_shape} is not an image, and its "
                "length is not a square: lenet cannot tell what size to draw images at; give it "
                "arrays with predict()"
            )
        if self.model.output_shape[1:] and len(self.model.output_shape) != 2:
            raise InputError(
                f"{self.model.source}: the model's output {self.model.output_shape} is not a vector "
                "of class scores; predict() gives it"
            )
        self._image_shape = shape
        return shape

    def row_probabilities(self, rows: np.ndarray) -> np.ndarray:
        """The probabilities of prepared rows (``images.Prepared.x``: (n, h, w, c) pixels
        0..255, uint8 or float32), scaled by ``input_scale`` and laid out as the model
        takes them. uint8 rows travel to the core as bytes and are scaled there (the
        same float32 values). Rows of several chunks may be concatenated first (the
        server's batches)."""
        n = len(rows)
        if rows.dtype == np.uint8 and self.preprocessing.plain:
            if self._transpose_rows:  # a channels_first model of several channels: (n, c, h, w)
                rows = rows.transpose(0, 3, 1, 2)
            return self._executor.pixel_probabilities(
                np.ascontiguousarray(rows).reshape((n,) + self._input_rest), self._scale32
            )
        return self._executor.probabilities(self._scaled(rows))

    def model_input(self, rows: np.ndarray) -> np.ndarray:
        """Prepared rows (pixels 0..255) as the array ``predict`` takes: float32, prepared
        as ``preprocessing`` says, in the model's input shape."""
        return self._scaled(rows)

    def _scaled(self, rows: np.ndarray) -> np.ndarray:
        x = self.preprocessing.apply(rows)  # per channel: the rows' last axis
        if self._transpose_rows:  # a channels_first model of several channels: (n, c, h, w)
            x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
        return x.reshape((len(x),) + self._input_rest)

    def answer(self, prepared: Prepared, inputs: Optional[int] = None) -> list[Union[Result, InputError]]:
        """The answers of a prepared chunk in input order: each input's Results (one per
        image it held) or its InputError in its place (see ``results.answers``)."""
        return answers(prepared, self.row_probabilities(prepared.rows.x), inputs)

    def __repr__(self) -> str:
        return f"Engine({self.model.source!r}, device={self.device!r}, threads={self.threads})"


class _ClosedExecutor:
    """Stands in for the executor of a closed Engine: any use says so."""

    def __init__(self, engine: str):
        self._engine = engine

    def __getattr__(self, name):
        raise Error(f"{self._engine} is closed (Engine.close(), a with block, or interpreter exit)")


# Engines not yet closed, closed at interpreter exit: atexit runs before the
# interpreter tears modules down, so the executors (and the CUDA backend's handles,
# streams, graphs and memory) are released in order while the CUDA runtime is up,
# and a sanitizer run of a script that keeps an engine to the end reports no leak.
_open_engines: "weakref.WeakSet[Engine]" = weakref.WeakSet()


@atexit.register
def _close_open_engines() -> None:
    for engine in list(_open_engines):
        engine.close()


def _engine(model: "Model", options: dict) -> Engine:
    return Engine(model, **options)
