"""The Keras 3 weights format: ``model.save_weights("m.weights.h5")``, and the
``model.weights.h5`` inside a .keras zip (KERAS-H5.md section 4).

Each layer's weights are the datasets ``vars/0``, ``vars/1``, ... of the group
``layers/<key>``, where the key is ``snake_case(class)`` with a per-class counter
in the container's layer order (``conv2d``, ``conv2d_1``, ...), and a nested
model's layers sit under its own group (``layers/sequential/layers/dense``):
config.py records each layer's path. The datasets are in the order the layer
created its variables (trainable first), the order of the core's weight slots.

tf.keras 2.15 on Windows joined these paths with backslashes: its groups are
literally named ``layers\\conv2d``. Keras 3 refuses such files; here a path is
also looked up with its components joined by backslashes.
"""

from __future__ import annotations

from typing import Any, Optional

import h5py
import numpy as np

from ..errors import ModelFileError
from . import hdf5
from .config import Architecture, KerasLayer

MAX_VARS = 16  # weights of one layer (SeparableConv2D has 3, BatchNormalization 4)


def is_keras3(f: h5py.File, where: str) -> bool:
    """A 'layers' group, or root groups named 'layers\\...' (the Windows layout)."""
    return resolve(f, ("layers",), where) is not None or any(k.startswith("layers\\") for k in hdf5.keys(f, where))


def resolve(group: h5py.Group, path: tuple, where: str) -> Optional[Any]:
    """The object at ``path`` (components), nested or with some components joined by
    backslashes (the Windows layout); None when it is not there."""
    if not path:
        return group
    for j in range(1, len(path) + 1):
        name = "\\".join(path[:j])
        try:
            present = name in group
        except Exception as e:
            raise ModelFileError(f"{where}: cannot look up '{name}' ({type(e).__name__}: {e})") from e
        if present:
            obj = hdf5.get(group, name, where)
            if j == len(path):
                return obj
            if isinstance(obj, h5py.Group):
                found = resolve(obj, path[j:], where)
                if found is not None:
                    return found
    return None


def read_weights(root: h5py.Group, arch: Architecture, wanted: list[tuple[KerasLayer, list]], where: str) -> None:
    """Sets the weights of the ``wanted`` layers (leaf, its slots) from a Keras 3 weights file."""
    for leaf, slots in wanted:
        lw = f"{where}: layer '{leaf.name}' ({leaf.cls})"
        path = "/".join(leaf.keras3_path + ("vars",))
        vars_ = resolve(root, leaf.keras3_path + ("vars",), lw)
        if not isinstance(vars_, h5py.Group):
            layers = resolve(root, ("layers",), where)
            present = ", ".join(hdf5.keys(layers, where)[:20]) if isinstance(layers, h5py.Group) else "none"
            raise ModelFileError(
                f"{where}: no group '{path}' for layer '{leaf.name}' ({leaf.cls}) (groups under 'layers': {present})"
            )
        found = []
        while str(len(found)) in vars_ and len(found) <= MAX_VARS:
            found.append(str(len(found)))
        if len(found) != len(slots):
            want = ", ".join(s[0] for s in slots)
            raise ModelFileError(f"{lw}: expected {len(slots)} weights ({want}), '{path}' has {len(found)}")
        for key, (slot, shape, _count_only, ignored) in zip(found, slots):
            dw = f"{where}: '{path}/{key}' ({leaf.name} {slot})"
            array = hdf5.read_weight(hdf5.get(vars_, key, dw), dw, tuple(shape), ignored)
            if not ignored:
                arch.records[leaf.record].set_weight(slot, np.ascontiguousarray(array))
