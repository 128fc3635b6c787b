"""Hostile model files: the loader fuzzed (tests/fuzz_targets.py) and the named cases
of issue 7 that tests/models/test_keras_loader.py does not already cover.

Only ``lenet.Error`` subclasses may leave ``lenet.load``: never another exception, a
crash, a hang or a large allocation. Limits: csrc/net/limits.h (the model) and
python/lenet/keras/hdf5.py (the file format); documented in SECURITY.md.
"""

from __future__ import annotations

import json
import resource
import shutil
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

h5py = pytest.importorskip("h5py")

from fuzz_runner import fuzz  # noqa: E402
from keras_fixtures import edit_config, fixture, fixtures  # noqa: E402,F401

import lenet  # noqa: E402
from lenet.errors import ModelFileError, UnsupportedModelError  # noqa: E402

# Seeds: every small fixture kind (Keras 2 and 3 full models, weights-only files with
# their JSON, a .keras zip, channels_first, Functional, list-style JSON), and zoo models
# with the layers of issue 13 (batch norm, residual Add, Reshape MLP, nested model,
# Windows .keras).
SEEDS = [
    "k2_testnet",
    "k3_testnet",
    "k3_testnet_keras",
    "k2_testnet_weights",
    "k3_functional",
    "k2_functional",
    "k3_functional_weights",
    "k2_cf_chw",
    "k3_activations",
    "k2_list_json_cf",
    "k3_deep_dense_weights",
]
ZOO_SEEDS = [
    "k3_bn_cnn.h5",
    "k2_residual.h5",
    "k3_reshape_cnn.keras",
    "k3_nested_cnn.h5",
    "k2_bn_cnn.keras_windows",
    "k3_concat_branches.h5",
]


@pytest.fixture(scope="module")
def seed_dir(fixtures, tmp_path_factory):  # noqa: F811
    import keras_zoo

    d = tmp_path_factory.mktemp("model-seeds")
    for name in SEEDS:
        if name not in fixtures:
            continue
        fx = fixtures[name]
        shutil.copy(fx.weights, d / Path(fx.weights).name)
        if fx.arch is not None:
            shutil.copy(fx.arch, d / Path(fx.arch).name)
    zoo = keras_zoo.get_zoo(only={name.split("_", 1)[1].split(".")[0] for name in ZOO_SEEDS})
    for name in ZOO_SEEDS:
        if name in zoo:
            shutil.copy(zoo[name].path, d / Path(zoo[name].path).name)
    assert any(d.iterdir()), "no Keras fixture could be built"
    return d


def _check_fuzz_stats(stats: dict, min_cases: int) -> None:
    assert stats["cases"] >= min_cases, stats
    # Both sides reached: files that load and run, and files refused with a lenet error.
    assert stats["outcomes"].get("ok", 0) > 0, stats["outcomes"]
    assert stats["outcomes"].get("ModelFileError", 0) > 0, stats["outcomes"]


def test_fuzz_model_file_bytes(seed_dir, tmp_path):
    """Bit flips, truncations, insertions and splices of real files (libFuzzer's mutations)."""
    _check_fuzz_stats(fuzz("model-bytes", tmp_path, seed_dir), 100)


def test_fuzz_lenet_file_bytes(seed_dir, tmp_path):
    """lenet's own format (csrc/net/model_file.h), read by the core as the C++ API reads it:
    the checksum refuses mutated files as damaged, and the same files sealed again reach
    the parser, which loads some and refuses others."""
    stats = fuzz("lenet-bytes", tmp_path, seed_dir)
    _check_fuzz_stats(stats, 100)
    assert stats["categories"]["lenet"].get("ModelFileError", 0) > 0, stats["categories"]
    sealed = stats["categories"]["lenet, sealed again"]
    assert sealed.get("ok", 0) > 0 and sealed.get("ModelFileError", 0) > 0, stats["categories"]


