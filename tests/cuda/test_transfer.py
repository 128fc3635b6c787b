"""cuda_path="fast": how a plan's input reaches the GPU and its answers come back
(csrc/backends/cuda/transfer.h), built before any GPU ran it.

Without a GPU: which transfer each plan takes and why, the parameter blob's sizes, the
chunks of a large batch and their streams, the host's copies over threads (and the
values checked as they go), the completion flag's protocol and the host's wait on it
(its error paths included), the registry of the caller's pinned buffers, and the fused
kernel's arithmetic on each transfer (the launch's blob as the stream packs it). With a
GPU: the real thing against the CPU and the verified path, every transfer and input kind,
bad input, the caller's pinned buffer, concurrent callers."""

import threading

import numpy as np
import pytest

import lenet
from lenet import _native

cm = _native.cuda_module
built = pytest.mark.skipif(cm is None, reason=f"CUDA backend not loaded: {_native.cuda_missing_reason}")
RNG = np.random.default_rng(52)


def _net(name):
    return lenet.load(name).network


# ---- which transfer a plan takes (no GPU needed) --------------------------------------------


@built
@pytest.mark.parametrize("name", ["lenet5", "lenet-keras"])
def test_the_fused_kernels_transfers_by_capacity(name):
    """float32 (3,136 bytes an image) and uint8 (784): the launch parameter while a full
    batch fits the largest blob (31,744 bytes), mapped memory up to 256 KiB, chunks above."""
    net = _net(name)
    want = {
        1: ("parameter", "parameter"),
        8: ("parameter", "parameter"),
        16: ("mapped", "parameter"),
        32: ("mapped", "parameter"),
        64: ("mapped", "mapped"),
        256: ("chunked", "mapped"),
        512: ("chunked", "chunked"),
        4096: ("chunked", "chunked"),
    }
    for capacity, (values, pixels) in want.items():
        t = cm.transfer(net, capacity)
        assert t["fused"], t
        assert (t["values"], t["pixels"]) == (values, pixels), (capacity, t)
        assert t["why"].count(";") == 1 and "float32" in t["why"] and "uint8" in t["why"], t


