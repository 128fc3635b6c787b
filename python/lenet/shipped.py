"""The models lenet ships, in weights/: each a Keras HDF5 file (``shipped_weights``: the file
Keras loads, the reference every test compares with), and the default one also as lenet's
own file written from it (``shipped_model_file``), which the core reads without HDF5 or the
Keras loader: the default call's start is shorter by their import and parse.
tests/api/test_shipped.py holds the copy to what ``Model.save`` writes from the HDF5 file
today, byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .errors import ModelFileError

SHIPPED_MODELS = ("lenet5", "lenet-keras", "lenet-tf")
# The shipped models that also ship as .lenet files (DEFAULT_MODEL's the one that matters).
LENET_FILES = ("lenet5",)
# read_number's second reader of each shipped model that has one: the candidate digits it
# is unsure of are read again by the larger network (images/number.py's RECHECK_BELOW).
NUMBER_RECHECK = {"lenet5": "lenet-tf"}


def _find(name: str, suffix: str) -> Optional[Path]:
    package = Path(__file__).resolve().parent
    # Installed: the package's weights/ (CMake installs them there). An editable install runs
    # the checkout's python/lenet/, beside which the checkout keeps them: weights/.
    for folder in (package / "weights", package.parent.parent / "weights"):
        if (folder / f"{name}{suffix}").is_file():
            return folder / f"{name}{suffix}"
    return None


def shipped_weights(name: str) -> Path:
    """Path of the shipped Keras file (full-model .h5) of ``name`` (one of ``SHIPPED_MODELS``)."""
    if name not in SHIPPED_MODELS:
        raise ModelFileError(f"unknown shipped model {name!r}; the shipped models are {', '.join(SHIPPED_MODELS)}")
    path = _find(name, ".h5")
    if path is None:
        path = Path(__file__).resolve().parent / "weights" / f"{name}.h5"
        raise ModelFileError(f"{path}: the shipped model file {name!r} is missing from the installation")
    return path


def shipped_model_file(name: str) -> Optional[Path]:
    """The .lenet copy of shipped model ``name``, where one ships; None otherwise."""
    return _find(name, ".lenet") if name in LENET_FILES else None
