"""HTTP requests with a total deadline and a size cap, on httpx.

httpx's timeouts bound each network operation (a connect, one socket read), so a server
that sends a byte every few seconds can hold a request open indefinitely. Here every
request has one deadline: ``post_json(client, url, body, deadline=..., max_bytes=...)``
sets it for the calling thread, and the network backend under httpx's connection pool
(``DeadlineTransport``) gives every connect, write and read only the time left before it.
Past the deadline the next operation fails with a timeout, whatever the server does.

The transport is httpcore's own connection pool (keep-alive, HTTP/1.1, TLS) with that
backend; an ``http(s)_proxy`` from the environment is honoured unless the host is
bypassed. Each thread carries its own deadline, so one ``httpx.Client`` serves many
threads at once (the evaluator's concurrent episodes).
"""
from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

_deadline = threading.local()

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError, httpcore.TimeoutException,
                                                 httpcore.NetworkError, httpcore.ProtocolError,
                                                 httpcore.ProxyError, httpcore.UnsupportedProtocol)
"""What a failed exchange raises (httpx's own mapping, or httpcore's from inside a body read)."""


def _time_left(timeout: float | None, expired: type[Exception]) -> float | None:
    """``timeout`` cut to the time left before this thread's deadline; ``expired`` once it passed."""
    end = getattr(_deadline, "at", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every network operation of this thread inside the block ends ``seconds`` from now at the latest."""
    previous = getattr(_deadline, "at", None)
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = previous


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _time_left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _time_left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        left = _time_left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Body(httpx.SyncByteStream):
    def __init__(self, response: httpcore.Response):
        self._response = response

    def __iter__(self) -> Iterator[bytes]:
        yield from self._response.iter_stream()

    def close(self) -> None:
        self._response.close()


class DeadlineTransport(httpx.BaseTransport):
    """httpcore's connection pool on the deadline backend, as an httpx transport."""

    def __init__(self, max_connections: int = 64, proxy: str | None = None):
        options = dict(max_connections=max_connections, max_keepalive_connections=max_connections,
                       keepalive_expiry=30.0, network_backend=_DeadlineBackend())
        self._pool = httpcore.HTTPProxy(proxy_url=proxy, **options) if proxy else httpcore.ConnectionPool(**options)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        core = httpcore.Request(method=request.method,
                                url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                                                 target=url.raw_path),
                                headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        response = self._pool.handle_request(core)
        return httpx.Response(status_code=response.status, headers=response.headers, stream=_Body(response),
                              extensions=response.extensions)

    def close(self) -> None:
        self._pool.close()


def make_client(base_url: str, max_connections: int = 64) -> httpx.Client:
    """An httpx client whose requests obey ``deadline``; the environment's proxy for ``base_url`` if any."""
    scheme, host = httpx.URL(base_url).scheme, httpx.URL(base_url).host
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and urllib.request.proxy_bypass(host):
        proxy = None
    return httpx.Client(transport=DeadlineTransport(max_connections, proxy), timeout=None, trust_env=False)


@dataclass
class Reply:
    """One HTTP answer: status, headers and the whole body (never more than the cap)."""

    status: int
    headers: httpx.Headers
    body: bytes


class TooLarge(Exception):
    """The answer is bigger than the request allowed."""


def exchange(client: httpx.Client, method: str, url: str, *, deadline_s: float, max_bytes: int,
             json_body: Any = None, headers: dict[str, str] | None = None) -> Reply:
    """Send one request and read its whole answer within ``deadline_s`` seconds.

    Raises one of ``TRANSPORT_ERRORS`` (refused, reset, cut off, deadline passed, bad
    status line) or ``TooLarge`` (a body or Content-Length over ``max_bytes``).
    """
    with deadline(deadline_s), client.stream(method, url, json=json_body, headers=headers) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise TooLarge(f"its Content-Length is {declared} bytes, over the cap of {max_bytes}")
        chunks, size = [], 0
        for chunk in response.iter_bytes():  # decoded: the cap holds for compressed bodies too
            size += len(chunk)
            if size > max_bytes:
                raise TooLarge(f"its body is over the cap of {max_bytes} bytes")
            chunks.append(chunk)
        return Reply(response.status_code, response.headers, b"".join(chunks))
