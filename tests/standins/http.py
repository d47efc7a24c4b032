"""What every local test server here shares: a threaded HTTP server on a free port for the life
of a `with` block, and a handler that answers JSON or text with a length."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

T = TypeVar("T", bound="LocalServer")


class LocalServer:
    """Serves `handler` on 127.0.0.1 from a daemon thread between __enter__ and __exit__."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self: T) -> T:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class Handler(BaseHTTPRequestHandler):
    """Quiet, HTTP/1.1, with the replies the stand-ins send."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, raw: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _reply(self, code: int, data: Any) -> None:
        self._send(code, json.dumps(data).encode())

    def _event(self, obj: dict[str, Any]) -> None:
        """One server-sent event, `data: <json>`, flushed at once."""
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()
