"""A next-edit suggestion as an inline completion item (issue 21): when the whole change lies on the
cursor's line at or after the cursor, ``textDocument/inlineCompletion`` answers it (a range from the
cursor over the replaced text) without a model call; otherwise the request is completed as usual."""

from __future__ import annotations

import functools

import pytest
from lsprotocol import types

from decoding.types import FinishReason, Generation
from decoding.stats import GenerationStats
from lsp_server.model.completer import Rewrite
from lsp_server.workspace.documents import DocumentStore
from lsp_server.workspace.positions import codec_for
from lsp_server.backends.base import RewritePrompt
from lsp_server.settings import Settings
from lsp_server.next_edit.text_edits import apply_edits, inline_replacement
from lsp_server.model.worker import READY, ModelWorker
from tests.fake_session import FakeSession, services

pytestmark = pytest.mark.unit

TEXT = "def area(w, height):\n    total = width * height\n    return total\r\nx = 1\n"
LINE_1 = TEXT.index("    total")
WIDTH = TEXT.index("width")


@pytest.mark.parametrize("edits, cursor, expected", [
    ([(WIDTH, WIDTH + 5, "w")], WIDTH, (WIDTH, WIDTH + 5, "w")),
    ([(WIDTH, WIDTH + 5, "w")], LINE_1, (LINE_1, WIDTH + 5, "    total = w")),  # text between: kept
    ([(WIDTH, WIDTH + 5, "w"), (WIDTH + 8, WIDTH + 14, "h")], LINE_1 + 4, (LINE_1 + 4, WIDTH + 14, "total = w * h")),
    ([(WIDTH + 5, WIDTH + 5, "_px\n    w2 = w")], WIDTH + 5, (WIDTH + 5, WIDTH + 5, "_px\n    w2 = w")),  # lines inserted
    ([(WIDTH, WIDTH + 5, "w")], WIDTH + 1, None),  # starts before the cursor
    ([(WIDTH, WIDTH + 5, "w"), (TEXT.index("total\r"), TEXT.index("total\r") + 5, "t")], WIDTH, None),  # next line
    ([(TEXT.index("\r\n"), TEXT.index("\r\n") + 2, "\n")], TEXT.index("total\r"), None),  # the line break itself
    ([], WIDTH, None),
])
def test_inline_replacement(edits, cursor, expected):
    got = inline_replacement(TEXT, edits, cursor)
    assert got == expected
    if got is not None:  # replacing text[cursor:end] with the item's text is applying the edits
        start, end, new_text = got
        assert TEXT[:start] + new_text + TEXT[end:] == apply_edits(TEXT, edits)


async def test_a_suggestion_on_the_cursor_line_is_the_inline_item_until_the_document_changes():
    completed = []

    def fake_complete(request):
        completed.append(request.offset)  # no Completion: as when superseded, the answer is empty

    def fake_rewrite(request):
        line_start = TEXT.index("    total")
        prompt = RewritePrompt([1], [1], line_start, TEXT.index("\n", line_start), "", "```", True)
        generation = Generation([1], "", FinishReason.STOP, GenerationStats())
        return Rewrite(prompt, generation, "    total = w * height", [(WIDTH, WIDTH + 5, "w")])

    worker = ModelWorker(lambda config, on_stage: None,
                         functools.partial(FakeSession, on_complete=fake_complete, on_rewrite=fake_rewrite))
    assert worker.load(Settings().engine_config()).result(timeout=10) == READY
    store, uri = DocumentStore(), "file:///area.py"
    pipeline, service, next_edits = services(store, worker)
    pipeline.position_encoding = "utf-16"
    store.open(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=TEXT))
    at_width = types.Position(line=1, character=WIDTH - LINE_1)
    try:
        assert await service.complete("inlineCompletion", uri, at_width) is None and len(completed) == 1
        assert (await next_edits.next_edit(uri, types.Position(line=0, character=10))).rewrite.edits
        answer = await service.complete("inlineCompletion", uri, at_width)
        assert answer.insert_text == "w" and answer.completion is None and len(completed) == 1
        assert answer.range == types.Range(start=at_width, end=types.Position(line=1, character=WIDTH - LINE_1 + 5))
        # Past the change's start, or the other completion method: completed as usual.
        assert await service.complete("inlineCompletion", uri, types.Position(line=1, character=WIDTH - LINE_1 + 1)) is None
        assert await service.complete("completion", uri, at_width) is None and len(completed) == 3
        # The document changed: the suggestion no longer applies.
        store.change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=TEXT + "y = 2\n")]), codec_for("utf-16"))
        assert await service.complete("inlineCompletion", uri, at_width) is None and len(completed) == 4
    finally:
        worker.shutdown()
