"""Serving ``dist/`` on 127.0.0.1 with the headers the page needs (cross-origin isolation,
MIME types): for ``build.py serve``, the tests and the benches."""

from __future__ import annotations

import functools
import http.server
import os
import socketserver
import threading
from pathlib import Path

from .base import (
    DIST,
    MIME,
    log,
)
from .static_site import build_if_needed


class Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME}

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        if os.environ.get("CHATMEM_SERVE_LOG"):
            super().log_message(format, *args)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    #: the page and its service worker's precache open many connections at once
    request_queue_size = 128


def make_server(directory: Path = DIST, port: int = 8000, host: str = "127.0.0.1") -> Server:
    handler = functools.partial(Handler, directory=str(directory))
    return Server((host, port), handler)


def serve_in_thread(directory: Path = DIST, port: int = 0) -> tuple[Server, str]:
    """Start a server on 127.0.0.1 in a daemon thread; returns it and its base URL."""
    srv = make_server(directory, port)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}/"


def serve(port: int) -> None:
    build_if_needed()
    srv = make_server(DIST, port)
    log(f"serving dist/ on http://127.0.0.1:{port}/  (Ctrl+C to stop)")
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
