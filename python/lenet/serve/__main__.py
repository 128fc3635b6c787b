"""lenet-serve: the HTTP API and the drawing page on uvicorn (see lenet.serve.app)."""

from __future__ import annotations

import argparse
import sys

from .. import preprocess
from ..cli import add_precision_argument

SWITCH_INTERVAL = 0.0005  # seconds (Python's default: 0.005)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lenet-serve", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--weights", default=None, help="a model file or shipped name (default: lenet5)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="engine threads (default: the CPUs available less one, which the event loop keeps)",
    )
    add_precision_argument(p)
    preprocess.add_arguments(p)
    p.add_argument("--max-batch", type=int, default=256, help="images per engine call at most (default 256)")
    p.add_argument(
        "--max-delay-us",
        type=int,
        default=0,
        help="how long a batch that is not full waits for more requests (default 0: requests that "
        "arrive while the engine is busy are batched, a lone one runs at once)",
    )
    p.add_argument("--max-queue", type=int, default=4096, help="images waiting before 503 (default 4096)")
    p.add_argument("--max-body-mb", type=float, default=20.0, help="request body limit (default 20 MB)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request before 504 (default 10)")
    args = p.parse_args(argv)
    try:
        import uvicorn
    except ImportError:
        print('lenet-serve: error: needs the serve extra: pip install "lenet[serve]"', file=sys.stderr)
        return 2
    import lenet

    from .app import Options, create_app, engine_threads

    try:
        engine = lenet.Engine(
            args.weights,
            device=args.device,
            threads=engine_threads() if args.threads is None else args.threads,
            precision=args.precision,
            **preprocess.options(args),
        )
        options = Options(
            max_batch=args.max_batch,
            max_delay_us=args.max_delay_us,
            max_queue=args.max_queue,
            max_body_bytes=int(args.max_body_mb * (1 << 20)),
            timeout=args.timeout,
        )
        app = create_app(engine, options)
    except (lenet.Error, ValueError) as e:
        print(f"lenet-serve: error: {e}", file=sys.stderr)
        return 2
    # The event loop and the batcher's thread take turns holding the GIL: a batch's
    # answers wait for the loop to give it up, by default every 5 ms under load.
    sys.setswitchinterval(SWITCH_INTERVAL)
    # What is loaded by now (FastAPI, NumPy, OpenCV, h5py, the model) lives as long as the
    # server: out of the collector's sight, a full collection no longer walks it (at 64
    # clients it had made the p99 latency 2x the p50's; PERFORMANCE.md, session 9).
    import gc

    gc.collect()
    gc.freeze()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
