"""The .keras format (Keras 3, and tf.keras 2.13+): a zip holding
``config.json`` (the architecture), ``metadata.json`` (the Keras version) and
``model.weights.h5`` (the Keras 3 weights layout, keras3_h5.py)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from . import hdf5

ZIP_MAGIC = b"PK\x03\x04"
MAX_WEIGHTS_BYTES = 1 << 30  # model.weights.h5 inside a .keras zip


def read(src: Path, where: str) -> tuple[Any, str, io.BytesIO]:
    """(config, keras_version, model.weights.h5 as a BytesIO) of a .keras file."""
    try:
        z = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise ModelFileError(f"{where}: a corrupt zip file ({e})") from e
    try:
        with z:
            names = set(z.namelist())
            if "config.json" not in names:
                if any(n.endswith(("/data.pkl", "/constants.pkl")) for n in names):
                    # torch.save's and torch.jit.save's zip: pickled Python objects, no graph lenet reads
                    raise ModelFileError(
                        f"{where}: a PyTorch checkpoint (torch.save or TorchScript), which lenet cannot read: "
                        "export the model to ONNX (torch.onnx.export(model, (example_input,), 'model.onnx')) "
                        "and load that file"
                    )
                raise ModelFileError(f"{where}: a zip file but not a Keras .keras file (no config.json)")
            if "model.weights.h5" not in names:
                extra = " (sharded weights are not supported)" if "model.weights.json" in names else ""
                raise ModelFileError(f"{where}: the .keras file has no model.weights.h5{extra}")
            for member, limit in (
                ("config.json", hdf5.MAX_JSON_BYTES),
                ("metadata.json", hdf5.MAX_JSON_BYTES),
                ("model.weights.h5", MAX_WEIGHTS_BYTES),
            ):
                if member in names and z.getinfo(member).file_size > limit:
                    raise ModelFileError(f"{where}: {member} inside the .keras file is larger than {limit} bytes")
            config = hdf5.read_json(z.read("config.json"), f"{where}: config.json")
            version = ""
            if "metadata.json" in names:
                meta = hdf5.read_json(z.read("metadata.json"), f"{where}: metadata.json")
                if isinstance(meta, dict) and isinstance(meta.get("keras_version"), str):
                    version = hdf5.text(meta["keras_version"], f"{where}: metadata.json")
            data = z.read("model.weights.h5")
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError) as e:
        raise ModelFileError(f"{where}: a corrupt .keras file ({type(e).__name__}: {e})") from e
    return config, version, io.BytesIO(data)


def read_config(src: Path, where: str) -> Any:
    """The architecture alone (for arch=...)."""
    try:
        with zipfile.ZipFile(src) as z:
            if "config.json" not in z.namelist():
                raise ModelFileError(f"{where}: given as arch, but this zip file has no config.json")
            if z.getinfo("config.json").file_size > hdf5.MAX_JSON_BYTES:
                raise ModelFileError(f"{where}: config.json is larger than {hdf5.MAX_JSON_BYTES} bytes")
            return hdf5.read_json(z.read("config.json"), f"{where}: config.json")
    except ModelFileError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError, NotImplementedError) as e:
        raise ModelFileError(f"{where}: a corrupt zip file ({type(e).__name__}: {e})") from e