def test_fuzz_model_configs(seed_dir, tmp_path):
    """Structured mutations of real model configs (absurd values, layers, graphs)."""
    _check_fuzz_stats(fuzz("model-config", tmp_path, seed_dir), 50)


def test_fuzz_model_hdf5_structure(seed_dir, tmp_path):
    """Structured edits of real HDF5 files through h5py (types, shapes, links, attributes)."""
    _check_fuzz_stats(fuzz("model-h5", tmp_path, seed_dir), 50)


ONNX_SEEDS = Path(__file__).resolve().parents[1] / "data" / "onnx"


def test_fuzz_onnx_file_bytes(tmp_path):
    """libFuzzer's byte mutations of the ONNX zoo's files (tests/data/onnx)."""
    pytest.importorskip("onnx")
    _check_fuzz_stats(fuzz("onnx-bytes", tmp_path, ONNX_SEEDS), 100)


def test_fuzz_onnx_graphs(tmp_path):
    """Structured mutations of real ONNX graphs (attributes, dims, wiring, operators, opsets, initializers)."""
    pytest.importorskip("onnx")
    stats = fuzz("onnx-graph", tmp_path, ONNX_SEEDS)
    assert stats["cases"] >= 100, stats
    assert stats["outcomes"].get("ok", 0) > 0, stats["outcomes"]
    assert stats["outcomes"].get("UnsupportedModelError", 0) + stats["outcomes"].get("ModelFileError", 0) > 0


# ----------------------------------------------------------------- named cases


def _copy(fixtures, name, tmp_path):  # noqa: F811
    src = Path(fixture(fixtures, name).weights)
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    return dst


def _layers(cfg):
    return cfg["config"]["layers"]


def _named(cfg, name):
    return next(l for l in _layers(cfg) if l["config"].get("name") == name or l.get("name") == name)


def _refused_cheaply(exc, fn, *fragments, max_mb=64, max_s=10.0):
    """fn() raises exc with the fragments in its message, allocating at most max_mb
    (Python and NumPy allocations, tracemalloc) and within max_s."""
    tracemalloc.start()
    t = time.perf_counter()
    try:
        with pytest.raises(exc) as info:
            fn()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for frag in fragments:
        assert frag in str(info.value), str(info.value)
    assert peak < max_mb * 2**20, f"peak {peak / 2**20:.0f} MB before refusing"
    assert time.perf_counter() - t < max_s
    return str(info.value)


@pytest.mark.parametrize(
    "edit,frag",
    [
        (lambda c: _named(c, "c1")["config"].update(filters=10**9), "filters = 1000000000 is out of range"),
        (lambda c: _named(c, "d1")["config"].update(units=10**9), "units = 1000000000 is out of range"),
        (lambda c: _named(c, "c1")["config"].update(kernel_size=[10**9, 1]), "kernel height = 1000000000"),
        (lambda c: _named(c, "c1")["config"].update(strides=[0, 1]), "stride = 0"),
        (lambda c: _layers(c)[0]["config"].update(batch_shape=[None, 10**5, 10**5, 10**5]), "input"),
        (lambda c: _layers(c)[0]["config"].update(batch_shape=[None, 8192, 8192, 3]), "more than"),
        (lambda c: _layers(c)[0]["config"].update(batch_shape=[None, 2**63, 28, 1]), "input"),
        (lambda c: _named(c, "c1")["config"].update(filters=float("nan")), "filters must be an integer"),
        (lambda c: _named(c, "c1")["config"].update(filters=True), "filters must be an integer"),
        (
            lambda c: (_named(c, "c2")["config"].update(filters=60000), _named(c, "d1")["config"].update(units=2**20)),
            "more than 100000000 parameters",
        ),  # 10^12 weights declared
    ],
)
def test_absurd_sizes_are_refused_before_allocating(fixtures, tmp_path, edit, frag):  # noqa: F811
    p = _copy(fixtures, "k3_testnet", tmp_path)
    edit_config(p, edit)
    _refused_cheaply(ModelFileError, lambda: lenet.load(p), str(p), frag)


