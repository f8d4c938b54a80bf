"""The document store: ``didOpen`` / ``didChange`` / ``didClose`` events in, text out.

Incremental changes are applied with :mod:`lsp_server.positions` (LSP line breaks, negotiated
encoding), so a document holding form feeds or U+2028 keeps its coordinates right.

A lone UTF-16 surrogate (JSON allows ``"\\udcff"``; no UTF-8 text holds one) is stored as U+FFFD:
the tokenizer cannot encode it, and the replacement has the same length in code points and in UTF-16
units, so every position stays where the client put it.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import cached_property

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from lsp_server.positions import LineIndex, PositionError, to_model_text


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrubbed(text: str) -> str:
    """``text`` with each lone surrogate code point replaced by U+FFFD (same lengths)."""
    return _LONE_SURROGATE.sub("\ufffd", text)


@dataclass(frozen=True)
class Document:
    """An immutable snapshot of an open document."""

    uri: str
    text: str
    version: int
    language_id: str
    in_sync: bool = True  # False after a change that could not be applied, until a full-text change

    @cached_property
    def lines(self) -> LineIndex:
        """Line starts of ``text``, computed once per snapshot."""
        return LineIndex.of(self.text)

    @cached_property
    def model_text(self) -> str:
        """``text`` with every line break as ``\n`` (what models see), computed once per snapshot."""
        return to_model_text(self.text)

    def model_split(self, offset: int) -> tuple[str, str]:
        """Model text before and after ``offset`` (code points into ``text``)."""
        if "\r" not in self.text:  # the common case: model text is the text itself
            return self.text[:offset], self.text[offset:]
        return to_model_text(self.text[:offset]), to_model_text(self.text[offset:])


class DocumentStore:
    """Open documents by URI. Thread-safe: handlers write, the model worker reads snapshots."""

    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}
        self._lock = threading.Lock()

    def open(self, item: types.TextDocumentItem) -> Document:
        document = Document(item.uri, _scrubbed(item.text), item.version, item.language_id)
        with self._lock:
            self._documents.pop(item.uri, None)  # insertion order = least to most recently touched
            self._documents[item.uri] = document
        return document

    def change(self, params: types.DidChangeTextDocumentParams, codec: PositionCodec) -> Document:
        """Apply content changes in order.

        A change whose range is outside the document cannot be applied: the document keeps its last
        good text, is marked out of sync (no completions from stale text) and raises; a later
        full-text change brings it back in sync.

        Raises:
            KeyError: for a document that was never opened.
            lsp_server.positions.PositionError: for a change range outside the document.
        """
        with self._lock:
            document = self._documents[params.text_document.uri]
            # The line index follows the edits (LineIndex.edited), so a keystroke does not rescan the file.
            index, in_sync, error = document.lines, document.in_sync, None
            for change in params.content_changes:
                if isinstance(change, types.TextDocumentContentChangePartial):
                    if not in_sync:
                        continue  # offsets would refer to text we do not have
                    try:
                        start = index.offset_at(change.range.start, codec)
                        end = index.offset_at(change.range.end, codec)
                    except PositionError as exc:
                        in_sync, error = False, exc
                        continue
                    start, end = min(start, end), max(start, end)
                    index = index.edited(start, end, _scrubbed(change.text))
                else:
                    index, in_sync = LineIndex.of(_scrubbed(change.text)), True
            document = Document(document.uri, index.text, params.text_document.version, document.language_id, in_sync)
            document.__dict__["lines"] = index  # the cached_property's value: computed already
            del self._documents[document.uri]  # re-insert: most recently touched last
            self._documents[document.uri] = document
        if error is not None:
            raise error
        return document

    def close(self, uri: str) -> None:
        with self._lock:
            self._documents.pop(uri, None)

    def get(self, uri: str) -> Document | None:
        with self._lock:
            return self._documents.get(uri)

    def all(self) -> list[Document]:
        """Open documents, most recently opened or edited first."""
        with self._lock:
            return list(reversed(self._documents.values()))
