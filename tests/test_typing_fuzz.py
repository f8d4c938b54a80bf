"""The typing fuzz (bench/typing_fuzz.py, issue 53 item 1): a few seeds of 1,000 random steps against the
starter pair in float32 find no stale suggestion, no out-of-date next edit, no desync and no crash; and the
checker does count each kind of fault when one is put in front of it (a fuzz that cannot fail proves
nothing)."""

from __future__ import annotations

import pytest

from bench.fuzz_check import Asked, Checker
from bench.fuzz_peer import utf16_offset, utf16_position
from bench.typing_fuzz import BASE_OPTIONS, Fuzz, run_fuzz

SETTINGS = tuple(sorted(BASE_OPTIONS.items()))
TEXT = "def read_config(path):\n    return open(path).re\n"
CURSOR = TEXT.index(".re") + 3


class FakeReference(Checker):
    """A checker whose fresh server is a table: (text, offset) -> (insert text, start) or None."""

    def __init__(self, table: dict):
        super().__init__(reference=None)
        self.table = table

    def _ask_reference(self, asked: Asked):
        return self.table.get((asked.text, asked.offset))


def asked(text: str = TEXT, offset: int = CURSOR, method: str = "inlineCompletion", version: int = 2) -> Asked:
    return Asked(method, "file:///fuzz/a.py", "python", text, version, offset, True, SETTINGS)


def inline(text: str, start: int, insert: str, end: int | None = None) -> dict:
    end = start if end is None else end
    return {"jsonrpc": "2.0", "id": 1, "result": {"items": [{"insertText": insert, "range": {
        "start": utf16_position(text, start), "end": utf16_position(text, end)}}]}}


@pytest.mark.unit
def test_utf16_positions_round_trip_astral_characters():
    text = "a\U0001d518b\ncaf\u00e9"
    for offset in range(len(text) + 1):
        assert utf16_offset(text, utf16_position(text, offset)) == offset
    assert utf16_position(text, 2) == {"line": 0, "character": 3}
    assert utf16_offset(text, {"line": 0, "character": 2}) is None  # inside the surrogate pair
    assert utf16_offset(text, {"line": 2, "character": 0}) is None


@pytest.mark.unit
def test_an_exact_answer_and_its_typed_through_rest_pass():
    checker = FakeReference({(TEXT, CURSOR): ("ad()", CURSOR)})
    checker.answered(asked(), inline(TEXT, CURSOR, "ad()"))
    typed = TEXT[:CURSOR] + "a" + TEXT[CURSOR:]
    checker.answered(asked(typed, CURSOR + 1, version=3), inline(typed, CURSOR + 1, "d()"))
    summary = checker.summary()
    assert summary["faults"] == 0 and summary["counts"]["exact"] == 1 and summary["counts"]["type_through"] == 1


@pytest.mark.unit
def test_an_answer_judged_after_a_close_is_judged_with_what_the_server_kept_before_it():
    """A type-through answer to a request sent before the document closed is still the rest of the earlier
    suggestion; after the reopen, the same answer is stale (the server forgot it)."""
    checker = FakeReference({(TEXT, CURSOR): ("ad()", CURSOR)})
    checker.answered(asked(), inline(TEXT, CURSOR, "ad()"))
    typed = TEXT[:CURSOR] + "a" + TEXT[CURSOR:]
    checker.closed("file:///fuzz/a.py", 0)
    checker.answered(asked(typed, CURSOR + 1, version=3), inline(typed, CURSOR + 1, "d()"))
    reopened = Asked("inlineCompletion", "file:///fuzz/a.py", "python", typed, 4, CURSOR + 1, True, SETTINGS, 1)
    checker.answered(reopened, inline(typed, CURSOR + 1, "d()"))
    counts = checker.summary()["counts"]
    assert (counts["type_through"], counts["stale"]) == (1, 1), counts


@pytest.mark.unit
def test_a_suggestion_for_text_the_user_no_longer_has_is_stale():
    """Injected: the answer for ``...re`` shown after the user typed ``x`` (not the suggestion's start),
    the rest of it after a change elsewhere in the text, and an answer one character off."""
    checker = FakeReference({(TEXT, CURSOR): ("ad()", CURSOR)})
    checker.answered(asked(), inline(TEXT, CURSOR, "ad()"))
    other_key = TEXT[:CURSOR] + "x" + TEXT[CURSOR:]
    checker.answered(asked(other_key, CURSOR + 1, version=3), inline(other_key, CURSOR + 1, "d()"))
    elsewhere = "#\n" + TEXT[:CURSOR] + "a" + TEXT[CURSOR:]
    checker.answered(asked(elsewhere, CURSOR + 3, version=4), inline(elsewhere, CURSOR + 3, "d()"))
    checker.answered(asked(), inline(TEXT, CURSOR - 1, "ad()"))
    summary = checker.summary()
    assert summary["counts"]["stale"] == 3 and summary["faults"] == 3, summary