def test_a_million_layers_is_refused_before_any_work(fixtures):  # noqa: F811
    fx = fixture(fixtures, "k2_testnet_weights")
    cfg = json.loads(Path(fx.arch).read_text())
    dropout = {"class_name": "Dropout", "config": {"name": "drop", "rate": 0.1}}
    cfg["config"]["layers"] = cfg["config"]["layers"][:1] + [dropout] * 10**6 + cfg["config"]["layers"][1:]
    _refused_cheaply(ModelFileError, lambda: lenet.load(fx.weights, arch=cfg), "at most 1000")
    functional = {"class_name": "Functional", "config": {"layers": [dropout] * 10**6}}
    _refused_cheaply(ModelFileError, lambda: lenet.load(fx.weights, arch=functional), "at most 1000")


def test_weights_declaring_a_billion_values_are_not_read(fixtures, tmp_path):  # noqa: F811
    """A dataset whose declared shape is huge (stored nowhere: HDF5 allocates late) is
    refused on its shape, before a read."""
    p = _copy(fixtures, "k2_testnet", tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/c1/c1/kernel:0"]
        f.create_dataset("model_weights/c1/c1/kernel:0", shape=(10**9,), dtype="f4")
    _refused_cheaply(ModelFileError, lambda: lenet.load(p), "'c1'", "(1000000000,)")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused(fixtures, tmp_path, value):  # noqa: F811
    """Documented choice (SECURITY.md): NaN and infinite weights refuse the file; a model
    with them could only answer NaN or garbage."""
    p = _copy(fixtures, "k3_testnet", tmp_path)
    with h5py.File(p, "a") as f:
        names = []
        f["model_weights/d2"].visit(names.append)
        kernel = f["model_weights/d2"][next(n for n in names if n.endswith("kernel"))]
        a = kernel[()]
        a[3, 1] = value
        kernel[...] = a
    with pytest.raises(ModelFileError, match="NaN or infinite"):
        lenet.load(p)


@pytest.mark.parametrize("dtype", ["S8", "bool", "c8", "compound", "vlen-str"])
def test_weights_of_non_float_hdf5_types(fixtures, tmp_path, dtype):  # noqa: F811
    p = _copy(fixtures, "k2_testnet", tmp_path)
    with h5py.File(p, "a") as f:
        name = "model_weights/c1/c1/bias:0"
        del f[name]
        dt = {"compound": np.dtype([("a", "f4"), ("b", "i4")]), "vlen-str": h5py.string_dtype()}.get(dtype, dtype)
        f.create_dataset(name, shape=(4,), dtype=dt)
    with pytest.raises(ModelFileError, match="float16/32/64 expected"):
        lenet.load(p)


@pytest.mark.parametrize(
    "value,frag",
    [
        (np.array([1, 2, 3], np.int32), "not a list of strings"),
        (np.float64(3.0), "not a list of strings"),
        (np.array([b"c1", b"c1"]), "layers with weights"),  # duplicate names
        (np.array([b"c1", b"no_such_layer"]), "no_such_layer"),
    ],
)
def test_layer_names_attribute_of_wrong_type_or_content(fixtures, tmp_path, value, frag):  # noqa: F811
    p = _copy(fixtures, "k2_testnet", tmp_path)
    with h5py.File(p, "a") as f:
        f["model_weights"].attrs["layer_names"] = value
    with pytest.raises(ModelFileError, match=frag):
        lenet.load(p)


def test_corrupt_vlen_attribute_type_does_not_crash_libhdf5(fixtures, tmp_path):  # noqa: F811
    """Found by the model-bytes fuzzer: one bit of the 'layer_names' datatype (the
    variable-length kind: 1 = string, 5 = invalid) made libhdf5 1.14.6 segfault on the
    read. The loader now reads only string and numeric attributes."""
    p = _copy(fixtures, "k2_testnet", tmp_path)
    data = bytearray(p.read_bytes())
    at = data.find(b"layer_names\0")
    assert at > 0
    t = at + 16  # the name, NUL-padded to 8 bytes, then the datatype
    assert data[t] == 0x19 and data[t + 1] & 0x0F == 1, data[t : t + 4]  # version 1, class VLEN, kind string
    data[t + 1] = (data[t + 1] & 0xF0) | 5
    p.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="'layer_names' has an HDF5 datatype"):
        lenet.load(p)


