"""What every local test server here shares: a threaded HTTP server on a free port for the life
of a `with` block, and a handler that answers JSON or text with a length."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

T = TypeVar("T", bound="LocalServer")


class LocalServer:
    """Serves `handler` on 127.0.0.1 from a daemon thread between __enter__ and __exit__."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.running = 0  # requests being generated now (what an engine's flush waits on)
        self._running_lock = threading.Lock()
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

    @contextmanager
    def in_flight(self) -> Iterator[None]:
        """Count one request as running while the block runs (threads serve requests at once)."""
        with self._running_lock:
            self.running += 1
        try:
            yield
        finally:
            with self._running_lock:
                self.running -= 1


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

    def _open_stream(self) -> None:
        """A 200 of server-sent events; the connection closes when the stream ends."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

    def _close_stream(self) -> None:
        """`data: [DONE]`, the last event of SGLang's and vLLM's streams alike."""
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True

    def _event(self, obj: dict[str, Any]) -> None:
        """One server-sent event, `data: <json>`, flushed at once."""
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()
