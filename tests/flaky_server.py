"""A chat-completions server on 127.0.0.1 that misbehaves on purpose (for client and evaluation tests).

``FlakyServer(plan)``: for the n-th POST (0-based) ``plan(n, body)`` names what to do:

* ``ok`` — a valid completion (``answer(body)`` gives the assistant message); ``slow``: the
  same after ``stall_s`` seconds;
* ``500`` / ``429`` — that status with a JSON error;
* ``garbage`` — 200 with a body that is not JSON;
* ``badutf8`` — 200 with bytes that are not UTF-8;
* ``wrongtype`` — 200 with ``choices[0].message`` a string;
* ``truncated`` — a Content-Length larger than the body sent, then the connection closes;
* ``badstatus`` — a status line that is not HTTP;
* ``close`` — the connection closes without any answer;
* ``stall`` — no answer for ``stall_s`` seconds (past the client's deadline);
* ``trickle`` — a valid answer sent one byte every ``trickle_s`` seconds;
* ``huge`` — a valid answer padded past any sane size cap.

``GET /v1/models`` lists one model, ``flaky``.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def completion(message: dict[str, Any]) -> dict[str, Any]:
    return {"id": "cmpl-flaky", "object": "chat.completion", "model": "flaky",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


class FlakyServer:
    def __init__(self, plan: Callable[[int, dict], str],
                 answer: Callable[[dict], dict] | None = None, stall_s: float = 3.0, trickle_s: float = 0.1):
        self.plan, self.stall_s, self.trickle_s = plan, stall_s, trickle_s
        self.answer = answer or (lambda body: {"role": "assistant", "content": "Goodbye."})
        self.bodies: list[dict] = []
        self.behaviours: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                server._send(self, 200, json.dumps({"object": "list", "data": [{"id": "flaky"}]}).encode())

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    index = len(server.bodies)
                    server.bodies.append(body)
                    behaviour = server.plan(index, body)
                    server.behaviours.append(behaviour)
                try:
                    server._behave(self, behaviour, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FlakyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # ---- behaviours --------------------------------------------------------------------
    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes, length: int | None = None) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data) if length is None else length))
        handler.end_headers()
        handler.wfile.write(data)
        handler.wfile.flush()

    def _behave(self, handler: BaseHTTPRequestHandler, behaviour: str, body: dict) -> None:
        good = json.dumps(completion(self.answer(body))).encode()
        if behaviour == "ok":
            self._send(handler, 200, good)
        elif behaviour == "slow":
            time.sleep(self.stall_s)
            self._send(handler, 200, good)
        elif behaviour in ("500", "429"):
            self._send(handler, int(behaviour), b'{"error": {"message": "try later"}}')
        elif behaviour == "garbage":
            self._send(handler, 200, b"<html>proxy error</html>")
        elif behaviour == "badutf8":
            self._send(handler, 200, b'{"choices": "\xff\xfe"}')
        elif behaviour == "wrongtype":
            self._send(handler, 200, json.dumps({"choices": [{"message": "just text"}]}).encode())
        elif behaviour == "truncated":
            self._send(handler, 200, good[: len(good) // 2], length=len(good))
            handler.close_connection = True
        elif behaviour == "badstatus":
            handler.wfile.write(b"HELLO THERE\r\n\r\n")
            handler.close_connection = True
        elif behaviour == "close":
            handler.close_connection = True
        elif behaviour == "stall":
            time.sleep(self.stall_s)
            handler.close_connection = True
        elif behaviour == "trickle":
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(good)))
            handler.end_headers()
            for byte in good:
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(self.trickle_s)
        elif behaviour == "huge":
            message = dict(self.answer(body), content="x" * 2_000_000)
            self._send(handler, 200, json.dumps(completion(message)).encode())
        else:
            raise ValueError(behaviour)
