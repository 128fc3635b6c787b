"""lenet on Ray Data: classify image sets larger than one machine (``pip install "lenet[ray]"``).

    import ray, lenet.ray
    ds = lenet.ray.classify("s3://bucket/scans/")          # or a directory, a list of paths, a Dataset
    ds.write_json("out/")                                     # one row per file: path, digit, confidence, ...

    # or by hand, with any Dataset Ray Data reads:
    ds = ray.data.read_binary_files("scans/", include_paths=True)
    ds = ds.map_batches(lenet.ray.Classifier, fn_constructor_kwargs={"weights": "lenet5"},
                        batch_size=1024, concurrency=4)

``Classifier`` is the callable class for ``Dataset.map_batches``: Ray makes one per actor,
each with its own ``Engine``, and hands it batches of rows. It takes the two forms Ray
Data reads images in: encoded files from ``read_binary_files`` (a ``bytes`` column, decoded
by lenet exactly as ``lenet.infer`` decodes a file: the same answers) and decoded pixels
from ``read_images`` (an ``image`` column); a ``path`` column is passed through. Each row
comes back with ``digit`` (int, -1 when the image could not be classified),
``confidence``, ``probabilities`` (one per class), ``mode`` (the preprocessing it took:
"mnist" or "photo"), ``several_digits`` (``Result.several_digits``: a number where one
digit was asked for) and ``error`` ("" when it was classified): a bad file is a row with its
error, never a failed job.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence, Union

import numpy as np

from .engine import Engine
from .errors import InputError
from .images import Named, is_one_image
from .model import Model, load
from .results import Result

# What classify() reads from a directory: the extensions lenet-cli takes.
IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "bmp", "gif", "tif", "tiff", "webp", "pbm", "pgm", "ppm", "pnm")


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError('lenet.ray needs Ray Data: pip install "lenet[ray]" (or "ray[data]")') from None
    return ray


class Classifier:
    """One Engine per Ray actor, for ``Dataset.map_batches`` (see the module).

    ``weights``: a path every worker can read, a shipped model name, a ``lenet.Model``,
    or an ObjectRef of one (``classify`` puts the model in the object store once, so a
    file on the driver alone is enough). ``device``: "auto" (a GPU when the actor has
    one: ask for it with ``num_gpus=1``), "cpu" or "cuda". ``threads``: the engine's CPU
    threads (default: the CPUs the actor may use). ``mode``: as for ``lenet.infer``.
    ``precision``: as for ``lenet.Engine``.
    """

    def __init__(
        self,
        weights: Any = None,
        device: str = "auto",
        threads: Optional[int] = None,
        mode: str = "auto",
        precision: str = "exact",
    ):
        ray = _ray()
        if isinstance(weights, ray.ObjectRef):
            weights = ray.get(weights)
        if threads is None:
            threads = _actor_cpus()
        self.engine = Engine(weights, device=device, threads=threads, precision=precision)
        self.mode = mode

    def __call__(self, batch: dict) -> dict:
        if "bytes" in batch:
            data, kind = batch["bytes"], "file"
        elif "image" in batch:
            data, kind = batch["image"], "image"
        elif "path" in batch:  # paths this actor reads itself (a filesystem it sees)
            data, kind = batch["path"], "path"
        else:
            raise InputError(
                f"lenet.ray.Classifier: a batch needs a 'bytes' column (read_binary_files), an "
                f"'image' column (read_images) or a 'path' column; it has {sorted(batch)}"
            )
        n = len(data)
        paths = [str(p) for p in batch["path"]] if "path" in batch else [f"<row {i}>" for i in range(n)]
        items: list = []
        for value, path in zip(data, paths):
            if kind == "path":
                items.append(path)  # read with the engine's own reader (the PNG fast lane included)
            elif kind == "file":
                items.append(Named(bytes(value), path))
            else:
                a = np.asarray(value)
                items.append(
                    Named(a, path)
                    if is_one_image(a)
                    else InputError(f"{path}: an array of shape {a.shape} is not one image")
                )
        digits = np.full(n, -1, np.int64)
        confidence = np.full(n, np.nan, np.float32)
        probabilities = np.full((n, self.engine.classes), np.nan, np.float32)
        errors = [""] * n
        modes = [""] * n
        several = np.zeros(n, bool)
        todo = [i for i, item in enumerate(items) if not isinstance(item, InputError)]
        for i in range(n):
            if isinstance(items[i], InputError):
                errors[i] = str(items[i])
        results = self.engine.infer_iter([items[i] for i in todo], batch_size=max(1, len(todo)), mode=self.mode)
        for i, r in zip(todo, results):
            if isinstance(r, Result):
                digits[i], confidence[i], probabilities[i], modes[i] = r.digit, r.confidence, r.probabilities, r.mode
                several[i] = r.several_digits
            else:
                errors[i] = str(r)
        out = {
            "digit": digits,
            "confidence": confidence,
            "probabilities": probabilities,
            "mode": np.array(modes, dtype=object),
            "several_digits": several,
            "error": np.array(errors, dtype=object),
        }
        if "path" in batch:
            out = {"path": np.asarray(batch["path"]), **out}
        return out


def _image_files(directory: str) -> list[str]:
    """The image files under a local path (itself, when it is a file), by extension, sorted,
    recursively; names starting with "." skipped."""
    if not os.path.isdir(directory):
        if not os.path.exists(directory):
            raise InputError(f"lenet.ray.classify: {directory}: no such file or directory")
        return [directory]
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [
            os.path.join(root, f)
            for f in sorted(files)
            if not f.startswith(".") and f.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS
        ]
    if not found:
        raise InputError(f"lenet.ray.classify: {directory}: no image files there")
    return found


def _actor_cpus() -> Optional[int]:
    """The CPUs Ray gave this actor (its num_cpus), else None (the engine's default)."""
    try:
        ray = _ray()
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
        return max(1, int(cpus)) if cpus else None
    except Exception:  # not in an actor: the engine decides
        return None


def classify(
    inputs: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]], Any],
    *,
    weights: Any = None,
    device: str = "auto",
    mode: str = "auto",
    batch_size: int = 1024,
    concurrency: Optional[int] = None,
    num_cpus: Optional[float] = None,
    num_gpus: Optional[float] = None,
    threads: Optional[int] = None,
    preserve_order: bool = False,
    read_in_actors: Optional[bool] = None,
    precision: str = "exact",
) -> Any:
    """A Dataset of the classified images (lazy: nothing runs until it is consumed or
    written). ``inputs``: a directory or a path (local, or any filesystem Ray reads:
    s3://, gs://, ...; image files by extension, recursively), a list of paths, or a Ray
    Dataset (with a ``bytes`` or ``image`` column). ``concurrency``: the number of
    actors, each with one Engine (default: as many as fit, one per ``num_cpus``);
    ``num_cpus`` / ``num_gpus``: what each actor asks Ray for (``num_gpus=1`` puts each
    Engine on a GPU); ``threads``: the engine threads per actor (default ``num_cpus``);
    ``batch_size``: rows per call of an actor (the engine's own batches are up to this
    size). ``precision``: as for ``lenet.Engine``. ``preserve_order``: rows in input order
    (slower on a cluster: a straggler holds the rest back). The model is loaded once here and shared through the object
    store, so only the driver needs to read the weights file.

    ``read_in_actors``: the actors read local files themselves, given only their paths
    (lenet's own reader: ~10x the rate of Ray's file reading for small images, measured in
    PERFORMANCE.md), which needs every file at the same path on every node; otherwise
    Ray reads the files and ships their bytes. Default: True for local paths on a
    single-node Ray, False otherwise (s3://, a multi-node cluster)."""
    ray = _ray()
    if isinstance(inputs, (list, tuple)) and not inputs:
        raise InputError("lenet.ray.classify: no inputs")
    listed = [os.fspath(p) for p in inputs] if isinstance(inputs, (list, tuple)) else None
    local = (
        all("://" not in p for p in listed)
        if listed is not None
        else isinstance(inputs, (str, os.PathLike)) and "://" not in os.fspath(inputs)
    )
    if read_in_actors is None:  # local paths mean the same file everywhere only on a single node
        read_in_actors = local and len([n for n in ray.nodes() if n.get("Alive")]) <= 1
    if read_in_actors and not local:
        raise InputError(
            "lenet.ray.classify: read_in_actors=True needs local paths (give s3://... and friends to Ray's readers)"
        )
    if read_in_actors:
        paths = listed if listed is not None else _image_files(os.fspath(inputs))
        ds = ray.data.from_items([{"path": p} for p in paths])
    elif listed is not None:
        ds = ray.data.read_binary_files(listed, include_paths=True)
    elif isinstance(inputs, (str, os.PathLike)):
        ds = ray.data.read_binary_files(
            os.fspath(inputs),
            include_paths=True,
            file_extensions=list(IMAGE_EXTENSIONS) + [e.upper() for e in IMAGE_EXTENSIONS],
        )
    else:
        ds = inputs
    if preserve_order:
        ds.context.execution_options.preserve_order = True
    model = weights if isinstance(weights, Model) else load(weights)
    actor_cpus = num_cpus if num_cpus is not None else (threads or 1)
    options: dict = {"num_cpus": actor_cpus}
    if num_gpus:
        options["num_gpus"] = num_gpus
    if concurrency is None:
        if num_gpus:
            concurrency = max(1, int(ray.cluster_resources().get("GPU", 1) // num_gpus))
        else:  # one CPU left to the tasks that read the files: actors holding every CPU would starve them
            concurrency = max(1, int((ray.cluster_resources().get("CPU", 2) - 1) // actor_cpus))
    return ds.map_batches(
        Classifier,
        fn_constructor_kwargs={
            "weights": ray.put(model),
            "device": device,
            "threads": threads or int(max(1, actor_cpus)),
            "mode": mode,
            "precision": precision,
        },
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=concurrency),
        **options,
    )


__all__ = ["Classifier", "classify", "IMAGE_EXTENSIONS"]
