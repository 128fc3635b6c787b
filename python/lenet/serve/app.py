"""The HTTP API (FastAPI on uvicorn): classify images sent from anywhere, batched dynamically.

    POST /v1/classify        an image as the raw body, multipart files, or JSON
                             ({"image": base64} | {"images": [base64, ...]} | {"array": [[...]]})
                             ?top_k=K (the K most probable digits), ?image=1 (the 28x28 input, PNG base64)
    POST /v1/read-number     a number written in one image (lenet-cli --digits)
    GET  /v1/model           the model: summary, input shape, classes
    GET  /healthz            200 "ok"
    GET  /metrics            Prometheus text: requests, images, batch sizes, queue time, latency
    GET  /                   a page to draw a digit on

Photos are decoded and prepared on worker threads, small images (at most 64x64 pixels)
on the event loop; the engine calls go through the Batcher (lenet/serve/batcher.py).
Errors: 413 (body or image too large), 415 (a content type it does not read), 422 (not
an image, no digit: the message lenet-cli prints), 503 + Retry-After (queue full), 504
(the request took longer than the timeout).
"""

import asyncio
import base64
import binascii
import collections
import json
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any, Optional

import numpy as np
import orjson

from .. import images
from ..engine import Engine
from ..errors import ImageTooLargeError, InputError
from ..results import Result, answers
from .batcher import Batcher, Overloaded

SWEEP_SECONDS = 0.05  # how often queued requests' deadlines are checked
LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


@dataclass
class Options:
    max_batch: int = 256
    max_delay_us: int = 0
    max_queue: int = 4096  # images waiting for the engine before 503
    max_body_bytes: int = 20 << 20
    timeout: float = 10.0  # seconds per request
    mode: str = "auto"
    # A request costing at most this many multiply-adds runs on the event loop when the
    # batcher is idle (Batcher's inline_images): lenet5 (0.42 M a digit) and lenet-keras
    # do, lenet-tf (13.9 M) never does.
    inline_macs: int = 4_000_000


