"""The exceptions lenet raises. Every error lenet raises on purpose is a ``lenet.Error``.

The C++ core throws the matching C++ types (csrc/net/errors.h); the binding
translates each to the class of the same name here, keeping the message.
"""

import errno


class Error(Exception):
    """Base class of every error lenet raises."""


class ModelError(Error):
    """A model cannot be used: see the two subclasses."""


class ModelFileError(ModelError, ValueError):
    """A model file is missing, unreadable, corrupt or inconsistent.

    The message names the file and what is wrong: not HDF5, truncated, a
    missing weight, a weight of the wrong shape, an architecture whose shapes
    do not fit together.
    """


class UnsupportedModelError(ModelError):
    """A well-formed model uses a layer or an option lenet does not implement.

    The message names the layer, its Keras class and the file.
    """


class InputError(Error, ValueError):
    """An image or array cannot be classified: wrong type, shape, dtype or values,
    or an image file that cannot be read or decoded. The message names the input;
    ``source`` is the input's label (its path, "<input 3>", ...) where the error is
    about one input of several, else None."""

    source = None


class ImageTooLargeError(InputError):
    """An image (or a file) larger than the limits allow (``max_image_pixels``, the file
    size limit): refused before its pixels are allocated."""


class _NotFound:
    """A lenet error that is also the built-in FileNotFoundError: the message as given
    (not OSError's "[Errno 2] ..." form), ``errno`` ENOENT and ``filename`` set."""

    def __init__(self, message: str, filename: str):
        super().__init__(message)
        self.errno, self.filename = errno.ENOENT, filename

    def __str__(self) -> str:
        return self.args[0]

    def __reduce__(self):
        return type(self), (self.args[0], self.filename), self.__dict__


class InputFileNotFoundError(_NotFound, InputError, FileNotFoundError):
    """An input image file that does not exist: an ``InputError`` that ``except
    FileNotFoundError`` (and ``except OSError``) also catches; ``filename`` is the path."""


class ModelFileNotFoundError(_NotFound, ModelFileError, FileNotFoundError):
    """A model file that does not exist: a ``ModelFileError`` that ``except
    FileNotFoundError`` also catches; ``filename`` is the path."""


class CudaError(Error):
    """The CUDA backend is not built or not usable here, or a CUDA, cuDNN or
    cuBLAS call failed. The message carries the call, file:line and the
    library's own error string."""


__all__ = [
    "Error",
    "ModelError",
    "ModelFileError",
    "UnsupportedModelError",
    "InputError",
    "InputFileNotFoundError",
    "ImageTooLargeError",
    "ModelFileNotFoundError",
    "CudaError",
]
