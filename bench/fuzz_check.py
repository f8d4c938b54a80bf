"""The typing fuzz's checker (:mod:`bench.typing_fuzz`): every answer the fuzzed server sends is judged
against what the client believed the document held when it asked.

* An inline suggestion (``textDocument/inlineCompletion``) is **exact** when a fresh server (a second
  ``speclsp serve`` with the same settings, the document opened alone under the same URI, asked at the same
  cursor with the same trigger kind, then closed again: nothing kept between checks) answers the same text
  over the same range; a **type-through** answer when it is the rest of an exact suggestion answered
  earlier for this document (since it was opened) whose start the user has since typed at its cursor, the
  rest of the text unchanged (:mod:`lsp_server.requests.type_through`); a **next-edit** answer when it applies
  to the text as the document's last next-edit suggestions for this very text do
  (:meth:`lsp_server.requests.next_edit_service.NextEditService.inline_replacement`). Anything else is
  **stale**: a suggestion for text the user no longer has (or never had).
* A next-edit answer (``speclsp/nextEdit``) is **out of date** unless its version is the one asked about,
  its region and every edit lie in that text, and the edits applied to the text give its region's new text.
* A **desync**: ``speclsp/documentState`` (version, digest) differs from the client's document.
* A **crash**: the server exits, or a request goes unanswered; an error answer other than a cancellation
  is an **error**.

Reference answers are kept by (text, cursor, trigger, settings), so a repeated state costs one call. With
``check_fraction`` below 1 (a long bench run), only that share of the suggestions whose fresh answer is not
known yet is compared (``unchecked`` counts the rest, kept for the type-through check as if exact).
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from bench.fuzz_peer import Peer, utf16_offset, utf16_position

REQUEST_CANCELLED = -32800  # JSON-RPC error code of a request the client cancelled
KEPT_PER_DOCUMENT = 16  # earlier suggestions and next edits per document the checker keeps
FAULTS = ("stale", "next_edit_out_of_date", "desync", "crash", "error")
MAX_DETAILS = 20  # faults described in the report


@dataclass(frozen=True)
class Asked:
    """The client's view when it sent a request: the document as it believed it, and the cursor."""

    method: str  # inlineCompletion | nextEdit
    uri: str
    language: str
    text: str
    version: int
    offset: int  # code points
    automatic: bool
    settings: tuple  # the settings sent so far, as sorted (key, value) pairs
    opened: int = 0  # how many times the document had been opened (what the server keeps goes at a close)

    @property
    def position(self) -> dict:
        return utf16_position(self.text, self.offset)


def apply_text_edits(text: str, edits: list[dict]) -> str | None:
    """``text`` with LSP ``TextEdit``s applied (non-overlapping; ranges in UTF-16); ``None`` when a range
    does not lie in ``text``."""
    spans = []
    for edit in edits:
        start, end = utf16_offset(text, edit["range"]["start"]), utf16_offset(text, edit["range"]["end"])
        if start is None or end is None or end < start:
            return None
        spans.append((start, end, edit["newText"]))
    for start, end, new in sorted(spans, reverse=True):
        text = text[:start] + new + text[end:]
    return text


