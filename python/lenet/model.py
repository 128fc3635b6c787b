"""A model file, loaded and checked: its layers on the core's Network, its input and
output shapes, the images it reads."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ._native import _core
from .errors import UnsupportedModelError
from .preprocess import Preprocessing
from .shipped import SHIPPED_MODELS, shipped_model_file, shipped_weights
from .spec import ModelSpec

DEFAULT_MODEL = "lenet5"
# Pixel scale assumed for a file that does not record one (lenet_input_scale) and
# does not start with a Rescaling layer: Keras MNIST models are almost always
# trained on x / 255.
DEFAULT_INPUT_SCALE = 1.0 / 255.0


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

    def __reduce__(self):  # its spec: the layer records and their weights (lenet.spec)
        return Model, (self.spec,)

    @property
    def source(self) -> str:
        return self.spec.source

    @property
    def network(self):
        """The core's checked and lowered network (``lenet._core.Network``): its layers,
        steps, parameters; what an Executor runs."""
        return self._network

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
    def images_channels_first(self) -> bool:
        """Whether the model takes images as (channels, height, width): a channels_first
        model, unless it is an ONNX file whose input is NHWC (transposed in the graph)."""
        return self.channels_first and self.spec.extra.get("input_layout") != "nhwc"

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
        ``lenet_input_scale``, 1.0 when a Keras model starts with a Rescaling or
        Normalization layer, else 1/255 (an ONNX graph that normalizes its input does so
        to tensors of 0..1, as torchvision's ToTensor makes them)."""
        if self.spec.input_scale is not None:
            return float(self.spec.input_scale)
        if self.spec.extra.get("format") != "onnx" and any(
            l.kind in ("rescaling", "normalization") and list(l.inputs) == [-1] for l in self.spec.layers
        ):
            return 1.0
        return DEFAULT_INPUT_SCALE

    def save(self, path: Union[str, os.PathLike], preprocessing: Optional[Preprocessing] = None) -> None:
        """Writes the model as lenet's own file (.lenet): its checked layer records and
        weights, input shape, how its pixels are prepared (``preprocessing``'s or this
        model's: a scale, and a mean and standard deviation per channel), name and the name
        (not the folders) of the file it came from (for a model read from a .lenet file, the
        one that file was made from: saving again changes nothing), in the versioned format the C++ API
        loads (``lenet::Engine``, docs/cpp.md) and ``load`` reads back, to the bit, behind a
        checksum. Checked by the reader before a byte is written (ModelFileError for what it
        would refuse), written to a new temporary file beside ``path``, flushed to the disk,
        then renamed over ``path``.

        A model whose images are NHWC in an NCHW graph (an ONNX file with a Transpose
        after its input) is refused rather than written without that (its file would
        feed it other inputs)."""
        prep = self.preprocessing if preprocessing is None else preprocessing
        if self.spec.extra.get("input_layout") == "nhwc":
            raise UnsupportedModelError(
                f"{self.source}: cannot be saved as a .lenet file: its images are NHWC while its graph is NCHW "
                "(a Transpose after the input), and lenet's own file records no image layout; run this model "
                "from its own file"
            )
        mean, std = ([], []) if prep.plain else (list(prep.mean), list(prep.std))
        if len(mean) != len(std):  # one value for every channel beside one per channel: the file holds pairs
            n = max(len(mean), len(std))
            mean, std = (v * n if len(v) == 1 else v for v in (mean, std))
        _core.write_model_file(
            os.fspath(path),
            self.spec.layers,
            list(self.spec.input_shape),
            prep.scale,
            self.spec.name,
            self.spec.extra.get("saved_from") or self.source,  # a .lenet file's own origin, kept
            mean,
            std,
        )

    @property
    def preprocessing(self) -> Preprocessing:
        """How the file says its images' pixels are prepared: ``input_scale``, and the mean
        and standard deviation an ONNX file records in its metadata (``lenet_mean``,
        ``lenet_std``; 0 and 1 when it does not). ``Engine(mean=, std=)`` overrides them."""
        return Preprocessing(
            self.input_scale, tuple(self.spec.extra.get("mean", (0.0,))), tuple(self.spec.extra.get("std", (1.0,)))
        )

    def summary(self, print_fn: Optional[Callable[[str], Any]] = None) -> None:
        """Prints the layers, their output shapes and parameter counts, as Keras'
        ``model.summary()`` does: with ``print`` unless ``print_fn`` is given (which
        receives the whole text, e.g. ``lines.append``)."""
        (print_fn or print)(self.summary_text())

    def summary_text(self, preprocessing: Optional[Preprocessing] = None) -> str:
        """The text ``summary`` prints; ``preprocessing``: the one in use where it is not the
        file's (an Engine made with ``mean=``/``std=``)."""
        rows = self._network.layers()
        lines = [
            f"Model {self.spec.name or '?'} from {self.source}",
            f"input {self.input_shape}{', channels_first' if self.channels_first else ''}, "
            f"pixels: {preprocessing or self.preprocessing}",
        ]
        width = max([len(f"{n} ({c})") for n, c, _, _ in rows] + [10])
        lines.append(f"{'layer':<{width}}  {'output shape':<20}{'params':>10}")
        for name, cls, shape, params in rows:
            lines.append(f"{name + ' (' + cls + ')':<{width}}  {str((None,) + tuple(shape)):<20}{params:>10,}")
        lines.append(f"total parameters: {self._network.params:,}")
        kind = self._network.output_kind
        if kind != "softmax" and len(self.output_shape) == 2:
            lines.append(
                "outputs: "
                + {
                    "sigmoid": "sigmoids; probabilities are them divided by their sum",
                    "log_softmax": "log-probabilities (log_softmax); probabilities are their exponentials",
                }.get(kind, "scores (logits); probabilities are their softmax")
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Model({self.spec.name!r}, source={self.source!r}, input={self.input_shape}, classes={self.classes})"


def _image_shape(spec: ModelSpec, network: Any) -> Optional[tuple[int, int, int]]:
    """What image the model's input holds: the core's answer (Network::image, which the C++
    API gives too), but for an ONNX graph of Keras' layout (NHWC images transposed in the
    graph), which only the loader knows."""
    shape = tuple(network.input_shape)
    if len(shape) == 3 and spec.extra.get("input_layout") == "nhwc":
        return shape
    return network.image_shape


def load(path: Union[str, os.PathLike, None] = None, arch: Optional[str] = None) -> Model:
    """Loads and checks a model file: Keras (HDF5, .keras), ONNX or lenet's own (.lenet,
    written by ``Model.save``), told by its content.

    ``path``: a full-model ``.h5`` (Keras 1-3), a ``.keras`` archive, an ``.onnx`` file,
    a ``.lenet`` file, or a weights-only file together
    with ``arch`` (a Keras JSON file or string, or a shipped model name). ``None``
    or a shipped name ("lenet5", "lenet-keras", "lenet-tf") loads shipped weights.
    Raises ModelFileError or UnsupportedModelError.
    """
    if path is None:
        path = DEFAULT_MODEL
    if isinstance(path, str) and path in SHIPPED_MODELS and not Path(path).exists():
        path = (arch is None and shipped_model_file(path)) or shipped_weights(path)
    head = _head(path)
    if arch is None and head is not None and (_core.is_model_file(head) or str(path).endswith(".lenet")):
        layers, input_shape, scale, mean, std, name, source, version = _core.read_model_file(os.fspath(path))
        # The name of the file it was saved from is kept for messages; this file is where it loads from.
        spec = ModelSpec(list(layers), tuple(input_shape), scale, name, os.fspath(path), extra={"format": "lenet"})
        spec.extra["saved_from"] = source
        spec.extra["file_version"] = version  # 1 and 2: written before the checksum
        if mean:
            spec.extra.update(mean=tuple(mean), std=tuple(std))
        return Model(spec)
    if arch is None and _is_onnx(path, head):
        from . import onnx as onnx_format

        return Model(onnx_format.read_model(path))
    from .keras import read_model  # h5py and the Keras loader, for Keras files only

    return Model(read_model(path, arch=arch))


def _head(path: Any) -> Optional[bytes]:
    """A file's first 8 bytes; None for anything unreadable (the Keras loader then says why)."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    try:  # O_NONBLOCK: a FIFO opens without waiting for a writer (and is no model file)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return os.read(fd, 8) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _is_onnx(path: Any, head: Optional[bytes]) -> bool:
    """An ONNX file, told by its first bytes (lenet.onnx.looks_like_onnx); anything
    else, unreadable files included, goes to the Keras loader and its errors."""
    if head is None:
        return False
    from .onnx import looks_like_onnx

    return looks_like_onnx(head, path)