class HTTPFailure(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _status_of(e: InputError) -> int:
    return 413 if isinstance(e, ImageTooLargeError) else 422


class Server:
    """The engine, its batcher and the counters behind the routes (one per app)."""

    def __init__(self, engine: Engine, options: Options):
        self.engine, self.options = engine, options
        self.hwc = engine.image_shape
        self.classes = engine.classes
        self.batcher = Batcher(
            engine.row_probabilities,
            options.max_batch,
            options.max_delay_us / 1e6,
            options.max_queue,
            options.inline_macs // max(engine.model.macs, 1),
        )
        self.responses: dict = {}
        self.latency = [0] * (len(LATENCY_BUCKETS) + 1)
        self.latency_sum = 0.0
        # Queued requests' timeouts: (deadline, future) in arrival order, swept by one timer.
        self._deadlines: collections.deque = collections.deque()
        self._sweeping = False

    def observe(self, status: int, seconds: float) -> None:
        self.responses[status] = self.responses.get(status, 0) + 1
        self.latency_sum += seconds
        for k, bound in enumerate(LATENCY_BUCKETS):
            if seconds <= bound:
                self.latency[k] += 1
                break
        else:
            self.latency[-1] += 1

    def _watch(self, future: asyncio.Future) -> None:
        """Fails `future` with TimeoutError if it is not done within the timeout (up to
        SWEEP_SECONDS late). Every request has the same timeout, so deadlines come in
        arrival order: a deque, swept by one timer while it holds any. A timer per request
        (call_later, then cancel) cost ~4% of the loop at 64 clients: the loop's heap held
        the ~30,000 cancelled timers of the last 10 s (PERFORMANCE.md, session 11)."""
        loop = asyncio.get_running_loop()
        self._deadlines.append((loop.time() + self.options.timeout, future))
        if not self._sweeping:
            self._sweeping = True
            loop.call_later(SWEEP_SECONDS, self._sweep)

    def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        now, deadlines = loop.time(), self._deadlines
        while deadlines and (deadlines[0][1].done() or deadlines[0][0] <= now):
            _expire(deadlines.popleft()[1])
        if deadlines:
            loop.call_later(SWEEP_SECONDS, self._sweep)
        else:
            self._sweeping = False

    async def classify(self, items: list, labels: list, top_k: int, with_image: bool) -> list:
        """Per item: its answer (a dict) or its InputError."""
        if _small(items):  # decoded on the event loop: less than a hop to a worker thread costs
            got = images.prepare(items, labels, self.hwc, self.options.mode)
        else:
            from starlette.concurrency import run_in_threadpool

            got = await run_in_threadpool(images.prepare, items, labels, self.hwc, self.options.mode)
        probs = np.zeros((0, self.classes), np.float32)
        if len(got.x):
            try:
                future = self.batcher.submit(got.x)
                if not future.done():  # queued: wait, at most the timeout
                    self._watch(future)
                    await future
                probs = future.result()
            except Overloaded as e:
                raise HTTPFailure(503, f"overloaded: {e}", {"Retry-After": "1"}) from None
            except asyncio.TimeoutError:
                raise HTTPFailure(504, f"no answer within {self.options.timeout:g} s") from None
        # One image per item here (a batch array is refused earlier): an answer per item.
        return [
            r if isinstance(r, InputError) else _answer(r, top_k, with_image) for r in answers(got, probs, len(items))
        ]

    def metrics(self) -> str:
        s = self.batcher.stats
        lines = ["# HELP lenet_requests_total HTTP responses by status.", "# TYPE lenet_requests_total counter"]
        lines += [f'lenet_requests_total{{status="{k}"}} {v}' for k, v in sorted(self.responses.items())]
        lines += [
            "# HELP lenet_images_total Images classified.",
            "# TYPE lenet_images_total counter",
            f"lenet_images_total {s.images}",
            "# HELP lenet_engine_calls_total Engine calls (batches).",
            "# TYPE lenet_engine_calls_total counter",
            f"lenet_engine_calls_total {s.batches}",
            "# HELP lenet_rejected_total Requests refused because the queue was full.",
            "# TYPE lenet_rejected_total counter",
            f"lenet_rejected_total {s.rejected}",
            "# HELP lenet_queue_seconds_total Time requests waited for the engine.",
            "# TYPE lenet_queue_seconds_total counter",
            f"lenet_queue_seconds_total {s.queue_seconds:.6f}",
            "# HELP lenet_engine_seconds_total Time in engine calls.",
            "# TYPE lenet_engine_seconds_total counter",
            f"lenet_engine_seconds_total {s.engine_seconds:.6f}",
            "# HELP lenet_batch_size Images per engine call.",
            "# TYPE lenet_batch_size histogram",
        ]
        cumulative = 0
        for bound in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
            cumulative = sum(n for size, n in s.batch_sizes.items() if size <= bound)
            lines.append(f'lenet_batch_size_bucket{{le="{bound}"}} {cumulative}')
        lines += [
            f'lenet_batch_size_bucket{{le="+Inf"}} {s.batches}',
            f"lenet_batch_size_sum {s.images}",
            f"lenet_batch_size_count {s.batches}",
            "# HELP lenet_request_seconds Request latency, from the body read to the answer.",
            "# TYPE lenet_request_seconds histogram",
        ]
        cumulative = 0
        for bound, n in zip(LATENCY_BUCKETS, self.latency):
            cumulative += n
            lines.append(f'lenet_request_seconds_bucket{{le="{bound}"}} {cumulative}')
        total = sum(self.latency)
        lines += [
            f'lenet_request_seconds_bucket{{le="+Inf"}} {total}',
            f"lenet_request_seconds_sum {self.latency_sum:.6f}",
            f"lenet_request_seconds_count {total}",
        ]
        return "\n".join(lines) + "\n"


# An image of at most this many pixels is decoded and prepared on the event loop: a
# 28x28 PNG takes ~0.1 ms, less than handing it to a worker thread and back costs under
# load (PERFORMANCE.md). Bigger ones (photos: milliseconds) go to worker threads.
INLINE_PIXELS = 64 * 64


CLASSIFY_OPENAPI = {
    "post": {
        "summary": "Classify",
        "description": "An image as the raw body (any format lenet reads), multipart files, or JSON "
        '({"image": base64} | {"images": [base64, ...]} | {"array": [[...]]}): the digit, its '
        'confidence and the probabilities (several images: {"results": [...]}).',
        "parameters": [
            {"name": "top_k", "in": "query", "schema": {"type": "integer", "default": 1}},
            {"name": "image", "in": "query", "schema": {"type": "boolean", "default": False}},
        ],
        "requestBody": {
            "content": {
                "image/png": {},
                "application/octet-stream": {},
                "multipart/form-data": {},
                "application/json": {},
            }
        },
        "responses": {
            "200": {"description": "the answer"},
            "413": {"description": "too large"},
            "415": {"description": "a content type it does not read"},
            "422": {"description": "not an image, or no digit"},
            "503": {"description": "overloaded"},
            "504": {"description": "no answer within the timeout"},
        },
    }
}


def _small(items: list) -> bool:
    """Whether every item is an image of at most INLINE_PIXELS (its header says so)."""
    for item in items:
        if isinstance(item, bytes):
            try:
                _, w, h = images.image_size(item)
            except InputError:
                return False
            if w * h > INLINE_PIXELS:
                return False
        elif not (isinstance(item, np.ndarray) and item.size <= 4 * INLINE_PIXELS):
            return False
    return True


def _expire(future: asyncio.Future) -> None:
    if not future.done():  # the batcher skips a done future when the answer comes
        future.set_exception(asyncio.TimeoutError())


def _json_response():
    """A Starlette response class that writes JSON with orjson, NumPy values included
    (made on first use: Starlette is the serve extra's)."""
    from starlette.responses import Response

    class JSON(Response):
        media_type = "application/json"

        def render(self, content) -> bytes:
            return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)

    return JSON


