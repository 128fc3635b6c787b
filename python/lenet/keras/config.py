"""A Keras model config (``model.to_json()``, the ``model_config`` attribute, a
.keras file's config.json) -> the core's layer records.

Sequential and Functional models of every Keras version (Keras 1's list-style
Sequential and its ``Model``, Keras 2's ``inbound_nodes`` lists, Keras 3's
``__keras_tensor__`` arguments), nested models (a Sequential of augmentation
layers inside a Functional model, say) flattened into the one graph. Each layer
becomes one record (``layers.convert``), or none for an identity at inference;
the records are in an order where every layer comes after the ones it reads.

Which weights go with which layer is the file format's business; this module
records, for each layer that may have weights, where each format keeps them:
``KerasLayer.keras3_path`` (the .weights.h5 group) and ``legacy_owner`` (the
top-level layer whose group holds them in a legacy .h5).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from .._native import _core
from ..errors import ModelFileError, UnsupportedModelError
from . import hdf5, layers
from .layers import Writer

MODEL_CLASSES = ("Sequential", "Functional", "Model")
LIMITS = _core.limits()


@dataclass
class KerasLayer:
    cls: str  # the class as the config names it
    name: str
    config: dict
    raw: Any = None  # the config as written (a nested model's may be a list)
    record: Optional[int] = None  # its record in Architecture.records (None: InputLayer, identity, model)
    keras3_path: tuple = ()  # its group in a Keras 3 weights file, e.g. ("layers", "conv2d")
    legacy_owner: int = -1  # the top-level layer (its index) holding its weights in a legacy .h5
    trainable: bool = True  # as Keras decides it (a frozen model freezes its layers)


@dataclass
class Architecture:
    records: list  # _core.LayerSpec, every layer after the ones it reads
    input_shape: tuple  # Keras' per-sample input shape
    name: str
    leaves: list[KerasLayer]  # layers with records, in the model's layer order (nested ones expanded)
    top_level: list[str]  # the top-level layers' names, in the model's layer order (legacy_owner indexes it)
    writer: Writer
    source: str = ""
    version: str = ""  # the Keras version that wrote it, as far as the file says
    backend: str = ""  # tensorflow, theano, ...


def snake_case(name: str) -> str:
    """keras.src.utils.naming.to_snake_case: the key of a layer in a Keras 3 weights file."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def writer_of(config: Any, version: str) -> Writer:
    """Keras' major version from the version a file records, else from the config's
    shape (Keras 3 configs carry a 'module' key; Keras 1 ones Keras 1 keys)."""
    if version[:1] in ("1", "2", "3") and version[1:2] in (".", ""):
        return Writer(int(version[0]))
    if isinstance(config, dict):
        if isinstance(config.get("keras_version"), str) and config["keras_version"][:2] in ("1.", "2.", "3."):
            return Writer(int(config["keras_version"][0]))
        if "module" in config:
            return Writer(3)
    text = repr(config)[:200_000]
    if "'nb_filter'" in text or "'output_dim'" in text or "'border_mode'" in text:
        return Writer(1)
    return Writer(2)


def parse(config: Any, where: str, writer: Writer) -> Architecture:
    """The architecture of a model config; raises ModelFileError for a malformed
    config, UnsupportedModelError for a model the engine does not run."""
    if not isinstance(config, dict) or not isinstance(config.get("class_name"), str):
        raise ModelFileError(f"{where}: the architecture is not a Keras model config (no 'class_name')")
    b = _Builder(where, writer)
    try:
        out, top = b.model(config, None, (), -1, True, top=True)
    except RecursionError as e:
        raise ModelFileError(f"{where}: the architecture nests models too deeply") from e
    if out == -1:
        raise UnsupportedModelError(f"{where}: the model computes nothing (its output is its input)")
    if out != len(b.records) - 1:
        raise UnsupportedModelError(
            f"{where}: layers that the output does not depend on; only models with one output are supported"
        )
    assert b.input_shape is not None
    return Architecture(b.records, b.input_shape, b.name, b.leaves, top, writer, where)


# ----------------------------------------------------------------- building


