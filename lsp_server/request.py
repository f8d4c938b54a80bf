"""A completion request resolved once on the way in: everything below the request pipeline reads this value.

The LSP position is converted to a code-point offset here and nowhere else (the answer's range is
converted back once, by :meth:`lsp_server.requests.pipeline.RequestPipeline.answer`); the settings are a snapshot
taken when the request arrived, so a configuration change during a generation does not change it halfway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lsp_server.workspace.documents import Document
from lsp_server.settings import Settings


@dataclass(frozen=True)
class CompletionRequest:
    """One request for a completion at a cursor.

    Offsets are code points into ``document.text``; ``line_prefix`` and ``line_suffix`` are the
    document text between the cursor and its line's start and end (no line break).
    """

    document: Document  # the snapshot the request was made against
    offset: int
    line_prefix: str
    line_suffix: str
    settings: Settings
    automatic: bool = False  # the editor asked on its own (typing), not on the user's explicit request
    method: str = "complete"  # inlineCompletion | completion | complete (the CLI) | bench
    request_id: int = 0  # ours, for logs
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)
    received: float = field(default_factory=time.perf_counter, compare=False)  # perf_counter s: the time budget's start

    @property
    def uri(self) -> str:
        return self.document.uri


class Yielding:
    """A request's cancellation flag that also reads as set while ``should_yield()`` holds (background work
    yields to queued work: :meth:`lsp_server.model.worker.ModelWorker.has_waiting`); duck-types the
    ``threading.Event`` of :attr:`CompletionRequest.cancelled`."""

    def __init__(self, should_yield: Callable[[], bool]):
        self._event = threading.Event()
        self._should_yield = should_yield

    def is_set(self) -> bool:
        return self._event.is_set() or self._should_yield()

    def set(self) -> None:
        self._event.set()


def resolve_request(document: Document, position: types.Position, codec: PositionCodec,
                    settings: Settings | None = None, **fields) -> CompletionRequest:
    """The request for ``position`` (in ``codec``'s units) in ``document``.

    Args:
        fields: the other :class:`CompletionRequest` fields (``automatic``, ``method``, ``request_id``,
            ``cancelled``, ``received``).
    Raises:
        lsp_server.workspace.positions.PositionError: the position is not in the document.
    """
    line_start, offset, line_end = document.lines.locate(position, codec)
    text = document.text
    return CompletionRequest(document, offset, text[line_start:offset], text[offset:line_end],
                             settings if settings is not None else Settings(), **fields)


def ends_a_line(request: CompletionRequest) -> bool:
    """Whether the cursor is at the end of a line that holds code (blanks right of it aside)."""
    return not request.line_suffix.strip() and bool(request.line_prefix.strip())


def after_enter(request: CompletionRequest) -> CompletionRequest | None:
    """The request the next line would make if the user pressed Enter now: the cursor at the end of a line
    that holds code (``None`` otherwise, :func:`ends_a_line`), a line break and the line's indentation (one
    level more after ``:`` or an opening bracket) inserted, the cursor after them. For preparing that
    line's prompt ahead."""
    if not ends_a_line(request):
        return None
    line = request.line_prefix
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    if line.rstrip().endswith((":", "(", "[", "{")):
        indent += "\t" if "\t" in indent else "    "
    document = request.document
    eol = "\r\n" if "\r\n" in document.text else "\n"
    text = document.text[: request.offset] + eol + indent + document.text[request.offset:]
    ahead = Document(document.uri, text, document.version, document.language_id)
    return CompletionRequest(ahead, request.offset + len(eol) + len(indent), indent, request.line_suffix,
                             request.settings, automatic=True, method="next line", request_id=request.request_id)