# The reply's note where an image holds several digits (Result.several_digits).
SEVERAL_DIGITS = "several digits seen: POST /v1/read-number reads them as a number"


def _answer(r: Result, top_k: int, with_image: bool) -> dict:
    """A Result as the API answers it. NumPy float32 values as they are: the JSON (orjson)
    writes each as the shortest decimal that reads back to the same float32."""
    p = r.probabilities
    answer: dict = {
        "digit": r.digit,
        "confidence": p[r.digit],
        "mode": r.mode,
        "probabilities": p,
        "several_digits": r.several_digits,
    }
    if r.several_digits:  # one digit asked for, a number seen: the digit is one of them
        answer["note"] = SEVERAL_DIGITS
    if top_k > 1:
        order = np.argsort(-p, kind="stable")[:top_k]
        answer["top"] = [{"digit": int(d), "probability": p[d]} for d in order]
    if with_image:
        answer["input_png"] = _png_base64(r.image)
    return answer


def _png_base64(img: np.ndarray) -> str:
    import cv2

    ok, buf = cv2.imencode(".png", img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
    return base64.b64encode(buf.tobytes()).decode()


def _decode_b64(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise HTTPFailure(422, f"{where}: expected a base64 string, got {type(value).__name__}")
    if value.startswith("data:") and "," in value:  # a data: URL, as a canvas gives it
        value = value.split(",", 1)[1]
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise HTTPFailure(422, f"{where}: not base64 ({e})") from None


async def _body(request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise HTTPFailure(413, f"the body declares {int(declared):,} bytes; the limit is {limit:,}")
        except ValueError:
            raise HTTPFailure(400, f"Content-Length {declared!r} is not a number") from None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPFailure(413, f"the body is larger than the limit of {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _inputs(request, limit: int) -> tuple[list, list, bool]:
    """(items, labels, several): what the request holds, as prepare() takes it."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "multipart/form-data":
        body = await _body(request, limit)  # the limit holds before the form parser reads anything
        from starlette.requests import Request

        try:
            form = await Request(request.scope, receive=_receiver(body)).form()
        except Exception as e:  # python-multipart's own errors: a malformed body
            raise HTTPFailure(422, f"a malformed multipart body ({type(e).__name__}: {e})") from None
        files = [(k, v) for k, v in form.multi_items() if hasattr(v, "read")]
        if not files:
            raise HTTPFailure(422, "a multipart body with no file in it")
        items = [await f.read() for _, f in files]
        return items, [f.filename or k for k, f in files], True
    body = await _body(request, limit)
    if kind == "application/json":
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise HTTPFailure(422, f"the body is not JSON ({e})") from None
        if not isinstance(doc, dict) or not ({"image", "images", "array"} & set(doc)):
            raise HTTPFailure(
                422,
                'expected a JSON object with "image" (base64), "images" (a list of base64) '
                'or "array" (rows of pixel values)',
            )
        if "images" in doc:
            if not isinstance(doc["images"], list) or not doc["images"]:
                raise HTTPFailure(422, '"images" must be a non-empty list of base64 strings')
            return (
                [_decode_b64(v, f"images[{i}]") for i, v in enumerate(doc["images"])],
                [f"images[{i}]" for i in range(len(doc["images"]))],
                True,
            )
        if "image" in doc:
            return [_decode_b64(doc["image"], "image")], ["image"], False
        try:
            a = np.asarray(doc["array"], dtype=np.float32)
        except (ValueError, TypeError) as e:
            raise HTTPFailure(422, f'"array" is not an array of numbers ({e})') from None
        if not images.is_one_image(a):
            raise HTTPFailure(422, f'"array" must be one image, (H, W) or (H, W, C); got shape {a.shape}')
        return [a], ["array"], False
    if kind in ("", "application/octet-stream") or kind.startswith("image/"):
        if not body:
            raise HTTPFailure(422, "an empty body: send an image")
        return [body], ["<body>"], False
    raise HTTPFailure(415, f"a {kind} body: send an image (raw, image/*), multipart files, or JSON")


def _query(params, classes: int) -> tuple[int, bool]:
    """(top_k, image) from the query string, or HTTPFailure 422 naming what is wrong."""
    raw = params.get("top_k", "1")
    try:
        top_k = int(raw)
    except ValueError:
        raise HTTPFailure(422, f"top_k must be an integer, got {raw!r}") from None
    if not 1 <= top_k <= classes:
        raise HTTPFailure(422, f"top_k must be in 1..{classes}, got {top_k}")
    raw = params.get("image", "false").lower()
    if raw not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise HTTPFailure(422, f"image must be true or false, got {raw!r}")
    return top_k, raw in ("1", "true", "yes", "on")


def _receiver(body: bytes):
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def engine_threads() -> int:
    """The server's engine threads unless told: the CPUs available less one, which the
    event loop keeps (HTTP is most of a request). On 2 cores, lenet-tf at 64 clients
    served ~10% more requests with 1 engine thread than with 2 (PERFORMANCE.md, session 10)."""
    from ..engine import default_threads

    return max(1, default_threads() - 1)


def create_app(engine: Optional[Engine] = None, options: Optional[Options] = None, **engine_options):
    """The ASGI app: ``engine`` (default: ``Engine(**engine_options)``) behind the routes above."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, PlainTextResponse

    options = options or Options()
    JSONResponse = _json_response()
    if engine is None:
        engine_options.setdefault("threads", engine_threads())
        engine = Engine(**engine_options)
    server = Server(engine, options)

    @asynccontextmanager
    async def lifespan(app):
        yield
        server.batcher.close()  # what is queued is finished first

    app = FastAPI(title="lenet", summary="Handwritten digits, classified by lenet", lifespan=lifespan)
    app.state.server = server

    def failure(e: HTTPFailure, started: float):
        server.observe(e.status, time.perf_counter() - started)
        return JSONResponse({"error": e.message}, status_code=e.status, headers=e.headers)

    # The hot route is a plain Starlette route (added below), its query read here: FastAPI's
    # request handler (dependency solving, for an endpoint with none) and its encoding of
    # a returned dict cost more than a tenth of a request (py-spy at 64 clients;
    # PERFORMANCE.md, session 10). Its OpenAPI entry is added by hand, in openapi().
    async def classify(request: Request):
        started = time.perf_counter()
        try:
            top_k, image = _query(request.query_params, server.classes) if request.scope["query_string"] else (1, False)
            items, labels, several = await _inputs(request, options.max_body_bytes)
            answers = await server.classify(items, labels, top_k, image)
        except HTTPFailure as e:
            return failure(e, started)
        latency_ms = (time.perf_counter() - started) * 1e3
        if not several:
            (answer,) = answers
            if isinstance(answer, InputError):
                return failure(HTTPFailure(_status_of(answer), str(answer)), started)
            server.observe(200, time.perf_counter() - started)
            return JSONResponse({**answer, "latency_ms": round(latency_ms, 3)})
        server.observe(200, time.perf_counter() - started)
        return JSONResponse(
            {
                "results": [
                    {"source": label, "error": str(a)} if isinstance(a, InputError) else {"source": label, **a}
                    for label, a in zip(labels, answers)
                ],
                "latency_ms": round(latency_ms, 3),
            }
        )

    app.router.add_route("/v1/classify", classify, methods=["POST"])
    fastapi_openapi = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            fastapi_openapi()["paths"]["/v1/classify"] = CLASSIFY_OPENAPI
        return app.openapi_schema

    app.openapi = openapi

    @app.post("/v1/read-number")
    async def read_number(request: Request):
        from starlette.concurrency import run_in_threadpool

        started = time.perf_counter()
        try:
            items, labels, several = await _inputs(request, options.max_body_bytes)
            if several:
                raise HTTPFailure(422, "read-number takes one image")
            number = await run_in_threadpool(server.engine.read_number, items[0])
        except HTTPFailure as e:
            return failure(e, started)
        except InputError as e:
            return failure(HTTPFailure(_status_of(e), str(e)), started)
        server.observe(200, time.perf_counter() - started)
        return {
            "number": number.number,
            "confidence": number.confidence,
            "digits": [
                {"digit": r.digit, "confidence": r.confidence, "box": list(box)}
                for r, box in zip(number.digits, number.boxes)
            ],
            "in_doubt": number.in_doubt(),
            "skipped": [{"box": list(s.box), "why": s.why} for s in number.skipped],
            "length_in_doubt": number.length_in_doubt,
            "runner_up": number.runner_up or None,
        }

    @app.get("/v1/model")
    async def model():
        printed: list = []
        server.engine.summary(print_fn=printed.append)
        return {
            "source": server.engine.model.source,
            "input_shape": list(server.engine.input_shape),
            "classes": server.engine.classes,
            "device": server.engine.device,
            "summary": printed[0],
            "max_batch": options.max_batch,
            "max_delay_us": options.max_delay_us,
        }

    @app.get("/healthz", response_class=PlainTextResponse)
    async def healthz():
        return "ok"

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        return server.metrics()

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return resources.files("lenet.serve").joinpath("page.html").read_text()

    return app
