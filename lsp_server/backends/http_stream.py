"""A streamed HTTP POST whose reading the caller can abort at once: server-sent events from a remote engine.

The standard library's ``http.client`` reads through ``socket.SocketIO``, which refuses every read after
one socket timeout ("cannot read from timed out object"), so it cannot poll for cancellation with a
short timeout. This module speaks the little HTTP/1.1 it needs on a plain socket (TLS through
:mod:`ssl`, certificates verified by default): one POST with ``Connection: close``, the status line and
headers, then the body framed by ``Transfer-Encoding: chunked``, ``Content-Length`` or the connection's
end. Every wait for bytes is a ``select`` of at most ``POLL_S``; between two waits the reader checks
``should_stop`` (then closes the connection: the engine sees the disconnect and stops generating) and
the read timeout (no byte for ``timeout_s``).

:class:`SseParser` splits a ``text/event-stream`` body into events (the WHATWG rules: ``data:`` lines
joined by newlines, a blank line ends an event, ``:`` lines are comments).
"""

from __future__ import annotations

import json
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

POLL_S = 0.05  # longest wait for bytes before should_stop is checked again (seconds)
MAX_ERROR_BODY = 64 * 1024  # bytes of an error answer kept for its message
MAX_LINE = 64 * 1024  # longest status, header or chunk-size line accepted (bytes)


class StreamCancelled(Exception):
    """``should_stop`` turned true; the connection is closed."""


class StreamTimeout(Exception):
    """No byte arrived for ``timeout_s`` seconds (or connecting took longer)."""


class MalformedResponse(Exception):
    """The answer is not the HTTP (or the event stream) it claims to be."""


class StreamEnded(MalformedResponse):
    """The connection ended in the middle of the answer (the engine stopped or crashed)."""


class HttpStatusError(Exception):
    """A non-2xx answer: ``status`` and the start of its body."""

    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status
        self.body = body


@dataclass(frozen=True)
class Endpoint:
    """A base URL split for connecting: ``http://host:port/prefix``."""

    scheme: str  # http | https
    host: str
    port: int
    prefix: str  # path before the API's own paths, without a trailing slash

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        """Raises: ValueError: not an http(s) URL with a host."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint {url!r} is not an http:// or https:// URL with a host")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


class SseParser:
    """Incremental ``text/event-stream`` parser: :meth:`feed` bytes, get the completed events' data."""

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[str]:
        """The data of each event completed by ``chunk`` (its ``data:`` lines joined by newlines).

        Raises:
            MalformedResponse: a line that is not UTF-8.
        """
        self._buffer += chunk
        events = []
        while True:
            cut = min((i for i in (self._buffer.find(b"\n"), self._buffer.find(b"\r")) if i != -1), default=-1)
            if cut == -1:
                break
            raw = self._buffer[:cut]
            skip = 2 if self._buffer[cut:cut + 2] == b"\r\n" else 1
            if self._buffer[cut:cut + 1] == b"\r" and cut + 1 == len(self._buffer):
                break  # a CR at the end: wait for a possible LF
            self._buffer = self._buffer[cut + skip:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise MalformedResponse(f"the event stream is not UTF-8: {exc}") from None
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            if line.startswith(":"):
                continue  # a comment (keep-alive)
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value.removeprefix(" "))
        return events

    def finish(self) -> list[str]:
        """The last event when the stream ends without its blank line."""
        events = self.feed(b"\n\n") if self._buffer or self._data else []
        return events


class _Reader:
    """Buffered reads from a socket that check ``should_stop`` and the read timeout while waiting."""

    def __init__(self, sock: socket.socket, timeout_s: float, should_stop: Callable[[], bool]):
        self.sock, self.timeout_s, self.should_stop = sock, timeout_s, should_stop
        self.buffer = b""
        self.eof = False

    def fill(self) -> bool:
        """Read what arrives next into the buffer; ``False`` at the end of the stream.

        Raises:
            StreamCancelled, StreamTimeout, OSError.
        """
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.should_stop():
                raise StreamCancelled()
            pending = self.sock.pending() if isinstance(self.sock, ssl.SSLSocket) else 0
            if pending or select.select([self.sock], [], [], POLL_S)[0]:
                try:
                    data = self.sock.recv(65536)
                except ssl.SSLWantReadError:
                    continue
                if not data:
                    self.eof = True
                    return False
                self.buffer += data
                return True
            if time.monotonic() > deadline:
                raise StreamTimeout(f"no answer for {self.timeout_s:g} s")

    def line(self) -> bytes:
        """One line without its CRLF. Raises: MalformedResponse: the stream ended or the line is too long."""
        while (end := self.buffer.find(b"\n")) == -1:
            if len(self.buffer) > MAX_LINE or not self.fill():
                if len(self.buffer) > MAX_LINE:
                    raise MalformedResponse("a line of the answer is too long")
                raise StreamEnded("the connection ended in the middle of the answer")
        line, self.buffer = self.buffer[:end], self.buffer[end + 1:]
        return line.rstrip(b"\r")

    def exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if not self.fill():
                raise StreamEnded("the answer ended before its announced length")
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def some(self) -> bytes:
        """Whatever is buffered, or the next bytes to arrive; ``b""`` at the end."""
        if not self.buffer and not self.fill():
            return b""
        data, self.buffer = self.buffer, b""
        return data


