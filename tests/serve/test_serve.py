"""lenet-serve (lenet.serve, issue 22): the HTTP API, its limits and metrics, the dynamic
batcher (each response carries its own image's answer), and the console script."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import urllib.request

import cv2
import numpy as np
import pytest
from conftest import REPO
from serve_process import LenetServe

import lenet

pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'lenet[serve]')")
httpx = pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from lenet.serve import Options, create_app  # noqa: E402
from lenet.serve.batcher import Batcher, Overloaded  # noqa: E402

EXAMPLES = sorted((REPO / "examples").glob("digit-*.png"))


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine, Options(max_body_bytes=1 << 20))) as c:
        yield c


def test_an_image_as_the_body_gets_the_engines_answer(client, engine):
    data = EXAMPLES[7].read_bytes()
    r = client.post("/v1/classify?top_k=3&image=1", content=data, headers={"Content-Type": "image/png"})
    assert r.status_code == 200, r.text
    j = r.json()
    want = engine.infer(data)
    assert j["digit"] == 7 == want.digit and j["mode"] == want.mode
    # float32 written as the shortest decimal that reads back to it: the engine's own values.
    np.testing.assert_array_equal(np.float32(j["probabilities"]), want.probabilities)
    assert np.float32(j["confidence"]) == want.probabilities[7]
    assert [t["digit"] for t in j["top"]] == [d for d, _ in want.top(3)]
    seen = cv2.imdecode(np.frombuffer(base64.b64decode(j["input_png"]), np.uint8), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(seen, want.image)
    assert j["latency_ms"] > 0


def test_multipart_json_and_arrays(client, engine):
    files = [("files", (p.name, p.read_bytes(), "image/png")) for p in EXAMPLES[:3]]
    files.append(("files", ("bad.png", b"not an image", "image/png")))
    j = client.post("/v1/classify", files=files).json()
    assert [x.get("digit") for x in j["results"]] == [0, 1, 2, None]
    assert j["results"][3]["source"] == "bad.png" and "not an image lenet decodes" in j["results"][3]["error"]
    b64 = [base64.b64encode(p.read_bytes()).decode() for p in EXAMPLES[4:6]]
    assert client.post("/v1/classify", json={"image": "data:image/png;base64," + b64[0]}).json()["digit"] == 4
    assert [x["digit"] for x in client.post("/v1/classify", json={"images": b64}).json()["results"]] == [4, 5]
    digit = cv2.imread(str(EXAMPLES[8]), cv2.IMREAD_GRAYSCALE)
    r = client.post("/v1/classify", json={"array": digit.tolist()}).json()
    assert r["digit"] == 8 and r["probabilities"] == pytest.approx(engine.infer(digit).probabilities.tolist(), abs=1e-6)


@pytest.mark.parametrize(
    "headers,body,status,text",
    [
        ({"Content-Type": "application/json"}, b"{not json", 422, "not JSON"),
        ({"Content-Type": "application/json"}, b'{"picture": 1}', 422, '"image"'),
        ({"Content-Type": "application/json"}, b'{"image": 7}', 422, "base64 string"),
        ({"Content-Type": "application/json"}, b'{"image": "%%%"}', 422, "not base64"),
        ({"Content-Type": "application/json"}, b'{"array": [[1, 2], [3]]}', 422, "not an array of numbers"),
        ({"Content-Type": "text/plain"}, b"7", 415, "text/plain"),
        ({"Content-Type": "image/png"}, b"", 422, "empty body"),
        ({"Content-Type": "image/png"}, b"hello, not an image", 422, "not an image lenet decodes"),
        ({"Content-Type": "image/png"}, b"GIF89a but not really", 413, "exceeds the limit"),  # a bomb's header
        ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x\r\nnonsense", 422, "multipart"),
        ({"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + b"\0" * 40, 422, "PNG"),
    ],
)
def test_bad_requests_get_a_clear_error(client, headers, body, status, text):
    r = client.post("/v1/classify", content=body, headers=headers)
    assert r.status_code == status and text in r.json()["error"], (r.status_code, r.text)


@pytest.mark.parametrize(
    "query, text",
    [
        ("top_k=0", "top_k must be in 1..10"),
        ("top_k=abc", "an integer"),
        ("top_k=2.5", "an integer"),
        ("image=maybe", "true or false"),
    ],
)
def test_a_bad_query_gets_a_clear_error(client, query, text):
    r = client.post(f"/v1/classify?{query}", content=EXAMPLES[7].read_bytes(), headers={"Content-Type": "image/png"})
    assert r.status_code == 422 and text in r.json()["error"], r.text


def test_small_images_on_the_event_loop_and_big_ones_on_threads_answer_alike(client, engine):
    """A 28x28 PNG is prepared on the event loop, a photo on a worker thread
    (app.INLINE_PIXELS); both give the engine's own answer."""
    from lenet.serve import app as serve_app

    small = EXAMPLES[3].read_bytes()
    big = cv2.imencode(".png", 255 - cv2.resize(cv2.imread(str(EXAMPLES[3]), cv2.IMREAD_GRAYSCALE), (200, 200)))[1]
    assert serve_app._small([small]) and not serve_app._small([big.tobytes()])
    assert not serve_app._small([b"not an image"])  # left to the worker, which names the error
    for data in (small, big.tobytes()):
        j = client.post("/v1/classify", content=data, headers={"Content-Type": "image/png"}).json()
        want = engine.infer(data)
        assert j["digit"] == want.digit == 3 and j["mode"] == want.mode
        np.testing.assert_allclose(j["probabilities"], want.probabilities, atol=1e-6)


