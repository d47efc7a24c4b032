"""A recording HTTP proxy: forwards every request to one upstream service and records when each
began and ended, as seen from outside the gate. Threaded, so overlapping requests really do
overlap here and show up in the timeline (the tests assert they never happen on one service)."""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.standins.http import LocalServer


class TimelineProxy(LocalServer):
    def __init__(self, upstream: str) -> None:
        u = urlsplit(upstream)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.timeline: list[tuple[float, float, str, str]] = []  # (start, end, method, path)
        self._lock = threading.Lock()
        super().__init__(self._handler())

    def overlaps(self) -> list[tuple[tuple, tuple]]:
        spans = sorted(self.timeline)
        return [(a, b) for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1]]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                start = time.monotonic()
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(outer.host, outer.port, timeout=600)
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "keep-alive")
                }
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                end = time.monotonic()
                with outer._lock:
                    outer.timeline.append((start, end, self.command, self.path))
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _forward

        return Handler
