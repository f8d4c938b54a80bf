"""LSP base-protocol framing on a byte stream: header blocks, bodies, and resynchronisation after
bad input. Pure (no event loop, no JSON-RPC): :class:`FrameReader` turns bytes into :class:`Frame`
(a body to parse) and reports :class:`FramingProblem` (bad input, to be logged) until end of input.

What a header block may look like (more tolerant than the specification, as other servers are):
header names are case-insensitive; whitespace around a value is ignored; lines end in CRLF or a bare
LF; ``Content-Type`` and unknown headers are accepted and ignored; blank lines between messages are
skipped.

Bad input never leaves the reader deaf and never makes it allocate more than a bound:

* a header line longer than :data:`MAX_HEADER_LINE_BYTES`, or a line that is not ``name: value``, is
  skipped as garbage (a ``Content-Length:`` later on the same line starts a new header block there,
  so a header glued to the end of the previous body is found);
* a missing, non-numeric or negative ``Content-Length``: the block is dropped and reading resumes at
  the next header block (the body that followed is skipped as garbage, line by line);
* a ``Content-Length`` over :data:`MAX_BODY_BYTES`: that many bytes are skipped in bounded chunks,
  or fewer when a whole ``Content-Length: N`` line shows up first (no JSON text contains one: its
  strings hold no raw line breaks), where reading resumes;
* a ``Content-Length`` larger than the JSON value that follows: the first JSON value is the body and
  the rest, when it starts with a header, is read again as the next message (see
  :func:`split_overlong_body`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

_MAX_LENGTH_DIGITS = 18  # a longer Content-Length is over any limit (and Python's int() refuses 4301+ digits)
_UNBOUNDED = 2**63 - 1  # what such a length stands for while its body is skipped

#: The largest body read (bytes): larger messages are skipped, never allocated.
MAX_BODY_BYTES = 64 * 2**20
#: The longest header line kept (bytes, line break included); longer lines are skipped as garbage.
MAX_HEADER_LINE_BYTES = 8192
#: Bytes asked of the source per read, and the most skipped per step.
CHUNK_BYTES = 65536

_HEADER_LINE = re.compile(rb"^([!#-'*+.0-9A-Z^-z|~-]+)[ \t]*:[ \t]*(.*?)[ \t]*$")
# A whole Content-Length line. No JSON text contains one (its strings hold no raw line break), so
# where it appears inside skipped bytes or after a body, a message starts there.
_HEADER_START = re.compile(rb"content-length[ \t]*:[ \t]*[0-9]+[ \t]*\r?\n", re.IGNORECASE)
_HEADER_NAME = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_HEADER_TAIL_BYTES = 64  # bytes kept between skip steps: a header line cut by a read is found whole


@dataclass(frozen=True)
class Frame:
    """One message body as sent (bytes; UTF-8 JSON if the client behaves)."""

    body: bytes


@dataclass(frozen=True)
class FramingProblem:
    """Bad input met while reading; ``message`` says what and why, for the log. ``lost``: a message
    (or what may have been one) was dropped, as opposed to read despite the problem."""

    message: str
    lost: bool = True


def _show(data: bytes, limit: int = 60) -> str:
    """A short printable excerpt of raw bytes, for log messages."""
    text = repr(data[:limit])
    return text + (f"... ({len(data)} bytes)" if len(data) > limit else "")


def split_overlong_body(body: bytes) -> tuple[bytes, bytes] | None:
    """(the first JSON value, the rest) when ``body`` is a JSON value followed by the start of a
    ``Content-Length`` header (possibly cut short): a ``Content-Length`` that counted part of the next
    message. ``None`` otherwise (including a body that is not JSON at all)."""
    try:
        text = body.decode("utf-8")
        _, end = json.JSONDecoder().raw_decode(text, len(text) - len(text.lstrip()))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    end_bytes = len(text[:end].encode("utf-8"))
    rest = body[end_bytes:].lstrip()
    if _HEADER_NAME.match(rest) or (rest and b"content-length:".startswith(rest.lower())):
        return body[:end_bytes], rest
    return None


def _may_be_overlong(body: bytes) -> bool:
    """Whether ``body`` is worth :func:`split_overlong_body`: it does not end as a JSON object or array
    does, or it holds a header line (cheap tests, so that good bodies are parsed once)."""
    return body.rstrip()[-1:] not in (b"}", b"]") or _HEADER_START.search(body) is not None


class FrameReader:
    """Reads frames from ``read``, a function that returns up to ``n`` bytes (fewer when that is what
    is available; ``b""`` at end of input), like ``os.read`` on a pipe. Each problem met goes to
    ``on_problem`` as soon as it is known. Call :meth:`next` until it returns ``None`` (end of input).
    """

    def __init__(self, read: Callable[[int], bytes], on_problem: Callable[[FramingProblem], None],
                 max_body_bytes: int = MAX_BODY_BYTES):
        self._read = read
        self._on_problem = on_problem
        self._max_body = max_body_bytes
        self._buffer = bytearray()
        self._eof = False

    def push_back(self, data: bytes) -> None:
        """Make ``data`` the next bytes read (ahead of what is buffered)."""
        self._buffer[:0] = data

    def _fill(self) -> bool:
        """Read more into the buffer; False at end of input."""
        if self._eof:
            return False
        chunk = self._read(CHUNK_BYTES)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def _line(self) -> tuple[bytes, bool] | None:
        """The next line, line break included, and whether it was cut at :data:`MAX_HEADER_LINE_BYTES`
        (then the rest of it stays unread). ``None`` at end of input with nothing buffered."""
        while True:
            newline = self._buffer.find(b"\n", 0, MAX_HEADER_LINE_BYTES)
            if newline >= 0 or len(self._buffer) >= MAX_HEADER_LINE_BYTES:
                size = newline + 1 if newline >= 0 else MAX_HEADER_LINE_BYTES
                line = bytes(self._buffer[:size])
                del self._buffer[:size]
                return line, newline < 0
            if not self._fill():
                if not self._buffer:
                    return None
                line = bytes(self._buffer)
                self._buffer.clear()
                return line, False

    def _read_exactly(self, size: int) -> bytes | None:
        """``size`` bytes (``size`` <= the body limit), or ``None`` when the input ends first."""
        while len(self._buffer) < size:
            if not self._fill():
                return None
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _skip(self, size: int) -> int:
        """Skip up to ``size`` bytes, in bounded steps, stopping early before a ``Content-Length`` header
        line (which no JSON body can contain); returns the number skipped."""
        skipped = 0
        while skipped < size:
            window = bytes(self._buffer[:min(size - skipped, CHUNK_BYTES)])
            found = _HEADER_START.search(window)
            if found is not None:
                del self._buffer[:found.start()]
                return skipped + found.start()
            # keep a tail that may be the first part of a header line, unless the skip ends here
            cut = len(window) if len(window) == size - skipped else len(window) - _HEADER_TAIL_BYTES
            if cut > 0:
                del self._buffer[:cut]
                skipped += cut
            elif not self._fill():
                skipped += len(self._buffer)
                self._buffer.clear()
                break
        return skipped

    def _headers(self) -> dict[bytes, bytes] | None:
        """The next header block as {lower-case name: value}; ``None`` at end of input. Lines that are
        not headers are skipped (reported to ``on_problem``, once per run of them)."""
        headers: dict[bytes, bytes] = {}
        garbage, excerpt = 0, b""
        while (read := self._line()) is not None:
            line, cut = read
            found = _HEADER_START.search(line, 1)
            if found is not None and line[:found.start()].strip():  # a header glued to garbage before it
                self.push_back(line[found.start():])
                line, cut = line[:found.start()], True
            stripped = line.rstrip(b"\r\n")
            match = None if cut else _HEADER_LINE.match(stripped)
            if match is None and (stripped.strip() or cut):
                garbage, excerpt = garbage + len(line), excerpt or line
                headers.clear()
                continue
            if garbage:
                self._on_problem(FramingProblem(f"skipped {garbage} bytes that are not a header: {_show(excerpt)}"))
                garbage, excerpt = 0, b""
            if match is not None:
                headers[match.group(1).lower()] = match.group(2)
            elif headers:
                return headers
            # else: blank lines between messages
        if garbage:
            self._on_problem(FramingProblem(f"skipped {garbage} bytes that are not a header: {_show(excerpt)}"))
        return None

    def next(self) -> Frame | None:
        """The next frame; ``None`` at end of input. Problems met on the way go to ``on_problem``."""
        while (headers := self._headers()) is not None:
            raw = headers.get(b"content-length")
            if raw is None or not raw.isdigit():
                what = "no Content-Length header" if raw is None else f"a bad Content-Length {_show(raw)}"
                names = b", ".join(headers).decode("ascii", "replace")
                self._on_problem(FramingProblem(f"a header block ({names}) with {what}: dropped; "
                                                "reading resumes at the next header block"))
                continue
            digits = raw.lstrip(b"0") or b"0"
            size = int(digits) if len(digits) <= _MAX_LENGTH_DIGITS else None  # int() refuses 4301+ digits
            if size is None or size > self._max_body:
                skipped = self._skip(size if size is not None else _UNBOUNDED)
                length = f"{size}-byte" if size is not None else f"{len(digits)}-digit-long"
                self._on_problem(FramingProblem(
                    f"a {length} message is over the {self._max_body}-byte limit: skipped {skipped} bytes"))
                continue
            body = self._read_exactly(size)
            if body is None:
                self._on_problem(FramingProblem(f"input ended inside a {size}-byte body"))
                return None
            split = split_overlong_body(body) if _may_be_overlong(body) else None
            if split is not None:
                body, rest = split
                self.push_back(rest)
                self._on_problem(FramingProblem(f"Content-Length {size} counted {len(rest)} bytes of the next "
                                                "message: reading that again from its header", lost=False))
            return Frame(body)
        return None