def test_a_variable_length_value_claiming_gigabytes_is_refused_before_the_read(fixtures, tmp_path):  # noqa: F811
    """Found by the model-bytes fuzzer in a 60 s CI run: the length of one
    'layer_names' string changed to ~4 GB made libhdf5 allocate and fill 4 GB before
    it compared the length with the heap object. A string's disk form is (length 4
    bytes, heap collection address 8, object index 4)."""
    p = _copy(fixtures, "k2_testnet", tmp_path)
    data = bytearray(p.read_bytes())
    gcol = data.find(b"GCOL")
    assert gcol > 0
    ref = data.find(gcol.to_bytes(8, "little") + (1).to_bytes(4, "little"))  # the reference to object 1
    assert ref > 4
    data[ref - 4 : ref] = (0xFFFFFFF0).to_bytes(4, "little")
    p.write_bytes(bytes(data))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(ModelFileError, match="variable-length value .* claims 4,294,967,280 bytes"):
        lenet.load(p)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 1 << 20  # < 1 GiB more


def test_a_string_attribute_claiming_gigabytes_at_a_broken_address_is_refused(fixtures, tmp_path):  # noqa: F811
    """Found by the model-bytes fuzzer (fixed seed, 60 s): the 'backend' string's
    length ~4 GB and its heap address past the end of the file: libhdf5 allocated
    and filled the 4 GB before it looked at the address."""
    p = _copy(fixtures, "k2_testnet", tmp_path)
    data = bytearray(p.read_bytes())
    at = data.find(b"backend\0")
    head = at - 8  # attribute message version 1: sizes, then 8-byte-padded parts
    assert data[head] == 1, data[head : head + 8]
    name, dtype, space = (int.from_bytes(data[head + k : head + k + 2], "little") for k in (2, 4, 6))
    value = at + sum((n + 7) // 8 * 8 for n in (name, dtype, space))
    data[value : value + 12] = (0xFFFFFF00).to_bytes(4, "little") + (2**64 - 12).to_bytes(8, "little")
    p.write_bytes(bytes(data))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(ModelFileError, match="attribute 'backend' claims a 4,294,967,040-byte string"):
        lenet.load(p)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 1 << 20


@pytest.mark.parametrize("user_block", [False, True])
def test_a_local_heap_whose_free_list_loops_is_refused(fixtures, tmp_path, user_block):  # noqa: F811
    """Found by the model-bytes fuzzer in CI and again by a scan of every one-byte
    change of its seed files: a local heap (a group's link names) whose free block
    points back to itself made libhdf5 allocate a list node per turn until the
    machine ran out of memory (24 GB). Behind a 512-byte user block, addresses count
    from the superblock where libhdf5 finds it, not from an HDF5 signature planted
    earlier in the user block."""
    p = _copy(fixtures, "k2_testnet", tmp_path)
    data = bytearray(p.read_bytes())
    at = data.find(b"HEAP")
    while at != -1:  # a heap with a free block: (size, first free, address)
        first, segment = (int.from_bytes(data[at + k : at + k + 8], "little") for k in (16, 24))
        if first != 1:
            break
        at = data.find(b"HEAP", at + 4)
    assert at != -1, "no local heap with a free block in the fixture"
    data[segment + first : segment + first + 8] = first.to_bytes(8, "little")  # the block's next: itself
    if user_block:
        decoy = bytearray(512)
        decoy[64:88] = data[:24]
        data, at = decoy + data, at + 512
    p.write_bytes(bytes(data))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(ModelFileError, match=rf"local heap at byte {at} loops \(block at offset {first}\)"):
        lenet.load(p)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 1 << 20


def test_an_hdf5_file_with_other_address_sizes_is_refused(fixtures, tmp_path):  # noqa: F811
    """The checks of lenet/h5_guard.py read 8-byte addresses and lengths, as h5py
    writes them; a file declaring other sizes would be parsed by libhdf5 unchecked."""
    p = _copy(fixtures, "k2_testnet", tmp_path)
    data = bytearray(p.read_bytes())
    assert data[8] == 0 and data[13:15] == b"\x08\x08"  # superblock version 0: sizes at bytes 13, 14
    data[13] = 4
    p.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="4-byte addresses"):
        lenet.load(p)


