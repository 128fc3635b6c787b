"""Type stubs for lenet._core, the C++ core (csrc/bindings/: core_module.cpp and a bind_*.cpp per part).

The LayerSpec fields mirror LENET_LAYER_FIELDS (csrc/net/layer.h);
tests/core/test_core_api.py checks them against the module.
"""

from typing import Any

import numpy as np
import numpy.typing as npt

__version__: str

class LayerSpec:
    kind: str  # the layer table's name of the layer: conv2d, dense, batch_norm, ...
    name: str  # the Keras layer name, for messages
    keras_class: str  # the Keras class name, for messages
    inputs: list[int]  # indices of the layers this one reads, in order; -1 is the model input
    kernel: tuple[int, int]  # conv kernel_size or pool_size (h, w)
    strides: tuple[int, int]  # conv or pool strides (h, w)
    dilation: tuple[int, int]  # conv dilation_rate (h, w)
    same_padding: bool  # padding='same' (TensorFlow's rule: the extra pixel after)
    filters: int  # conv output channels
    units: int  # dense outputs
    groups: int  # conv groups
    depth_multiplier: int  # depthwise / separable conv channels per input channel
    use_bias: bool  # conv / dense: a bias weight is present
    pad: tuple[int, int, int, int]  # zero padding or cropping; pooling: absent pixels (top, bottom, left, right)
    activation: str  # the activation: linear, relu, elu, gelu, ... (LENET_ACTIVATIONS, network.h)
    alpha: float  # activation parameter: relu negative slope, elu alpha, hard sigmoid slope
    beta: float  # activation parameter: hard sigmoid offset
    max_value: float  # relu ceiling
    threshold: float  # relu threshold
    scale: float  # rescaling: y = x * scale + offset
    offset: float  # rescaling offset
    epsilon: float  # batch_norm / layer_norm / normalization epsilon
    bn_center: bool  # batch_norm / layer_norm: a beta weight is present
    bn_scale: bool  # batch_norm / layer_norm: a gamma weight is present
    axes: list[
        int
    ]  # Keras axes (batch axis 0): softmax, concatenate, batch_norm, normalization; prelu shared_axes; permute dims
    target_shape: list[int]  # reshape: the per-sample shape (-1 for one inferred dimension)
    size: tuple[int, int]  # resizing: output (height, width)
    interpolation: str  # resizing: bilinear or nearest
    crop_to_aspect_ratio: bool  # resizing: crop to the output's aspect ratio first
    antialias: bool  # resizing: antialiased downscaling
    keepdims: bool  # global pooling: keep the 1x1 spatial dimensions
    quant_scale: float  # quantize: the step between its integers; 0: each sample's own, from its range
    zero_point: int  # quantize: the integer that stands for 0
    quant_range: tuple[int, int]  # quantize: the smallest and largest integer (uint8: 0, 255; int8: -128, 127)
    integers: bool  # quantize: q - zero_point, not its value; conv2d / dense: integer inputs, weights, summed exactly
    data_format: str  # the layer's data_format: channels_last, channels_first, or empty
    def __init__(self) -> None: ...
    def set_weight(self, name: str, array: npt.ArrayLike) -> None: ...
    def weight_names(self) -> list[str]: ...
    def weight(self, name: str) -> npt.NDArray[np.float32] | None: ...
    @staticmethod
    def fields() -> list[tuple[str, str, str]]: ...

class Network:
    def __init__(self, layers: list[LayerSpec], input_shape: list[int], source: str) -> None: ...
    @property
    def input_shape(self) -> tuple[int, ...]: ...
    @property
    def output_shape(self) -> tuple[int, ...]: ...
    @property
    def output_size(self) -> int: ...
    @property
    def output_kind(self) -> str: ...
    @property
    def channels_first(self) -> bool: ...
    @property
    def params(self) -> int: ...
    @property
    def macs(self) -> int: ...
    def layers(self) -> list[tuple[str, str, tuple[int, ...], int]]: ...
    def steps(self) -> list[tuple[str, str, str, tuple[int, int, int]]]: ...

def expected_weights(
    layers: list[LayerSpec], input_shape: list[int], source: str
) -> list[list[tuple[str, tuple[int, ...], bool, bool]]]: ...
def read_model_file(
    path: str,
) -> tuple[list[LayerSpec], tuple[int, ...], float, tuple[float, ...], tuple[float, ...], str, str, int]: ...
def write_model_file(
    path: str,
    layers: list[LayerSpec],
    input_shape: list[int],
    input_scale: float,
    name: str,
    source: str,
    mean: list[float] = ...,
    std: list[float] = ...,
) -> None: ...
def preparation_problem(scale: float, mean: list[float], std: list[float]) -> str: ...
def is_model_file(head: bytes) -> bool: ...
def layer_kinds() -> list[str]: ...
def activations() -> list[str]: ...
def activation_monotonic(name: str, alpha: float = 0.0) -> bool: ...
def limits() -> dict[str, int]: ...

class Executor:
    def __init__(
        self,
        network: Network,
        device: str,
        threads: int,
        allow_tf32: bool = False,
        cuda_graphs: bool = True,
        cpu_kernels: str = "auto",
        cuda_path: str = "auto",
    ) -> None: ...
    def run(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]: ...
    def probabilities(self, x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]: ...
    def pixel_probabilities(self, pixels: npt.NDArray[np.uint8], scale: float) -> npt.NDArray[np.float32]: ...
    def describe(self) -> list[dict[str, Any]]: ...
    @property
    def device(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def threads(self) -> int: ...

def blas_config() -> str: ...
def cpu_kernel_sets() -> list[str]: ...
def mac_rate(threads: int = 1, seconds: float = 0.2) -> float: ...
def read_files(paths: list[bytes], max_bytes: int) -> list[bytes | int]: ...
def read_gray_images(
    paths: list[bytes], max_bytes: int, height: int, width: int
) -> tuple[list[bytes | int | None], np.ndarray, np.ndarray]: ...
def dark_ground(pixels: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]: ...
def decode_gray_pngs(items: list[object], height: int, width: int) -> tuple[np.ndarray, np.ndarray]: ...

png_decoder: str
cuda_build: str  # what the build decided about the CUDA backend, in words

def backend_registered(name: str) -> bool: ...