def test_limits(engine):
    with TestClient(create_app(engine, Options(max_body_bytes=1000))) as c:
        big = EXAMPLES[0].read_bytes() * 10
        r = c.post("/v1/classify", content=big, headers={"Content-Type": "image/png"})
        assert r.status_code == 413 and "1,000" in r.json()["error"]
        assert c.post("/v1/classify?top_k=11", content=b"x").status_code == 422
    # A declared length past the limit is refused before the body is read.
    with TestClient(create_app(engine)) as c:
        r = c.post("/v1/classify", content=b"x", headers={"Content-Type": "image/png", "Content-Length": str(1 << 40)})
        assert r.status_code == 413
        lenet.set_max_image_pixels(100)
        try:
            r = c.post("/v1/classify", content=EXAMPLES[0].read_bytes(), headers={"Content-Type": "image/png"})
        finally:
            lenet.set_max_image_pixels(None)
        assert r.status_code == 413 and "exceeds the limit" in r.json()["error"]
        blank = cv2.imencode(".png", np.full((200, 300), 240, np.uint8))[1].tobytes()
        r = c.post("/v1/classify", content=blank, headers={"Content-Type": "image/png"})
        with pytest.raises(lenet.InputError) as e:
            engine.infer(blank)
        # What lenet-cli prints, with the request's body as its source.
        assert r.status_code == 422 and r.json()["error"] == str(e.value).replace("<bytes>", "<body>")


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(engine, mnist_test):
    images, _ = mnist_test
    pngs = [cv2.imencode(".png", img)[1].tobytes() for img in images[:256]]
    want = engine.infer(images[:256], mode="mnist")
    app = create_app(engine, Options(max_batch=64, max_delay_us=2000))

    async def run():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://lenet") as c:
            rs = await asyncio.gather(
                *[c.post("/v1/classify", content=p, headers={"Content-Type": "image/png"}) for p in pngs]
            )
            metrics = (await c.get("/metrics")).text
        return rs, metrics

    rs, metrics = asyncio.run(run())
    for r, w in zip(rs, want):
        assert r.status_code == 200
        assert r.json()["digit"] == w.digit
        np.testing.assert_allclose(r.json()["probabilities"], w.probabilities, atol=1e-6)
    stats = app.state.server.batcher.stats
    assert stats.images == 256 and stats.batches < 256 and max(stats.batch_sizes) > 1  # batched
    assert "lenet_images_total 256" in metrics and 'lenet_requests_total{status="200"} 256' in metrics
    assert "lenet_batch_size_bucket" in metrics and "lenet_request_seconds_count 256" in metrics