class _Builder:
    def __init__(self, where: str, writer: Writer):
        self.where, self.writer = where, writer
        self.records: list = []
        self.leaves: list[KerasLayer] = []
        self.input_shape: Optional[tuple] = None
        self.name = ""
        self.layer_count = 0

    def w(self, l: KerasLayer) -> str:
        return f"{self.where}: layer '{l.name}' ({l.cls})"

    def entry(self, e: Any, index: int) -> KerasLayer:
        if not isinstance(e, dict) or not isinstance(e.get("class_name"), str):
            raise ModelFileError(
                f"{self.where}: layer #{index} of the architecture is not a {{'class_name', 'config'}} object"
            )
        self.layer_count += 1
        if self.layer_count > LIMITS["layers"]:
            raise ModelFileError(f"{self.where}: more than {LIMITS['layers']} layers (at most {LIMITS['layers']})")
        cls = hdf5.name(e["class_name"], f"{self.where}: layer #{index}'s class_name")
        cfg = e.get("config")
        if cfg is None:
            cfg = {}
        if not isinstance(cfg, (dict, list)):
            raise ModelFileError(f"{self.where}: layer #{index} ({cls}): its config is not an object")
        raw = cfg.get("name", e.get("name")) if isinstance(cfg, dict) else e.get("name")
        name = hdf5.name(raw, f"{self.where}: layer #{index}'s name") if isinstance(raw, (str, bytes)) else ""
        if not isinstance(cfg, dict) and cls not in MODEL_CLASSES:
            raise ModelFileError(f"{self.where}: layer '{name}' ({cls}): its config is not an object")
        if self.writer.major == 1 and isinstance(cfg, dict):
            cls, cfg = layers.keras1_config(cls, cfg)
        return KerasLayer(cls, name or f"#{index}", cfg if isinstance(cfg, dict) else {}, cfg)

    def check_count(self, entries: list) -> None:
        if self.layer_count + len(entries) > LIMITS["layers"]:
            raise ModelFileError(
                f"{self.where}: {self.layer_count + len(entries):,} layers (at most {LIMITS['layers']})"
            )

    def record(self, l: KerasLayer, inputs: list[int]) -> int:
        """The value of layer l applied to `inputs`: a new record, or its input for an identity."""
        cls = layers.ALIASES.get(l.cls, l.cls)
        if cls == "InputLayer":
            raise ModelFileError(f"{self.w(l)}: an InputLayer inside the model")
        fields = layers.convert(cls, l.config, self.w(l), self.writer)
        if fields == layers.IDENTITY:
            if len(inputs) != 1:
                raise UnsupportedModelError(f"{self.w(l)}: {len(inputs)} inputs to a one-input layer")
            return inputs[0]
        rec = _core.LayerSpec()
        weights = fields.pop("weights", {})
        try:
            for key, value in fields.items():
                if isinstance(value, str):
                    value = hdf5.text(value, f"{self.w(l)}: {key}")
                setattr(rec, key, value)
            rec.name = l.name
            rec.keras_class = l.cls
            rec.inputs = inputs
            for key, value in weights.items():
                rec.set_weight(key, value)
        except (TypeError, ValueError, OverflowError) as e:  # a value pybind cannot convert
            raise ModelFileError(f"{self.w(l)}: a config value of the wrong type ({e})") from e
        self.records.append(rec)
        l.record = len(self.records) - 1
        self.leaves.append(l)
        return l.record

    def input_dims(self, batch_shape: Any, where: str) -> tuple:
        if not isinstance(batch_shape, (list, tuple)) or len(batch_shape) < 2:
            raise ModelFileError(f"{where}: malformed input shape {batch_shape!r}")
        dims = list(batch_shape[1:])
        if any(d is None for d in dims):
            raise UnsupportedModelError(
                f"{where}: a variable input size {tuple(batch_shape)}; only fixed input sizes are supported"
            )
        return tuple(layers.integer(d, "an input dimension", where) for d in dims)

    # A model (top-level or nested), applied to `inputs` (None: the model input);
    # returns (its output value, its top-level layer names).
    def model(
        self, cfg: dict, inputs: Optional[list[int]], path: tuple, owner: int, trainable: bool, top: bool = False
    ) -> tuple[int, list[str]]:
        cls = cfg.get("class_name")
        body = cfg.get("config")
        if cls == "Sequential":
            if isinstance(body, list):  # Keras <= 2.1: the config is the layer list
                entries, name, build = body, "", None
            elif isinstance(body, dict) and isinstance(body.get("layers"), list):
                entries, name, build = body["layers"], body.get("name"), body.get("build_input_shape")
            else:
                raise ModelFileError(f"{self.where}: a Sequential config without a list of layers")
            if top:
                self.name = name if isinstance(name, str) else ""
            return self.sequential(entries, build, inputs, path, owner, trainable, top)
        if cls in ("Functional", "Model"):
            if not isinstance(body, dict) or not isinstance(body.get("layers"), list):
                raise ModelFileError(f"{self.where}: a {cls} config without a list of layers")
            if top:
                self.name = body.get("name") if isinstance(body.get("name"), str) else ""
            return self.functional(body, inputs, path, owner, trainable, top)
        raise UnsupportedModelError(
            f"{self.where}: model class {cls!r}: only Sequential and Functional models are supported "
            "(a subclassed model has no architecture in the file)"
        )

    def keras3_keys(self, entries: list[KerasLayer]) -> list[str]:
        """Each layer's key in a Keras 3 weights file: snake_case(class) and a per-class
        counter, in the container's layer order (saving_lib._save_container_state)."""
        used: dict[str, int] = {}
        out = []
        for l in entries:
            key = snake_case(l.cls)
            if key in used:
                used[key] += 1
                key = f"{key}_{used[key]}"
            else:
                used[key] = 0
            out.append(key)
        return out

    def apply(self, l: KerasLayer, key: str, inputs: list[int], path: tuple, owner: int, trainable: bool) -> int:
        """Layer l on `inputs`; `owner`: its top-level layer's index (its own when it is one)."""
        l.keras3_path = path + ("layers", key)
        l.legacy_owner = owner
        l.trainable = trainable and l.config.get("trainable", True) is not False
        if l.cls in MODEL_CLASSES:
            if len(inputs) != 1:
                raise UnsupportedModelError(f"{self.w(l)}: a nested model with {len(inputs)} inputs")
            out, _ = self.model(
                {"class_name": l.cls, "config": l.raw}, inputs, l.keras3_path, l.legacy_owner, l.trainable
            )
            return out
        return self.record(l, inputs)

    def sequential(
        self,
        entries: list,
        build: Any,
        inputs: Optional[list[int]],
        path: tuple,
        owner: int,
        trainable: bool,
        top: bool,
    ) -> tuple[int, list[str]]:
        self.check_count(entries)
        ls = [self.entry(e, i) for i, e in enumerate(entries)]
        if not ls:
            raise ModelFileError(f"{self.where}: a Sequential model without layers")
        batch_shape = None
        if ls[0].cls == "InputLayer":
            first = ls.pop(0)
            batch_shape = first.config.get("batch_shape", first.config.get("batch_input_shape"))
        elif ls[0].cls not in MODEL_CLASSES:
            c = ls[0].config
            batch_shape = c.get("batch_input_shape", c.get("batch_shape"))
            if batch_shape is None and isinstance(c.get("input_dim"), int):  # Keras 1 Dense(input_dim=...)
                batch_shape = [None, c["input_dim"]]
            if (
                batch_shape is None
                and isinstance(entries[0], dict)
                and isinstance(entries[0].get("build_config"), dict)
            ):
                batch_shape = entries[0]["build_config"].get("input_shape")
        if batch_shape is None:
            batch_shape = build
        if batch_shape is None and inputs is None:  # say first what the engine cannot run (Keras 1's Merge)
            for l in ls:
                if l.cls not in MODEL_CLASSES:
                    layers.convert(layers.ALIASES.get(l.cls, l.cls), l.config, self.w(l), self.writer)
        for l in ls:
            if l.cls == "InputLayer":
                raise ModelFileError(f"{self.w(l)}: an InputLayer that is not the first layer")
        if inputs is None:
            if batch_shape is None:
                raise ModelFileError(
                    f"{self.where}: the architecture does not give the input shape "
                    "(no InputLayer, no batch_input_shape)"
                )
            self.input_shape = self.input_dims(batch_shape, f"{self.where}: the input")
            inputs = [-1]
        value = inputs
        for i, (l, key) in enumerate(zip(ls, self.keras3_keys(ls))):
            value = [self.apply(l, key, value, path, i if top else owner, trainable)]
        return value[0], [l.name for l in ls]

    def functional(
        self, body: dict, inputs: Optional[list[int]], path: tuple, owner: int, trainable: bool, top: bool
    ) -> tuple[int, list[str]]:
        ls: list[KerasLayer] = []
        by_name: dict[str, KerasLayer] = {}
        inbound: dict[str, list[str]] = {}
        self.check_count(body["layers"])
        for i, e in enumerate(body["layers"]):
            l = self.entry(e, i)
            if isinstance(e, dict) and isinstance(e.get("name"), str):
                l.name = hdf5.name(e["name"], f"{self.where}: layer #{i}'s name")
            if l.name in by_name:
                raise ModelFileError(f"{self.where}: two layers are named '{l.name}'")
            ls.append(l)
            by_name[l.name] = l
            inbound[l.name] = self.inbound(l, e)
        ins = self.refs(body.get("input_layers"), "input_layers")
        outs = self.refs(body.get("output_layers"), "output_layers")
        if len(ins) != 1:
            raise UnsupportedModelError(f"{self.where}: a model with {len(ins)} inputs; only one input is supported")
        if len(outs) != 1:
            raise UnsupportedModelError(f"{self.where}: a model with {len(outs)} outputs; only one output is supported")
        for n in ins + outs + [s for v in inbound.values() for s in v]:
            if n not in by_name:
                raise ModelFileError(f"{self.where}: the config refers to an unknown layer '{n}'")
        first = by_name[ins[0]]
        if first.cls != "InputLayer" or inbound[first.name]:
            raise ModelFileError(f"{self.where}: the model input '{first.name}' ({first.cls}) is not an InputLayer")
        if inputs is None:
            batch_shape = first.config.get("batch_shape", first.config.get("batch_input_shape"))
            if batch_shape is None:
                raise ModelFileError(f"{self.where}: the InputLayer '{first.name}' has no batch_shape")
            self.input_shape = self.input_dims(batch_shape, f"{self.where}: input '{first.name}'")
            inputs = [-1]
        values: dict[str, int] = {first.name: inputs[0]}
        keys = dict(zip((l.name for l in ls), self.keras3_keys(ls)))
        index = {l.name: i for i, l in enumerate(ls)}
        # Every layer after the layers it reads, in config order otherwise.
        pending = [l for l in ls if l is not first]
        while pending:
            ready = [l for l in pending if all(n in values for n in inbound[l.name])]
            if not ready:
                raise ModelFileError(
                    f"{self.where}: the layers {', '.join(l.name for l in pending[:5])} "
                    "cannot be reached from the input (a cycle, or a second input)"
                )
            for l in ready:
                if l.cls == "InputLayer":
                    raise UnsupportedModelError(f"{self.w(l)}: a second input; only one input is supported")
                srcs = inbound[l.name]
                if not srcs:
                    raise ModelFileError(f"{self.w(l)}: a layer with no inputs")
                values[l.name] = self.apply(
                    l, keys[l.name], [values[n] for n in srcs], path, index[l.name] if top else owner, trainable
                )
            pending = [l for l in pending if l.name not in values]
        return values[outs[0]], [l.name for l in ls]

    @staticmethod
    def tensor_ref(ref: Any) -> Optional[tuple[str, int]]:
        """(layer name, tensor index) of a [name, node_index, tensor_index(, kwargs)] reference."""
        if isinstance(ref, (list, tuple)) and len(ref) >= 3 and isinstance(ref[0], str):
            return ref[0], ref[2] if isinstance(ref[2], int) else -1
        return None

    def refs(self, value: Any, what: str) -> list[str]:
        """input_layers / output_layers: one reference (Keras 3) or a list of them."""
        single = self.tensor_ref(value)
        found = [single] if single is not None else None
        if found is None and isinstance(value, (list, tuple)):
            found = [self.tensor_ref(v) for v in value]
            if any(f is None for f in found):
                found = None
        if found is None:
            if isinstance(value, dict):
                raise UnsupportedModelError(f"{self.where}: a model with named (dict) {what} is not supported")
            raise ModelFileError(f"{self.where}: malformed '{what}' in the Functional config")
        return self.single_outputs(found, f"{self.where}: {what}")

    @staticmethod
    def single_outputs(refs: list, where: str) -> list[str]:
        """The layer names of (name, tensor index) references, each to a layer's only output."""
        for n, t in refs:
            if t != 0:
                raise UnsupportedModelError(
                    f"{where}: a reference to output {t} of layer '{n}'; only layers with one output are supported"
                )
        return [hdf5.name(n, where) for n, _ in refs]

    def keras_tensors(self, value: Any, out: list, depth: int = 0) -> None:
        """The [name, node, tensor] histories of the Keras 3 __keras_tensor__ objects in a
        node's args/kwargs, in order."""
        if depth > 32:
            return
        if isinstance(value, dict):
            if value.get("class_name") == "__keras_tensor__":
                cfg = value.get("config")
                hist = cfg.get("keras_history") if isinstance(cfg, dict) else None
                ref = self.tensor_ref(hist)
                if ref is None:
                    raise ModelFileError(f"{self.where}: malformed keras_history in an inbound node")
                out.append(ref)
                return
            for v in value.values():
                self.keras_tensors(v, out, depth + 1)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self.keras_tensors(v, out, depth + 1)

    def inbound(self, l: KerasLayer, entry: dict) -> list[str]:
        nodes = entry.get("inbound_nodes", [])
        if not isinstance(nodes, list):
            raise ModelFileError(f"{self.w(l)}: malformed inbound_nodes")
        if not nodes:
            return []
        if len(nodes) > 1:
            raise UnsupportedModelError(
                f"{self.w(l)}: the layer is called {len(nodes)} times (a shared layer); not supported"
            )
        node = nodes[0]
        refs: list = []
        if isinstance(node, dict):  # Keras 3: {"args": [...], "kwargs": {...}}
            self.keras_tensors(node.get("args", []), refs)
            self.keras_tensors(node.get("kwargs", {}), refs)
        elif isinstance(node, list):  # Keras 1-2: [[name, node, tensor, kwargs], ...]
            for ref in node:
                r = self.tensor_ref(ref)
                if r is None:
                    raise ModelFileError(f"{self.w(l)}: malformed inbound node")
                refs.append(r)
        else:
            raise ModelFileError(f"{self.w(l)}: malformed inbound node")
        return self.single_outputs(refs, f"{self.w(l)}: an inbound node")
