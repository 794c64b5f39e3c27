"""An OpenAI-compatible endpoint of a test's own on loopback: it records each POST and answers as told.

``answer(request)`` gives ``(status, headers, payload)`` for each request (a dict, answered as JSON, or
bytes, answered as Server-Sent Events), or ``"hang"``: the handler then waits until the stand-in closes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict, Any] | str


class OpenAIStandIn:
    def __init__(self, answer: Callable[[dict], Answer]) -> None:
        self.requests: list[dict] = []  # each: path, headers, json
        self.arrivals: list[float] = []  # time.monotonic() of each request
        self.release = threading.Event()  # lets a hanging handler go at teardown
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = {"path": self.path, "headers": dict(self.headers), "json": json.loads(body)}
                outer.arrivals.append(time.monotonic())
                outer.requests.append(request)
                step = answer(request)
                if step == "hang":
                    outer.release.wait(30)
                    return
                status, headers, payload = step
                raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                kind = "text/event-stream" if isinstance(payload, bytes) else "application/json"
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def error(status: int, message: str, headers: dict | None = None, kind: str = "test") -> tuple[int, dict, dict]:
    """An OpenAI-style error answer."""
    return (status, headers or {}, {"error": {"message": message, "type": kind}})