def test_a_full_queue_answers_503_and_the_batcher_survives_errors():
    release = threading.Event()

    def slow(x):
        release.wait(10)
        if x[0, 0] < 0:
            raise RuntimeError("engine failed")
        return x[:, :2] * 2

    batcher = Batcher(slow, max_batch=4, max_queue=2)

    async def run():
        first = asyncio.ensure_future(batcher.submit(np.ones((1, 3), np.float32)))
        await asyncio.sleep(0.1)  # the first is in the engine now
        second = asyncio.ensure_future(batcher.submit(np.ones((2, 3), np.float32)))
        await asyncio.sleep(0.05)
        with pytest.raises(Overloaded):
            await batcher.submit(np.ones((1, 3), np.float32))
        release.set()
        a, b = await first, await second
        with pytest.raises(RuntimeError, match="engine failed"):
            await batcher.submit(-np.ones((1, 3), np.float32))
        c = await batcher.submit(np.full((1, 3), 3, np.float32))
        return a, b, c

    a, b, c = asyncio.run(run())
    assert a.shape == (1, 2) and b.shape == (2, 2) and c.tolist() == [[6, 6]]
    assert batcher.stats.rejected == 1
    batcher.close()


def test_a_cheap_request_runs_at_once_when_the_batcher_is_idle():
    """inline_images: on the caller's thread (the event loop) when nothing is queued or
    running; queued for the batcher's thread otherwise, and when it is too big."""
    threads = []
    release = threading.Event()

    def run(x):
        threads.append(threading.current_thread().name)
        if x[0, 0] == 9:
            release.wait(10)
        return x[:, :2] * 2

    batcher = Batcher(run, max_batch=8, inline_images=2)

    async def go():
        a = await batcher.submit(np.ones((1, 3), np.float32))  # idle: inline
        b = await batcher.submit(np.ones((3, 3), np.float32))  # too big: the thread
        slow = asyncio.ensure_future(batcher.submit(np.full((3, 3), 9, np.float32)))
        await asyncio.sleep(0.05)  # the thread is busy now
        c = asyncio.ensure_future(batcher.submit(np.ones((1, 3), np.float32)))  # queued behind it
        await asyncio.sleep(0.05)
        release.set()
        return a, b, await slow, await c

    a, b, slow, c = asyncio.run(go())
    assert a.tolist() == [[2, 2]] and b.shape == (3, 2) and slow.shape == (3, 2) and c.tolist() == [[2, 2]]
    assert threads == ["MainThread", "lenet-batcher", "lenet-batcher", "lenet-batcher"]
    assert batcher.stats.images == 8 and batcher.stats.batches == 4
    batcher.close()


def test_an_image_of_several_digits_says_so_and_points_at_read_number(client):
    """Issue 55: a photo of a number sent to /v1/classify is answered with one of its
    digits, several_digits and a note naming the route that reads it whole; through the
    batcher too (several images in one request)."""
    number, digit = (REPO / "examples" / name for name in ("number.jpg", "photo-4.jpg"))
    j = client.post("/v1/classify", content=number.read_bytes(), headers={"Content-Type": "image/jpeg"}).json()
    assert j["digit"] == 0 and j["several_digits"] is True and "/v1/read-number" in j["note"]
    files = [("files", (p.name, p.read_bytes(), "image/jpeg")) for p in (digit, number, digit)]
    answers = client.post("/v1/classify", files=files).json()["results"]
    assert [a["several_digits"] for a in answers] == [False, True, False]
    assert ["note" in a for a in answers] == [False, True, False]
    number_read = client.post("/v1/read-number", content=number.read_bytes(), headers={"Content-Type": "image/jpeg"})
    assert number_read.json()["number"] == "0224353"
    assert number_read.json()["in_doubt"] == [] and number_read.json()["skipped"] == []  # issue 63