@pytest.mark.parametrize("link", ["self", "parent", "dangling", "external"])
def test_links_that_loop_or_dangle(fixtures, tmp_path, link):  # noqa: F811
    p = _copy(fixtures, "k2_testnet", tmp_path)
    with h5py.File(p, "a") as f:
        del f["model_weights/c1"]
        g = f["model_weights"]
        g["c1"] = {
            "self": h5py.SoftLink("/model_weights/c1"),
            "parent": h5py.SoftLink("/model_weights"),
            "dangling": h5py.SoftLink("/nowhere"),
            "external": h5py.ExternalLink(str(tmp_path / "other.h5"), "/x"),
        }[link]
    with pytest.raises(ModelFileError, match="c1"):
        lenet.load(p)


# Functional graphs (Keras 2 config of k2_functional: i -> c1 -> s2 -> c3 -> s4 -> fl -> f5 -> f6).
def _inbound(cfg, name, *sources):
    _named(cfg, name)["inbound_nodes"] = [[[s, 0, 0, {}] for s in sources]]


@pytest.mark.parametrize(
    "edit,exc,frag",
    [
        (lambda c: _inbound(c, "c1", "s4"), ModelFileError, "cannot be reached"),  # cycle c1 -> .. -> s4 -> c1
        (lambda c: (_inbound(c, "c1", "c3"), _inbound(c, "s2", "c1")), ModelFileError, "cannot be reached"),
        (lambda c: _inbound(c, "c3", "c3"), ModelFileError, "cannot be reached"),  # self loop
        (lambda c: _inbound(c, "c3", "ghost"), ModelFileError, "unknown layer 'ghost'"),
        (lambda c: _inbound(c, "c3", "s2", "c1"), ModelFileError, "takes 1 input, got 2"),  # a merge into a conv
        (lambda c: c["config"].update(output_layers=[["c1", 0, 0]]), UnsupportedModelError, "one output"),
        (lambda c: c["config"].update(input_layers=[["c3", 0, 0]]), ModelFileError, "not an InputLayer"),
        (lambda c: _named(c, "s2").update(name="c1"), ModelFileError, "two layers are named 'c1'"),
    ],
)
def test_functional_graphs_with_cycles_branches_and_bad_names(fixtures, tmp_path, edit, exc, frag):  # noqa: F811
    p = _copy(fixtures, "k2_functional", tmp_path)
    edit_config(p, edit)
    msg = _refused_cheaply(exc, lambda: lenet.load(p), str(p))
    assert frag in msg


def test_cycle_without_the_output_terminates(fixtures, tmp_path):  # noqa: F811
    """c3 and s4 feed each other and nothing reaches the output: refused, no endless walk."""
    p = _copy(fixtures, "k2_functional", tmp_path)
    edit_config(p, lambda c: (_inbound(c, "c3", "s4"), _inbound(c, "fl", "s2")))
    with pytest.raises(lenet.ModelError):
        lenet.load(p)


