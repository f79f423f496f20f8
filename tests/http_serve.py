"""A folder served over HTTP on 127.0.0.1 for tests that fetch from a mirror (bundle, matrix update)."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler without its access log on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(directory: Path, handler: type[http.server.SimpleHTTPRequestHandler] = QuietHandler) -> Iterator[str]:
    """Serve ``directory`` on 127.0.0.1 (a free port) with ``handler`` while the generator is open; yield its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
