"""lenet behind a socket: an HTTP API with dynamic batching and a page to draw a digit on
(``pip install "lenet[serve]"``; ``lenet-serve`` starts it). See ``lenet.serve.app``."""

from .app import Options, create_app

__all__ = ["Options", "create_app"]