def test_duplicate_names_in_sequential_still_load_by_order(fixtures, tmp_path):  # noqa: F811
    """Sequential models match weights by order, as Keras does: two layers of one name are
    not ambiguous there, so the model loads and gives the same answers."""
    fx = fixture(fixtures, "k2_testnet_weights")
    cfg = json.loads(Path(fx.arch).read_text())
    for l in _layers(cfg)[1:]:
        l["config"]["name"] = "same"
    want = lenet.Engine(lenet.load(fx.weights, arch=str(fx.arch)), device="cpu").predict_proba(fx.x[:8])
    got = lenet.Engine(lenet.load(fx.weights, arch=cfg), device="cpu").predict_proba(fx.x[:8])
    assert np.array_equal(got, want)


@pytest.mark.parametrize(
    "act",
    [
        "celu",
        "hard_tanh",
        "",
        5,
        None,
        {"class_name": "PReLU", "config": {}},
        {"module": "keras.activations", "class_name": "function", "config": "sparsemax"},
    ],
)
def test_unknown_activations(fixtures, tmp_path, act):  # noqa: F811
    p = _copy(fixtures, "k3_testnet", tmp_path)
    edit_config(p, lambda c: _named(c, "d1")["config"].update(activation=act))
    if act is None:  # Keras' default: linear
        lenet.load(p)
        return
    with pytest.raises((UnsupportedModelError, ModelFileError), match="'d1'") as info:
        lenet.load(p)
    assert "activation" in str(info.value)


def test_missing_groups_everywhere(fixtures, tmp_path):  # noqa: F811
    """Every group and dataset of a real file deleted in turn: each gives a lenet error
    (or, for what the loader does not need, a model that still loads)."""
    src = _copy(fixtures, "k3_functional", tmp_path)
    names = []
    with h5py.File(src, "r") as f:
        f.visit(names.append)
    outcomes = {}
    for name in names:
        p = tmp_path / "cut.h5"
        shutil.copy(src, p)
        with h5py.File(p, "a") as f:
            del f[name]
        try:
            lenet.load(p)
            outcomes[name] = "ok"
        except lenet.Error as e:
            outcomes[name] = type(e).__name__
    assert len(outcomes) == len(names) > 10
    # Every weight and every weighted layer's group is needed.
    assert all(
        v == "ModelFileError"
        for k, v in outcomes.items()
        if k.startswith("model_weights/") and ("kernel" in k or "bias" in k)
    ), outcomes


@pytest.mark.parametrize("how", ["external link", "external storage", "virtual dataset", "root external link"])
def test_the_loader_reads_no_other_file(fixtures, tmp_path, how):  # noqa: F811
    """A model file may not make the loader open another file: a FIFO would hang it, a
    device or a private file would be read as weights. (A plain file here, so that a
    regression fails the test instead of hanging it.)"""
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as g:
        g["x"] = np.ones(4, np.float32)
        g.copy(h5py.File(_copy(fixtures, "k2_testnet", tmp_path), "r")["model_weights"], "model_weights")
    fifo = other
    p = _copy(fixtures, "k2_testnet", tmp_path)
    with h5py.File(p, "a") as f:
        name = "model_weights/c1/c1/bias:0"
        del f[name]
        if how == "external link":
            f[name] = h5py.ExternalLink(str(fifo), "/x")
        elif how == "external storage":
            f.create_dataset(name, shape=(4,), dtype="f4", external=[(str(fifo), 0, 16)])
        elif how == "virtual dataset":
            layout = h5py.VirtualLayout(shape=(4,), dtype="f4")
            layout[:] = h5py.VirtualSource(str(fifo), "x", shape=(4,))
            f.create_virtual_dataset(name, layout)
        else:
            f["model_weights_real"] = f["model_weights"]
            del f["model_weights"]
            f["model_weights"] = h5py.ExternalLink(str(fifo), "/model_weights")
    t = time.perf_counter()
    with pytest.raises(ModelFileError, match="external link|other files"):
        lenet.load(p)
    assert time.perf_counter() - t < 10