def test_the_other_routes(client):
    assert client.get("/healthz").text == "ok"
    m = client.get("/v1/model").json()
    assert m["input_shape"] == [None, 28, 28, 1] and m["classes"] == 10 and "total parameters" in m["summary"]
    page = client.get("/")
    assert page.status_code == 200 and "<canvas" in page.text and "/v1/classify" in page.text
    r = client.post("/v1/read-number", content=EXAMPLES[3].read_bytes(), headers={"Content-Type": "image/png"})
    assert r.status_code == 200 and r.json()["number"] == "3"
    paths = client.get("/openapi.json").json()["paths"]  # the hand-declared hot route included
    assert {"/v1/classify", "/v1/read-number", "/v1/model", "/metrics"} <= set(paths)
    assert [p["name"] for p in paths["/v1/classify"]["post"]["parameters"]] == ["top_k", "image"]
    assert client.get("/v1/classify").status_code == 405


def test_a_request_the_engine_does_not_answer_in_time_gets_504(engine):
    app = create_app(engine, Options(timeout=0.05, inline_macs=0))  # every request through the batcher
    batcher = app.state.server.batcher
    run = batcher.run
    data = EXAMPLES[7].read_bytes()
    with TestClient(app) as c:
        batcher.run = lambda x: (time.sleep(0.3), run(x))[1]
        r = c.post("/v1/classify", content=data, headers={"Content-Type": "image/png"})
        assert r.status_code == 504 and r.json()["error"] == "no answer within 0.05 s"
        time.sleep(0.4)  # the late answer lands on a future already settled, and is dropped
        batcher.run = run
        r = c.post("/v1/classify", content=data, headers={"Content-Type": "image/png"})
        assert r.status_code == 200 and r.json()["digit"] == 7
        time.sleep(0.15)  # a sweep of the deadlines drops the answered request's, and stops
        assert not app.state.server._deadlines and not app.state.server._sweeping
    assert 'lenet_requests_total{status="504"} 1' in app.state.server.metrics()


def test_the_engine_leaves_the_event_loop_a_core():
    from lenet.engine import default_threads
    from lenet.serve.app import engine_threads

    assert engine_threads() == max(1, default_threads() - 1)
    app = create_app(weights="lenet5", device="cpu")
    assert app.state.server.engine.threads == engine_threads()
    assert create_app(weights="lenet5", device="cpu", threads=3).state.server.engine.threads == 3


def test_lenet_serve_starts_answers_and_stops_gracefully():
    with LenetServe() as server:
        with urllib.request.urlopen(server.url + "/healthz", timeout=2) as r:
            assert r.read() == b"ok"
        req = urllib.request.Request(
            server.url + "/v1/classify", data=EXAMPLES[9].read_bytes(), headers={"Content-Type": "image/png"}
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert json.loads(r.read())["digit"] == 9
    assert server.returncode == 0, server.stderr


def test_an_onnx_model_is_served():
    """lenet-serve --weights model.onnx: the engine on the ONNX file answers as it does in-process."""
    pytest.importorskip("onnx")
    eng = lenet.Engine(REPO / "tests" / "data" / "onnx" / "example_net.onnx", device="cpu", threads=1)
    data = EXAMPLES[3].read_bytes()
    with TestClient(create_app(eng)) as c:
        r = c.post("/v1/classify", content=data, headers={"Content-Type": "image/png"})
    assert r.status_code == 200, r.text
    np.testing.assert_array_equal(np.float32(r.json()["probabilities"]), eng.infer(data).probabilities)