@dataclass
class Checker:
    """See the module docstring. ``reference``: the fresh server (its state is dropped after each check)."""

    reference: Peer
    check_fraction: float = 1.0  # of the suggestions whose fresh answer is not known yet, the share compared
    seed: int = 0  # of the sample (its own random source: the fuzz's steps do not depend on it)
    counts: Counter = field(default_factory=Counter)
    details: list[dict] = field(default_factory=list)
    _memo: dict = field(default_factory=dict)
    _shown: dict = field(default_factory=lambda: defaultdict(list))  # (uri, opened) -> [(text, offset, insert)]
    _next_edits: dict = field(default_factory=lambda: defaultdict(list))  # (uri, opened) -> [(text, text after edits)]
    _reference_settings: tuple = ()
    _answering: object = None  # the id of the response being judged (for a fault's description)
    verdict: str = ""  # what the last answer judged was (exact, type_through, stale...; "" for nothing shown)

    def __post_init__(self) -> None:
        self._sample = random.Random(self.seed)

    def fault(self, kind: str, asked: Asked | None, **facts) -> None:
        """Count a fault of ``kind`` (one of :data:`FAULTS`) and describe the first few."""
        self.counts[kind] += 1
        self.verdict = kind
        if len(self.details) < MAX_DETAILS:
            where = {} if asked is None else {"uri": asked.uri, "version": asked.version, "offset": asked.offset,
                                              "automatic": asked.automatic, "method": asked.method}
            self.details.append({"kind": kind, **where, **facts})

    def closed(self, uri: str, opened: int) -> None:
        """The client closed ``uri`` after its ``opened``-th open: what the server kept for it is gone (answers
        to requests sent before are still judged with it: they are keyed by the open, :attr:`Asked.opened`)."""
        for kept in (self._shown, self._next_edits):
            for key in [k for k in kept if k[0] == uri and k[1] < opened]:
                del kept[key]  # no request of those opens is left to judge (an earlier close's)

    def answered(self, asked: Asked, response: dict | None) -> None:
        """Judge the response to a request (``None``: none came before the deadline)."""
        if response is None:
            self.fault("crash", asked, why="no answer")
            return
        self.verdict = ""
        self.counts[f"asked_{asked.method}"] += 1
        self._answering = response.get("id")
        if "error" in response:
            if response["error"].get("code") == REQUEST_CANCELLED:
                self.counts["cancelled"] += 1
            else:
                self.fault("error", asked, error=response["error"])
            return
        if asked.method == "nextEdit":
            self._next_edit(asked, response.get("result"))
        else:
            items = (response.get("result") or {}).get("items") or []
            if items:
                self._inline(asked, items[0])
            else:
                self.counts["empty"] += 1

    def _inline(self, asked: Asked, item: dict) -> None:
        self.counts["shown"] += 1
        start = utf16_offset(asked.text, item["range"]["start"])
        end = utf16_offset(asked.text, item["range"]["end"])
        insert = item["insertText"]
        if start is None or end is None or end < start:
            self.fault("stale", asked, why="range outside the text", range=item["range"])
            return
        if start == end and self._sampled_out(asked):  # kept for type-through, as if exact
            self.counts["unchecked"] += 1
            self.verdict = "unchecked"
            self._keep_shown(asked, start, insert)
            return
        if start == end and self.reference_answer(asked) == (insert, start):
            self.counts["exact"] += 1
            self.verdict = "exact"
            self._keep_shown(asked, start, insert)
            return
        if start == end == asked.offset and self._typed_through(asked, insert):
            self.counts["type_through"] += 1
            self.verdict = "type_through"
            return
        after = asked.text[:start] + insert + asked.text[end:]
        next_edits = self._next_edits[asked.uri, asked.opened]
        if any(text == asked.text and edited == after for text, edited in next_edits):
            self.counts["next_edit_inline"] += 1
            self.verdict = "next_edit_inline"
            return
        self.fault("stale", asked, shown=insert, range=[start, end], fresh=self.reference_answer(asked),
                   line=_line_at(asked.text, asked.offset), msg_id=self._answering, text=asked.text)

    def _sampled_out(self, asked: Asked) -> bool:
        """Whether this suggestion goes unchecked: not in the sample, and its fresh answer not known."""
        return self.check_fraction < 1 and self._key(asked) not in self._memo and \
            self._sample.random() >= self.check_fraction

    def _keep_shown(self, asked: Asked, start: int, insert: str) -> None:
        kept = self._shown[asked.uri, asked.opened]
        kept.append((asked.text, start, insert))
        del kept[:-KEPT_PER_DOCUMENT]

    def _typed_through(self, asked: Asked, insert: str) -> bool:
        """Whether ``insert`` is the rest of an earlier exact suggestion whose start was typed since."""
        text, offset = asked.text, asked.offset
        for old_text, old_offset, old_insert in self._shown[asked.uri, asked.opened]:
            typed = text[old_offset:offset] if offset >= old_offset else None
            if typed is None or len(text) - offset != len(old_text) - old_offset:
                continue
            if (len(typed) < len(old_insert) and old_insert.startswith(typed) and insert == old_insert[len(typed):]
                    and text.startswith(old_text[:old_offset]) and text.endswith(old_text[old_offset:])):
                return True
        return False

    def _next_edit(self, asked: Asked, result: dict | None) -> None:
        if result is None:
            return
        self.counts["next_edits"] += 1
        edited = apply_text_edits(asked.text, result["edits"])
        start = utf16_offset(asked.text, result["range"]["start"])
        end = utf16_offset(asked.text, result["range"]["end"])
        if result["version"] != asked.version or edited is None or start is None or end is None or end < start:
            self.fault("next_edit_out_of_date", asked, why="version or range not of the text asked about",
                       answered_version=result["version"], range=result["range"])
            return
        if asked.text[:start] + result["text"] + asked.text[end:] != edited:
            self.fault("next_edit_out_of_date", asked, why="its edits do not give its region's text")
            return
        kept = self._next_edits[asked.uri, asked.opened]
        kept.append((asked.text, edited))
        del kept[:-KEPT_PER_DOCUMENT]

    def reference_answer(self, asked: Asked) -> tuple[str, int] | None:
        """What a fresh server shows for the asked text and cursor: (insert text, start offset) or ``None``."""
        key = self._key(asked)
        if key not in self._memo:
            self.counts["reference_calls"] += 1
            started = time.monotonic()
            self._memo[key] = self._ask_reference(asked)
            self.counts["reference_ms"] += round(1000 * (time.monotonic() - started))
        return self._memo[key]

    @staticmethod
    def _key(asked: Asked) -> tuple:
        return asked.uri, asked.language, asked.text, asked.offset, asked.automatic, asked.settings

    def _ask_reference(self, asked: Asked) -> tuple[str, int] | None:
        peer = self.reference
        if asked.settings != self._reference_settings:
            peer.notify("workspace/didChangeConfiguration", {"settings": dict(asked.settings)})
            self._reference_settings = asked.settings
        peer.notify("textDocument/didOpen", {"textDocument": {"uri": asked.uri, "languageId": asked.language,
                                                              "version": 1, "text": asked.text}})
        msg_id = peer.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": asked.uri}, "position": asked.position,
            "context": {"triggerKind": 2 if asked.automatic else 1}})
        response = peer.wait(msg_id, 120.0)
        peer.notify("textDocument/didClose", {"textDocument": {"uri": asked.uri}})
        if response is None or "error" in response:
            raise RuntimeError(f"the reference server failed: {response}; {peer.log_tail()}")
        items = (response.get("result") or {}).get("items") or []
        if not items:
            return None
        start = utf16_offset(asked.text, items[0]["range"]["start"])
        return items[0]["insertText"], start

    def state(self, uri: str, text: str | None, version: int | None, response: dict | None) -> None:
        """Judge a ``speclsp/documentState`` answer against the client's document (``text`` ``None``:
        the client has it closed, and the server must not hold it)."""
        self.verdict = "state"
        if response is None:
            self.fault("crash", None, uri=uri, why="no answer to documentState")
            return
        state = response.get("result")
        self.counts["state_checks"] += 1
        if text is None:
            if state is not None:
                self.fault("desync", None, uri=uri, why="closed, yet held", server=state)
            return
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if state is None or state["version"] != version or state["sha256"] != digest or not state["inSync"]:
            self.fault("desync", None, uri=uri, version=version, server=state)

    def summary(self) -> dict:
        """Counts of every kind (faults first, zero when none) and the first faults' details."""
        counts = {kind: self.counts.get(kind, 0) for kind in FAULTS}
        counts.update({k: v for k, v in sorted(self.counts.items()) if k not in counts})
        return {"counts": counts, "faults": sum(counts[k] for k in FAULTS), "details": self.details}


def _line_at(text: str, offset: int) -> str:
    """The cursor's line with ``|`` at the cursor (for a fault's description)."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text[start:offset] + "|" + text[offset:len(text) if end < 0 else end]