def _body(reader: _Reader, headers: dict[str, str]) -> Iterator[bytes]:
    """The body's bytes as they arrive, unframed."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = reader.line().split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise MalformedResponse(f"bad chunk size {size_line[:40]!r}") from None
            if size == 0:
                return
            remaining = size
            while remaining:
                if not reader.buffer and not reader.fill():
                    raise StreamEnded("the answer ended inside a chunk")
                data, reader.buffer = reader.buffer[:remaining], reader.buffer[remaining:]
                remaining -= len(data)
                yield data
            reader.exactly(2)  # the chunk's CRLF
    elif "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining > 0:
            data = reader.some()
            if not data:
                raise StreamEnded("the answer ended before its Content-Length")
            yield data[:remaining]
            remaining -= len(data)
    else:
        while data := reader.some():
            yield data


def _connect(endpoint: Endpoint, timeout_s: float, tls: ssl.SSLContext | None) -> socket.socket:
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s)
    except TimeoutError:
        raise StreamTimeout(f"connecting took more than {timeout_s:g} s") from None
    if endpoint.scheme == "https":
        context = tls or ssl.create_default_context()  # verifies the certificate and the host name
        try:
            sock = context.wrap_socket(sock, server_hostname=endpoint.host)
        except BaseException:
            sock.close()
            raise
    if isinstance(sock, ssl.SSLSocket):
        sock.settimeout(timeout_s)  # a TLS record is read whole once select saw its first bytes
    else:
        sock.setblocking(False)
    return sock


def post_events(endpoint: Endpoint, path: str, payload: dict, headers: dict[str, str], timeout_s: float,
                should_stop: Callable[[], bool], tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """POST ``payload`` as JSON to ``path`` (the whole path: the endpoint's prefix included) on
    ``endpoint``'s host and yield the data of each server-sent event.

    The connection is closed when the generator ends, is closed, or raises; a caller that stops
    iterating early must close it (``contextlib.closing``).

    Args:
        headers: extra request headers (e.g. ``Authorization``).
        timeout_s: connecting, and waiting for the next bytes (seconds).
        should_stop: polled at least every ``POLL_S`` while waiting for bytes.
    Raises:
        StreamCancelled: ``should_stop`` turned true (the connection is closed).
        StreamTimeout: connecting or the next bytes took longer than ``timeout_s``.
        HttpStatusError: a non-2xx answer.
        MalformedResponse: not HTTP, or not an event stream.
        OSError: the connection failed (refused, reset, DNS); ssl.SSLError for TLS failures.
    """
    body = json.dumps(payload).encode()
    lines = [f"POST {path} HTTP/1.1", f"Host: {endpoint.host_header}",
             "Content-Type: application/json", "Accept: text/event-stream", f"Content-Length: {len(body)}",
             "Connection: close", *(f"{name}: {value}" for name, value in headers.items())]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    sock = _connect(endpoint, timeout_s, tls)
    try:
        if isinstance(sock, ssl.SSLSocket):
            sock.sendall(request)
        else:
            _send_all(sock, request, timeout_s)
        reader = _Reader(sock, timeout_s, should_stop)
        status, response_headers = _status_and_headers(reader)
        if not 200 <= status < 300:
            text = b"".join(_limited(_body(reader, response_headers), MAX_ERROR_BODY)).decode("utf-8", "replace")
            raise HttpStatusError(status, text)
        parser = SseParser()
        for data in _body(reader, response_headers):
            yield from parser.feed(data)
        yield from parser.finish()
    finally:
        _close(sock)


def _send_all(sock: socket.socket, data: bytes, timeout_s: float) -> None:
    """``sendall`` on a non-blocking socket, waiting at most ``timeout_s`` for each part to go out."""
    view = memoryview(data)
    while view:
        if not select.select([], [sock], [], timeout_s)[1]:
            raise StreamTimeout(f"sending the request took more than {timeout_s:g} s")
        view = view[sock.send(view):]


def _status_and_headers(reader: _Reader) -> tuple[int, dict[str, str]]:
    while True:
        status_line = reader.line().decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise MalformedResponse(f"not an HTTP answer: {status_line[:80]!r}")
        headers = {}
        while line := reader.line():
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if int(parts[1]) != 100:  # 100 Continue: the real answer follows
            return int(parts[1]), headers


def _limited(chunks: Iterator[bytes], limit: int) -> Iterator[bytes]:
    taken = 0
    for chunk in chunks:
        yield chunk[: limit - taken]
        taken += len(chunk)
        if taken >= limit:
            return


def _close(sock: socket.socket) -> None:
    """Close at once: a reset rather than a lingering close, so the engine notices the disconnect."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