@pytest.mark.unit
def test_a_next_edit_not_of_the_text_asked_about_is_out_of_date():
    checker = FakeReference({})
    start, end = TEXT.index("re\n"), TEXT.index("re\n") + 2
    edit = {"range": {"start": utf16_position(TEXT, start), "end": utf16_position(TEXT, end)}, "newText": "read()"}
    line = TEXT.index("    return")
    region = {"start": utf16_position(TEXT, line), "end": utf16_position(TEXT, len(TEXT))}
    good = {"edits": [edit], "range": region, "text": "    return open(path).read()\n", "version": 2}
    checker.answered(asked(method="nextEdit"), {"result": good})
    assert checker.summary()["faults"] == 0
    checker.answered(asked(method="nextEdit"), {"result": {**good, "version": 1}})  # an older version's
    checker.answered(asked(method="nextEdit"), {"result": {**good, "text": "    return open(path).rea\n"}})
    past_end = {**edit, "range": {"start": {"line": 5, "character": 0}, "end": {"line": 5, "character": 1}}}
    checker.answered(asked(method="nextEdit"), {"result": {**good, "edits": [past_end]}})
    assert checker.summary()["counts"]["next_edit_out_of_date"] == 3
    # The same suggestion shown inline from the cursor (the server's inline replacement) passes.
    checker.answered(asked(), inline(TEXT, start, "read()", end))
    assert checker.summary()["counts"]["next_edit_inline"] == 1


@pytest.mark.unit
def test_no_answer_is_a_crash_and_a_wrong_digest_a_desync():
    checker = FakeReference({})
    checker.answered(asked(), None)
    checker.answered(asked(), {"error": {"code": -32603, "message": "boom"}})
    checker.answered(asked(), {"error": {"code": -32800, "message": "cancelled"}})  # not a fault
    checker.state("file:///fuzz/a.py", TEXT, 2, {"result": {"version": 2, "inSync": True, "length": 1,
                                                           "sha256": "0" * 64}})
    checker.state("file:///fuzz/a.py", None, None, {"result": None})  # closed on both sides: fine
    counts = checker.summary()["counts"]
    assert (counts["crash"], counts["error"], counts["desync"], counts["cancelled"]) == (1, 1, 1, 1)


@pytest.mark.e2e
def test_a_change_the_client_never_made_is_seen_as_a_desync():
    """The server's copy is checked for real: a ``didChange`` sent behind the reference's back makes
    ``speclsp/documentState`` disagree at the run's end."""
    from bench.fuzz_peer import Peer

    server = Peer(BASE_OPTIONS)
    try:
        fuzz = Fuzz(server, Checker(reference=None), seed=0)
        doc = next(iter(fuzz.docs.values()))
        server.notify("textDocument/didChange", {"textDocument": {"uri": doc.uri, "version": doc.version + 1},
                                                 "contentChanges": [{"text": doc.text + "x"}]})
        fuzz.run(0)
        summary = fuzz.checker.summary()
    finally:
        server.close()
    assert summary["counts"]["desync"] == 1 and summary["faults"] == 1, summary


@pytest.mark.e2e
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_thousand_random_steps_show_nothing_stale(seed, tmp_path):
    result = run_fuzz(seed, 1000, tmp_path)
    counts = result["counts"]
    assert result["faults"] == 0, result["details"]
    # The run exercised the paths it is meant to: suggestions checked against a fresh server, and typed through.
    assert counts["exact"] >= 50 and counts["type_through"] >= 5 and counts["state_checks"] >= 10, counts


@pytest.mark.unit
def test_document_state_answers_a_digest_never_the_text():
    from types import SimpleNamespace

    from lsprotocol import types

    from lsp_server.features.document_state import document_state, text_digest
    from lsp_server.workspace.documents import DocumentStore

    store = DocumentStore()
    store.open(types.TextDocumentItem(uri="file:///a.py", language_id="python", version=3, text="x = '\U0001d518'\n"))
    ls = SimpleNamespace(store=store)
    state = document_state(ls, {"textDocument": {"uri": "file:///a.py"}})
    assert state == {"version": 3, "inSync": True, "length": 9, "sha256": text_digest("x = '\U0001d518'\n")}
    assert document_state(ls, {"textDocument": {"uri": "file:///b.py"}}) is None
    assert document_state(ls, {"textDocument": {"uri": 7}}) is None and document_state(ls, [1]) is None
