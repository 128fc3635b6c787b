"""The legacy HDF5 format: ``model.save("m.h5")`` of Keras 1, 2 (tf.keras,
tf_keras) and 3, and Keras 1-2 ``save_weights("w.h5")`` (the same tree at the
root, no architecture). KERAS-H5.md sections 1-3.

The architecture is the root attribute ``model_config``; the weights live under
``model_weights/`` (or the root), one group per top-level layer, listed in
order by ``layer_names``; each group lists its datasets in order in
``weight_names`` (paths relative to the group). Weights are matched to the
architecture the way Keras does it: the k-th top-level layer that has weights
takes the k-th group whose ``weight_names`` is not empty, and its weights in
order — a layer's trainable weights first, then its non-trainable ones (for a
nested model: every sub-layer's trainable weights, then every sub-layer's
non-trainable ones). Groups are never iterated: HDF5 lists them alphabetically.
"""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

from ..errors import ModelFileError
from . import hdf5
from .config import Architecture, KerasLayer

# Weights Keras creates non-trainable, by record kind.
_NON_TRAINABLE = {"batch_norm": ("moving_mean", "moving_variance"), "normalization": ("mean", "variance", "count")}


def is_legacy(f: h5py.File, where: str) -> str:
    """'full' (model.save), 'weights' (save_weights) or '' (not this format)."""
    if isinstance(hdf5.get(f, "model_weights", where), h5py.Group):
        return "full"
    if hdf5.has_attr(f, "layer_names", where) or hdf5.has_attr(f, "layer_names0", where):
        return "weights"
    return ""


def weights_group(f: h5py.File, where: str) -> h5py.Group:
    g = hdf5.get(f, "model_weights", where)
    return g if isinstance(g, h5py.Group) else f


def backend_from_names(group: h5py.Group, where: str) -> str:
    """The backend of a file that does not say (Keras 1 never did), from its weight
    names: TensorFlow's variables end in ':0' (convolution2d_1_W:0), Theano's do not
    (convolution2d_1_W). '' when the file has no weights to tell."""
    names = hdf5.str_list_attr(group, "layer_names", where) or []
    for n in names:
        g = hdf5.get(group, n, f"{where}: layer '{n}'")
        if isinstance(g, h5py.Group):
            wn = hdf5.str_list_attr(g, "weight_names", f"{where}: layer '{n}'") or []
            if wn:
                return "tensorflow" if any(":" in w for w in wn) else "theano"
    return ""


def _ordered_slots(leaves: list[tuple[KerasLayer, list]], records: list) -> list[tuple[KerasLayer, tuple]]:
    trainable, frozen = [], []
    for leaf, slots in leaves:
        kind = records[leaf.record].kind
        for slot in slots:
            fixed = not leaf.trainable or slot[0] in _NON_TRAINABLE.get(kind, ())
            (frozen if fixed else trainable).append((leaf, slot))
    return trainable + frozen


def read_weights(
    group: h5py.Group, arch: Architecture, wanted: list[tuple[KerasLayer, list]], where: str, transform: Any = None
) -> None:
    """Sets the weights of the ``wanted`` layers (leaf, its slots) from a legacy weights
    group. ``transform(leaf, slot name, array)`` may convert an old layout first."""
    gw = where + ("" if group.name == "/" else f": group '{group.name}'")
    names = hdf5.str_list_attr(group, "layer_names", gw)
    if names is None:
        raise ModelFileError(f"{gw}: no 'layer_names' attribute")
    in_file = []
    for n in names:
        g = hdf5.get(group, n, f"{gw}: layer '{n}'")
        if not isinstance(g, h5py.Group):
            raise ModelFileError(f"{gw}: layer '{n}' is listed in layer_names but has no group")
        wn = hdf5.str_list_attr(g, "weight_names", f"{gw}: layer '{n}'") or []
        if wn:
            in_file.append((n, g, wn))
    owners: dict[int, list] = {}
    for leaf, slots in wanted:
        owners.setdefault(leaf.legacy_owner, []).append((leaf, slots))
    ordered = sorted(owners)  # top-level layers with weights, in the model's layer order
    if len(ordered) != len(in_file):
        raise ModelFileError(
            f"{arch.source}: the architecture has {len(ordered)} layers with weights "
            f"({', '.join(arch.top_level[i] for i in ordered) or 'none'}) but the file has {len(in_file)} "
            f"({', '.join(n for n, _, _ in in_file) or 'none'})"
        )
    for owner, (gname, g, wn) in zip(ordered, in_file):
        expected = _ordered_slots(owners[owner], arch.records)
        lw = f"{arch.source}: layer '{arch.top_level[owner]}'"
        if len(wn) != len(expected):
            want = ", ".join(f"{leaf.name}/{slot[0]}" for leaf, slot in expected)
            raise ModelFileError(
                f"{lw}: expected {len(expected)} weights ({want}), the file's group '{gname}' has "
                f"{len(wn)} ({', '.join(wn)})"
            )
        for (leaf, (slot, shape, _count_only, ignored)), wname in zip(expected, wn):
            dw = f"{gw}: layer '{gname}': weight '{wname}'"
            ds = hdf5.get(g, wname, dw)
            if not isinstance(ds, h5py.Dataset):
                raise ModelFileError(f"{dw}: listed in weight_names but there is no such dataset")
            array = hdf5.read_weight(ds, dw, tuple(shape), ignored)
            if ignored:
                continue
            if transform is not None:
                array = transform(leaf, slot, array)
            arch.records[leaf.record].set_weight(slot, np.ascontiguousarray(array))
