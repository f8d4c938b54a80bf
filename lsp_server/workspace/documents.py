"""The document store: ``didOpen`` / ``didChange`` / ``didClose`` events in, text out.

Incremental changes are applied with :mod:`lsp_server.workspace.positions` (LSP line breaks, negotiated
encoding), so a document holding form feeds or U+2028 keeps its coordinates right. A change range
outside the document is clamped as the reference implementation clamps it (a range ending at
``{line: lineCount, character: 0}`` ends at the end of the text); a range whose start is after its end
is read with its ends swapped.

A ``didChange`` whose parameters do not fit the protocol's types cannot be applied, and its text is
lost: when its URI can be read (:func:`structure_change`), that document is marked out of sync
(:meth:`DocumentStore.mark_out_of_sync`), so no completion is computed from text the client no longer
has; a later full-text change or a reopen brings it back in sync.

The store holds the one copy of each document's text (pygls' workspace keeps none, see
:class:`lsp_server.server.SpeclspProtocol`); each change makes a new immutable snapshot whose line
index follows the edit (:meth:`lsp_server.workspace.positions.LineIndex.edited`) instead of a rescan.

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

from lsp_server.workspace.positions import LineIndex, clamp_raw_position, to_model_text


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _scrubbed(text: str) -> str:
    """``text`` with each lone surrogate code point replaced by U+FFFD (same lengths)."""
    if text.isascii():  # known without a scan
        return text
    try:
        text.encode("utf-8")  # fails on a lone surrogate; far faster than the pattern on a large text
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


@dataclass(frozen=True)
class Document:
    """An immutable snapshot of an open document."""

    uri: str
    text: str
    version: int
    language_id: str
    in_sync: bool = True  # False after a change that could not be applied, until a full-text change
    sync_problem: str = ""  # why it is out of sync (the same string for every snapshot until it is healed)

    @cached_property
    def lines(self) -> LineIndex:
        """Line starts of ``text``, computed once per snapshot."""
        return LineIndex.of(self.text)

    @cached_property
    def model_text(self) -> str:
        """``text`` with every line break as ``\n`` (what models see), computed once per snapshot."""
        return to_model_text(self.text)

    def model_split(self, offset: int) -> tuple[str, str]:
        """Model text before and after ``offset`` (code points into ``text``): a copy of the whole
        text; see :meth:`model_window` for the parts near the cursor."""
        if "\r" not in self.text:  # the common case: model text is the text itself
            return self.text[:offset], self.text[offset:]
        return to_model_text(self.text[:offset]), to_model_text(self.text[offset:])

    def model_window(self, offset: int, before: int, after: int) -> ModelWindow:
        """The last ``before`` and the first ``after`` characters of :meth:`model_split`'s two parts,
        with those parts' lengths; costs the window, not the document (a CRLF document: also a count
        of its ``\\r\\n`` pairs, in C)."""
        text = self.text
        if "\r" not in text:
            return ModelWindow(text[max(0, offset - before):offset], offset, text[offset:offset + after],
                               len(text) - offset)
        # Each line break is one or two characters, so twice the window's length in text holds it.
        prefix = to_model_text(text[max(0, offset - 2 * before):offset])
        suffix = to_model_text(text[offset:offset + 2 * after])
        return ModelWindow(prefix[max(0, len(prefix) - before):], offset - text.count("\r\n", 0, offset),
                           suffix[:after], len(text) - offset - text.count("\r\n", offset))


@dataclass(frozen=True)
class ModelWindow:
    """Model text (``\\n`` line breaks) around a cursor, and the lengths of all of it."""

    prefix: str  # the end of the model text before the cursor
    prefix_length: int  # characters of model text before the cursor
    suffix: str  # the start of the model text after the cursor
    suffix_length: int  # characters of model text after the cursor


class DocumentStore:
    """Open documents by URI. Thread-safe: handlers write, the model worker reads snapshots."""

    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}
        self._lock = threading.Lock()

    def open(self, item: types.TextDocumentItem) -> Document:
        document = Document(item.uri, _scrubbed(item.text), item.version, item.language_id)
        with self._lock:
            self._put(document)  # insertion order = least to most recently touched
        return document

    def change(self, params: types.DidChangeTextDocumentParams, codec: PositionCodec,
               applied: list[tuple[int, int, str]] | None = None) -> Document:
        """Apply content changes in order; the new snapshot.

        Args:
            applied: when given, each applied change is appended to it as (start, end, new text), code
                points into the text as it was just before that change (a full-text change: the whole text).

        Ranges are clamped (see the module docstring). An incremental change to a document that is out
        of sync is skipped (its offsets refer to text we do not have); a full-text change brings it
        back in sync.

        Raises:
            KeyError: for a document that was never opened.
        """
        with self._lock:
            document = self._documents[params.text_document.uri]
            # The line index follows the edits (LineIndex.edited), so a keystroke does not rescan the file.
            index, problem = document.lines, "" if document.in_sync else (document.sync_problem or "out of sync")
            for change in params.content_changes:
                if isinstance(change, types.TextDocumentContentChangePartial):
                    if problem:
                        continue
                    start = index.change_offset(change.range.start, codec)
                    end = index.change_offset(change.range.end, codec)
                    start, end = min(start, end), max(start, end)
                    replacement = _scrubbed(change.text)
                    if applied is not None:
                        applied.append((start, end, replacement))
                    index = index.edited(start, end, replacement)
                else:
                    if applied is not None:
                        applied.append((0, len(index.text), _scrubbed(change.text)))
                    index, problem = LineIndex.of(_scrubbed(change.text)), ""
            document = Document(document.uri, index.text, params.text_document.version, document.language_id,
                                not problem, problem)
            document.__dict__["lines"] = index  # the cached_property's value: computed already
            self._put(document)
        return document

    def mark_out_of_sync(self, uri: str, problem: str) -> Document | None:
        """Record that a change to ``uri`` was lost (``problem`` says how; the snapshot's
        ``sync_problem`` adds the last version applied); the document keeps its last good text until a
        full-text change or a reopen. ``None`` for a document that is not open."""
        with self._lock:
            document = self._documents.get(uri)
            if document is None:
                return None
            if document.in_sync:  # the first loss names the problem until the document is healed
                document = Document(document.uri, document.text, document.version, document.language_id, False,
                                    f"{problem} after version {document.version}")
                document.__dict__["lines"] = self._documents[uri].lines
            self._put(document)
        return document

    def _put(self, document: Document) -> None:
        """Store a snapshot as its document's newest, most recently touched last. Lock held."""
        self._documents.pop(document.uri, None)
        self._documents[document.uri] = document

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


