"""lenet: a LeNet inference engine for Keras HDF5 models.

>>> import lenet
>>> r = lenet.infer("digit.png")        # shipped default weights, best device
>>> r.digit, r.probabilities
>>> eng = lenet.Engine("model.h5", device="cpu", threads=2)
>>> eng.predict_proba(x)                 # ready float32 batch -> (n, classes)
"""

from ._native import _core
from .default_engine import infer, infer_iter, read_number
from .engine import (
    DEFAULT_MODEL,
    Engine,
    Model,
    Number,
    Result,
    cuda_available,
    cuda_built,
    default_threads,
    load,
)
from .errors import (
    CudaError,
    Error,
    ImageTooLargeError,
    InputError,
    InputFileNotFoundError,
    ModelError,
    ModelFileError,
    ModelFileNotFoundError,
    UnsupportedModelError,
)
from .images import max_image_pixels, set_max_image_pixels
from .results import Skipped
from .shipped import SHIPPED_MODELS, shipped_weights

__version__ = _core.__version__


def cpu_kernel_sets() -> list:
    """The CPU kernel sets this CPU runs, best first ("avx512", "avx2", "generic" on
    x86-64; "neon", "generic" on aarch64),
    then "blas" (the im2col + OpenBLAS reference path): values for
    ``Engine(cpu_kernels=...)``."""
    return list(_core.cpu_kernel_sets())


def info() -> dict:
    """Version, backends built and usable, and the libraries they run on."""
    from . import _native

    out = {
        "version": __version__,
        "backends_built": ["cpu"] + (["cuda"] if cuda_built() else []),
        "cuda_available": cuda_available(),
        "cpu_blas": _core.blas_config(),
        "cpu_kernels": cpu_kernel_sets()[0],
        # What decodes 8-bit grayscale PNGs of the model's size with no Python per file
        # ("" when this build had no libpng: OpenCV decodes every file).
        "png_decoder": _core.png_decoder,
    }
    out["cuda_build"] = _core.cuda_build  # what the build decided, and why
    if _native.cuda_module is not None:
        out.update(_native.cuda_module.info())
    else:
        out["cuda_error"] = _native.cuda_missing_reason
    return out


__all__ = [
    "DEFAULT_MODEL",
    "SHIPPED_MODELS",
    "Engine",
    "Model",
    "Number",
    "Result",
    "Skipped",
    "infer",
    "infer_iter",
    "read_number",
    "load",
    "info",
    "shipped_weights",
    "max_image_pixels",
    "set_max_image_pixels",
    "cuda_available",
    "cuda_built",
    "cpu_kernel_sets",
    "default_threads",
    "Error",
    "ModelError",
    "ModelFileError",
    "ModelFileNotFoundError",
    "UnsupportedModelError",
    "InputError",
    "InputFileNotFoundError",
    "ImageTooLargeError",
    "CudaError",
]