@built
@pytest.mark.parametrize("name", ["lenet5", "lenet-keras"])
def test_a_chunked_plans_tile_is_chosen_for_its_chunks_launches(name):
    """A plan chunked on 'fast' launches the kernel a chunk at a time: its tile (images per
    block) is chosen for a chunk's rows, so that each launch still has the blocks the rule
    asks (min_blocks, or one image a block). Sized for the whole 4,096, a 512-row chunk got
    8 images a block: 64 blocks on a GPU of 132 SMs (issue 67). The verified path, which
    launches whole batches, keeps its tile."""
    net = _net(name)
    min_blocks = 264
    for capacity in (256, 1024, 4096):
        rows = cm.fused_launch_rows("fast", capacity, 784)
        assert rows == min(cm.chunk_rows(capacity, 3136), cm.chunk_rows(capacity, 784)) < capacity
        ipb = cm.fused_plan(net, capacity, min_blocks=min_blocks, path="fast")["images_per_block"]
        assert ipb == 1 or -(-rows // ipb) >= min_blocks, (capacity, rows, ipb)
    assert cm.fused_launch_rows("fused", 4096, 784) == 4096  # whole batches
    assert cm.fused_launch_rows("fast", 64, 784) == 64  # 200 KB of float32: mapped, one launch
    assert cm.fused_plan(net, 4096, min_blocks=min_blocks, path="fused")["images_per_block"] == 8


@built
def test_layered_plans_take_mapped_memory_while_small_else_the_verified_staging():
    net = _net("lenet-tf")  # beyond the fused kernel's size rule
    for capacity in (1, 8, 64):
        t = cm.transfer(net, capacity)
        assert not t["fused"] and t["values"] == t["pixels"] == "mapped", t
        assert "completion flag" in t["why"]
    for capacity in (128, 4096):
        t = cm.transfer(net, capacity)
        assert t["values"] == t["pixels"] == "staged" and "no chunks" in t["why"], t
    # 'library' keeps the fused kernel away: layered transfers for lenet5 too
    t = cm.transfer(_net("lenet5"), 1, path="library")
    assert t["values"] == "staged" and "verified" in t["why"]


@built
@pytest.mark.parametrize("path", ["auto", "fused", "library"])
def test_every_other_path_keeps_the_verified_staging(path):
    for name in lenet.SHIPPED_MODELS:
        for capacity in (1, 64, 4096):
            t = cm.transfer(_net(name), capacity, path=path)
            assert t["values"] == t["pixels"] == "staged", (name, capacity, t)
            assert t["why"] == f"cuda_path='{path}': the path verified on a GPU"


@built
def test_the_parameter_transfer_needs_one_image_a_block():
    """A GPU of few SMs tiles small batches too; the parameter kernel runs one image a
    block (blockIdx.x is the image), so such plans read mapped memory instead."""
    net = _net("lenet5")
    t = cm.transfer(net, 8, min_blocks=1)
    assert t["values"] == t["pixels"] == "mapped" and "tiles of 8 images" in t["why"], t


@built
def test_parameter_blobs():
    blob = cm.parameter_blob
    assert [blob(b) for b in (0, 1, 784, 4096)] == [4096] * 4
    assert [blob(b) for b in (4097, 16384)] == [16384] * 2
    assert [blob(b) for b in (16385, 25088, 31744)] == [31744] * 3
    assert blob(31745) == 0 and blob(10**9) == 0


# ---- chunks, streams and the host's copies ---------------------------------------------------


@built
@pytest.mark.parametrize(
    "n,rows,streams", [(0, 5, 2), (1, 5, 2), (10, 3, 2), (4096, 512, 2), (4095, 669, 3), (7, 7, 1)]
)
def test_a_chunk_schedule_covers_every_row_once_in_order_round_robin(n, rows, streams):
    chunks = cm.chunk_schedule(n, rows, streams)
    assert sum(count for _, count, _ in chunks) == n
    at = 0
    for k, (first, count, stream) in enumerate(chunks):
        assert first == at and 1 <= count <= rows and stream == k % streams
        at += count
    assert all(count == rows for _, count, _ in chunks[:-1])  # only the last is shorter


@built
def test_a_schedule_of_no_rows_or_no_streams_is_refused():
    with pytest.raises(lenet.InputError, match="rows and streams must be positive"):
        cm.chunk_schedule(10, 0, 2)
    with pytest.raises(lenet.InputError, match="rows and streams must be positive"):
        cm.chunk_schedule(10, 4, 0)


@built
def test_chunk_rows_keep_chunks_big_enough_and_about_eight_a_batch():
    assert cm.chunk_rows(4096, 3136) == 512  # 8 chunks of 1.6 MB (lenet5 float32)
    assert cm.chunk_rows(4096, 784) == 669  # 512 KiB at least (uint8): 7 chunks
    assert cm.chunk_rows(128, 3136) == 128  # a whole batch under 512 KiB: one chunk
    for capacity in (1, 64, 1000, 4096):
        for row in (1, 784, 3136, 10**6):
            rows = cm.chunk_rows(capacity, row)
            assert 1 <= rows <= capacity
            assert rows == capacity or rows * row >= 512 * 1024 or rows >= -(-capacity // 8)


@built
@pytest.mark.parametrize("threads", [1, 4])
def test_host_copies_over_threads_copy_every_row_and_find_the_first_bad_one(threads):
    x = RNG.standard_normal((2000, 784)).astype(np.float32)  # 6 MB: parts over every thread
    out, bad = cm.copy_rows(x, threads)
    np.testing.assert_array_equal(out, x)
    assert bad == -1
    for rows, value in (([1999], np.inf), ([1500, 3], np.nan), ([0, 1999], -np.inf)):
        y = x.copy()
        y[rows, 5] = value
        out, bad = cm.copy_rows(y, threads)
        assert bad == min(rows)
        np.testing.assert_array_equal(out, y)  # copied whole, so the order of rows is kept
        assert cm.copy_rows(y, threads, copy=False) == (None, min(rows))  # the caller's pinned buffer: checked only
    px = RNG.integers(0, 256, (3000, 784), dtype=np.uint8)
    out, bad = cm.copy_rows(px, threads)
    np.testing.assert_array_equal(out, px)
    assert bad == -1  # bytes are never checked


# ---- the completion flag and the host's wait --------------------------------------------------


@built
def test_the_completion_flag_is_raised_once_by_the_last_block():
    steps = cm.completion_steps(4, 7)
    # call 7: blocks 1..3 counted, the flag still 0; the 4th resets the count and raises 7
    assert steps[:4] == [(1, 0), (2, 0), (3, 0), (0, 7)]
    # the next call starts from a zero count: its flag too comes with its last block only
    assert steps[4:] == [(1, 7), (2, 7), (3, 7), (0, 8)]
    assert cm.completion_steps(1, 3) == [(0, 3), (0, 4)]


@built
def test_the_wait_returns_on_the_calls_own_number_only():
    got = cm.wait_script([6, 6, 6, 7], [], 7)  # 6: the previous call's flag, still there
    assert got == {"reads": 4, "queries": 0, "yields": 0}
    # 100 us of waiting: the stream asked after 20 us, then every 20 us
    got = cm.wait_script([0] * 100 + [9], ["running"] * 10, 9, step_us=1.0)
    assert got["reads"] == 101 and got["queries"] == 5 and got["yields"] == 0


@built
def test_a_failed_kernel_is_an_error_not_a_hang():
    with pytest.raises(lenet.CudaError, match="cudaErrorIllegalAddress"):
        cm.wait_script([0], ["running", "failed"], 1)


@built
def test_a_stream_done_without_the_flag_is_an_error():
    with pytest.raises(lenet.CudaError, match=r"without raising its completion flag \(expected 5, read 4\)"):
        cm.wait_script([4], ["idle"], 5)
    # raised just as the stream went idle: read once more, and that is the answer
    got = cm.wait_script([0] * 20 + [5], ["idle"], 5)
    assert got["queries"] == 1


@built
def test_a_long_wait_gives_the_cpu_away():
    got = cm.wait_script([0] * 5000 + [2], [], 2, step_us=1.0)
    assert got["yields"] > 0 and got["queries"] > 90


# ---- the caller's pinned buffers ---------------------------------------------------------------


@built
def test_a_pinned_buffer_is_found_by_any_input_inside_it():
    regions = [(1000, 100, 50_000), (2000, 64, 90_000)]
    queries = [(1000, 100), (1040, 60), (1040, 61), (999, 1), (1100, 0), (2000, 64), (1500, 8), (2063, 1)]
    assert cm.host_buffer_lookup(regions, queries) == [50_000, 50_040, None, None, 50_100, 90_000, None, 90_063]
    # once freed, no longer read in place
    assert cm.host_buffer_lookup(regions, [(1000, 10), (2000, 10)], removed=[1000]) == [None, 90_000]


def test_input_buffer_on_the_cpu_is_plain_memory_that_outlives_its_engine():
    eng = lenet.Engine("lenet5", device="cpu", threads=1)
    buf = eng.input_buffer(5)
    assert buf.shape == (5, 28, 28, 1) and buf.dtype == np.float32 and buf.flags.c_contiguous
    x = RNG.random((5, 28, 28, 1), dtype=np.float32)
    buf[...] = x
    np.testing.assert_array_equal(eng.predict_proba(buf[:3]), eng.predict_proba(x[:3]))
    rows = eng.input_buffer(2, np.uint8)
    assert rows.shape == (2, 28, 28, 1) and rows.dtype == np.uint8
    rows[...] = 200
    np.testing.assert_array_equal(
        eng.row_probabilities(rows), eng.row_probabilities(np.full((2, 28, 28, 1), 200, np.uint8))
    )
    eng.close()
    buf[...] = 1.0  # still ours
    assert float(buf.sum()) == buf.size
    assert lenet.Engine("lenet5", device="cpu", threads=1).input_buffer(0).shape == (0, 28, 28, 1)


@pytest.mark.parametrize(
    "n,dtype,match",
    [
        (-1, np.float32, "number of inputs"),
        (True, np.float32, "number"),
        (2, np.float64, "float32 inputs or uint8 rows"),
    ],
)
def test_input_buffer_refuses_what_it_cannot_hold(n, dtype, match):
    with pytest.raises(lenet.InputError, match=match):
        lenet.Engine("lenet5", device="cpu", threads=1).input_buffer(n, dtype)


def test_cuda_path_fast_is_taken_on_every_device():
    eng = lenet.Engine("lenet5", device="cpu", cuda_path="fast")  # a CUDA option: taken, unused
    assert eng.predict_proba(np.zeros((1, 28, 28, 1))).shape == (1, 10)


# ---- the fused kernel on each transfer, emulated (no GPU needed) ------------------------------


@built
@pytest.mark.parametrize("name", ["lenet5", "lenet-keras"])
@pytest.mark.parametrize("n,capacity", [(1, 1), (3, 8), (8, 8)])
def test_the_kernel_on_its_launch_parameter_gives_the_same_bits(name, n, capacity, mnist_test):
    """The blob as the stream packs it (the images, then bytes nothing may read: 0xff)
    gives the staged call's answers to the bit, raises the flag with the call's number and
    leaves the count at 0 for the next launch."""
    engine = lenet.Engine(name, device="cpu", threads=1)
    px = mnist_test[0][:n].reshape(n, -1)
    x = px.astype(np.float32) * np.float32(engine.input_scale)
    staged = cm.fused_emulate_call(engine.model.network, x, capacity, "staged")
    assert staged["flag"] == 0 and staged["blob_bytes"] == 0  # staged: the stream is synchronized instead
    for transfer in ("parameter", "mapped"):
        got = cm.fused_emulate_call(engine.model.network, x, capacity, transfer, seq=41)
        np.testing.assert_array_equal(got["y"], staged["y"])
        assert got["flag"] == 41 and got["arrived"] == 0 and got["images_per_block"] == 1
    got = cm.fused_emulate_call(engine.model.network, x, capacity, "parameter")
    assert got["blob_bytes"] == cm.parameter_blob(x.nbytes)
    # uint8 pixels in the blob, scaled by the kernel: the float32 values' answers
    pixels = cm.fused_emulate_call(engine.model.network, px, capacity, "parameter", scale=float(engine.input_scale))
    np.testing.assert_array_equal(pixels["y"], staged["y"])
    want = engine.row_probabilities(mnist_test[0][:n, :, :, None])
    assert np.abs(staged["y"] - want).max() <= 1e-5


@built
def test_a_blob_too_small_for_the_batch_is_refused():
    x = np.zeros((16, 784), np.float32)  # 50,176 bytes: no blob holds it
    with pytest.raises(lenet.InputError, match="no parameter blob holds 50176 bytes"):
        cm.fused_emulate_call(_net("lenet5"), x, 16, "parameter")
    with pytest.raises(lenet.InputError, match="tiles of one image only"):  # a GPU of 4 SMs: tiles of 8
        cm.fused_emulate_call(_net("lenet5"), np.zeros((4, 784), np.float32), 4096, "parameter", min_blocks=8)


@built
def test_a_multi_block_launch_raises_its_flag_once_all_blocks_stored():
    """A mapped launch of 37 images: 37 blocks of one image (5 of 8 at capacity 4096)."""
    net = _net("lenet5")
    x = RNG.random((37, 784), dtype=np.float32)
    for capacity in (64, 4096):
        got = cm.fused_emulate_call(net, x, capacity, "mapped", seq=3)
        assert got["flag"] == 3 and got["arrived"] == 0
        np.testing.assert_array_equal(got["y"], cm.fused_emulate_call(net, x, capacity, "staged")["y"])


# ---- on the GPU ----------------------------------------------------------------------------------


def _pixels(mnist_test, n):
    images = mnist_test[0]
    reps = -(-n // len(images))
    return np.concatenate([images] * reps)[:n, :, :, None]


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", lenet.SHIPPED_MODELS)
@pytest.mark.parametrize("batch", [1, 7, 8, 9, 33, 64, 300, 1000, 5000])
def test_fast_agrees_with_the_cpu_and_the_verified_path(name, batch, mnist_test):
    px = _pixels(mnist_test, batch)
    want = lenet.Engine(name, device="cpu").row_probabilities(px)
    with lenet.Engine(name, device="cuda", cuda_path="fast") as fast, lenet.Engine(name, device="cuda") as verified:
        x = px.astype(np.float32) * np.float32(fast.input_scale)
        from_values, from_pixels = fast.predict_proba(x), fast.row_probabilities(px)
        again = fast.predict_proba(x)  # the second call: the flag's next number, a replayed graph
        reference = verified.predict_proba(x)
        plans = fast.describe()["plans"]
    for got in (from_values, from_pixels, again):
        assert (got.argmax(1) == want.argmax(1)).all()
        assert np.abs(got - want).max() <= 1e-5
        assert np.abs(got - reference).max() <= 1e-5
    np.testing.assert_array_equal(from_pixels, from_values)
    np.testing.assert_array_equal(again, from_values)
    for p in plans:
        predicted = cm.transfer(lenet.load(name).network, p["capacity"])
        words = predicted["values"] if predicted["values"] == predicted["pixels"] else None
        assert p["transfer_why"] == predicted["why"], p
        if words:
            assert p["transfer"] == words, p
        assert p["execution"] == ("launch" if predicted["fused"] else "graph"), p


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", ["lenet5", "lenet-keras"])
def test_fast_answers_each_call_with_its_own_inputs_never_stale_ones(name, mnist_test, monkeypatch):
    """Consecutive calls on one plan alternate two sets of digits, so that a call returning
    the previous call's answers (a flag race, a missed wait) fails; the answers are filled
    with NaN before each launch (LENET_CUDA_TEST_POISON_OUTPUT), so that a call returning
    before its own are written fails the finite check. Each answer is the fused path's: to
    the bit where both plans have the same tile (one image a block), else within float32's
    rounding (a dense layer's partial sums follow the threads a block: 1,024 or 256)."""
    monkeypatch.setenv("LENET_CUDA_TEST_POISON_OUTPUT", "1")
    images = mnist_test[0][..., None]
    with (
        lenet.Engine(name, device="cuda", cuda_path="fast") as fast,
        lenet.Engine(name, device="cuda", cuda_path="fused") as fused,
    ):
        scale = np.float32(fast.input_scale)
        for batch in (1, 8, 37, 64, 300, 4096):
            sets = [images[:batch], images[::-1][:batch]]
            want = [fused.row_probabilities(px) for px in sets]
            same_tile = batch <= 64
            for k in range(6):
                px = sets[k % 2]
                got = fast.row_probabilities(px) if k % 3 else fast.predict_proba(px.astype(np.float32) * scale)
                assert np.isfinite(got).all()
                if same_tile:
                    np.testing.assert_array_equal(got, want[k % 2], err_msg=f"batch {batch}, call {k}")
                else:
                    assert np.abs(got - want[k % 2]).max() <= 1e-6, (batch, k)
                assert np.abs(got - want[1 - k % 2]).max() > 1e-3  # the other set's: a stale answer fails


@pytest.mark.requires_cuda
@pytest.mark.parametrize("name", ["lenet5", "lenet-tf"])
@pytest.mark.parametrize("batch,bad", [(1, 0), (8, 5), (40, 39), (3000, 2500), (4096, 1)])
def test_fast_refuses_nan_naming_the_image_and_goes_on(name, batch, bad, mnist_test):
    px = _pixels(mnist_test, batch)
    with lenet.Engine(name, device="cuda", cuda_path="fast") as eng:
        x = px.astype(np.float32) * np.float32(eng.input_scale)
        y = x.copy()
        y[bad, 3, 4, 0] = np.nan
        with pytest.raises(lenet.InputError, match=f"image {bad} of the batch holds NaN or infinite values"):
            eng.predict_proba(y)
        got = eng.predict_proba(x)  # the engine is still whole
    want = lenet.Engine(name, device="cpu").predict_proba(x)
    assert np.abs(got - want).max() <= 1e-5


@pytest.mark.requires_cuda
@pytest.mark.parametrize("batch", [1, 64, 4096])
def test_the_callers_pinned_buffer_is_read_in_place(batch, mnist_test):
    px = _pixels(mnist_test, batch)
    before = cm.memory()["lenet_pinned"]
    with lenet.Engine("lenet5", device="cuda", cuda_path="fast") as eng:
        buf = eng.input_buffer(batch)
        rows = eng.input_buffer(batch, np.uint8)
        x = px.astype(np.float32) * np.float32(eng.input_scale)
        buf[...] = x
        rows[...] = px
        np.testing.assert_array_equal(eng.predict_proba(buf), eng.predict_proba(x))
        np.testing.assert_array_equal(eng.row_probabilities(rows), eng.predict_proba(x))
        buf[batch // 2, 0, 0, 0] = np.inf  # checked in place too
        with pytest.raises(lenet.InputError, match=f"image {batch // 2} of the batch"):
            eng.predict_proba(buf)
    assert cm.memory()["lenet_pinned"] >= before + buf.nbytes + rows.nbytes  # the arrays own it, not the engine
    buf[...] = 0  # still writable after close
    del buf, rows
    assert cm.memory()["lenet_pinned"] == before


@pytest.mark.requires_cuda
def test_fast_serves_concurrent_callers(mnist_test):
    px = _pixels(mnist_test, 2000)
    eng = lenet.Engine("lenet5", device="cuda", cuda_path="fast")
    want = lenet.Engine("lenet5", device="cpu").row_probabilities(px)
    errors = []

    def call(k):
        try:
            for b in (1, 8, 64, 2000)[k % 4 :] + (1,):
                got = eng.row_probabilities(px[:b])
                assert np.abs(got - want[:b]).max() <= 1e-5
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    eng.close()
    assert not errors, errors


@pytest.mark.requires_cuda
@pytest.mark.parametrize("path", ["fused", "fast"])
def test_engines_of_every_model_alive_together_each_keep_their_kernels_shared_memory(path, mnist_test):
    # The fused kernels' shared memory allowance is the process's, not a plan's: an engine
    # planned after another, needing less, must not take the first one's away.
    px = _pixels(mnist_test, 300)
    engines = {name: lenet.Engine(name, device="cuda", cuda_path=path) for name in lenet.SHIPPED_MODELS}
    try:
        for batch in (1, 9, 300):
            for name in [*lenet.SHIPPED_MODELS, *reversed(lenet.SHIPPED_MODELS)]:
                got = engines[name].row_probabilities(px[:batch])
                want = lenet.Engine(name, device="cpu").row_probabilities(px[:batch])
                assert (got.argmax(1) == want.argmax(1)).all(), (name, batch)
                assert np.abs(got - want).max() <= 1e-5, (name, batch)
    finally:
        for eng in engines.values():
            eng.close()