class MalformedChange(ValueError):
    """A ``didChange`` whose parameters do not fit the protocol's types.

    Attributes:
        uri: the document it was for, when the raw message names one (a string); else ``None``.
    """

    def __init__(self, uri: str | None, reason: str):
        super().__init__(reason)
        self.uri = uri


def structure_change(converter, raw: object) -> types.DidChangeTextDocumentParams:
    """The ``didChange`` parameters of a raw JSON value (as ``json.loads`` gives it), with negative
    and overlarge range numbers clamped first (:func:`lsp_server.workspace.positions.clamp_raw_position`); a
    the document's ``uri`` and a change's ``text`` must be strings (the converter would accept anything,
    as its ``str()``).

    Args:
        converter: a cattrs converter that knows lsprotocol's types (the protocol's).
    Raises:
        MalformedChange: the value does not fit; carries the document URI when it can be read.
    """
    uri = None
    if isinstance(raw, dict) and isinstance(raw.get("textDocument"), dict):
        uri = raw["textDocument"].get("uri") if isinstance(raw["textDocument"].get("uri"), str) else None
    if uri is None:  # the converter would take a number as its str()
        raise MalformedChange(None, "no 'textDocument' with a string 'uri'")
    if isinstance(raw.get("contentChanges"), list):
        changes = raw["contentChanges"]
        if not all(isinstance(change, dict) and isinstance(change.get("text"), str) for change in changes):
            # lsprotocol's converter would turn a number, null or a list into its str(): not the client's text
            raise MalformedChange(uri, "a content change without a string 'text'")
        raw = {**raw, "contentChanges": [_clamped_change(change) for change in changes]}
    try:
        return converter.structure(raw, types.DidChangeTextDocumentParams)
    except Exception as exc:  # cattrs raises several kinds; every one means "does not fit"
        raise MalformedChange(uri, f"{type(exc).__name__}: {_reason(exc)}") from exc


def _clamped_change(change: object) -> object:
    if not (isinstance(change, dict) and isinstance(change.get("range"), dict)):
        return change
    span = change["range"]
    return {**change, "range": {**span, "start": clamp_raw_position(span.get("start")),
                                "end": clamp_raw_position(span.get("end"))}}


def _reason(exc: BaseException) -> str:
    """A short account of a structuring error (cattrs groups its errors; the first few leaves)."""
    leaves = []
    pending = [exc]
    while pending and len(leaves) < 3:
        error = pending.pop(0)
        nested = getattr(error, "exceptions", None)
        if nested:
            pending.extend(nested)
        else:
            leaves.append(str(error) or type(error).__name__)
    return "; ".join(leaves)[:300]
