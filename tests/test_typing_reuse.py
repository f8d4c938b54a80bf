"""Nothing thrown away while the user types (lsp_server/model/draft_sources.py ``#output``): a key that follows
what the model wrote is answered by verifying the previous output, finished or cancelled, in one pass,
and the answer is still exactly a fresh completion's. The typed-tail layout, starter pair, float32."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace

import pytest
from lsprotocol import types

from decoding.engine import Engine
from decoding.types import EngineConfig
from lsp_server.backends.local import as_backend
from lsp_server.model.completer import complete
from lsp_server.model.draft_sources import DraftSources
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for

pytestmark = pytest.mark.model

UTF32 = codec_for(types.PositionEncodingKind.Utf32)
HEAD = ("import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n        return handle.read()\n\n\n"
        "def read_")
SETTINGS = Settings(prompt_layout="tail", drafter="ngram", time_budget_ms=0, max_new_tokens=24)


@pytest.fixture
def backend():
    # A fresh engine per test: the draft-length policy learns verify costs from wall-clock time, and on
    # this tiny model a few noisy passes can make it stop drafting for the rest of a module.
    return as_backend(Engine.load(EngineConfig(model="starter", draft_model="none", device="cpu", dtype="float32")))


def ask(backend, text: str, sources: DraftSources, version: int, cancelled=None, settings: Settings = SETTINGS):
    document = Document("file:///cfg.py", text, version, "python")
    line = text.count("\n")
    position = types.Position(line=line, character=len(text) - text.rfind("\n") - 1)
    fields = {"cancelled": cancelled} if cancelled is not None else {}
    return complete(backend, resolve_request(document, position, UTF32, settings, **fields), sources=sources)


def plain_with(anchors) -> DraftSources:
    """Fresh sources (no #output) with a copy of ``anchors``: the same prompt, decoded without drafts."""
    sources = DraftSources()
    sources.anchors = copy.deepcopy(anchors)
    return sources


def output_stats(completion):
    return {str(name): stats for name, stats in completion.generation.stats.sources.items() if "#output" in str(name)}


def test_a_key_that_follows_the_output_is_answered_from_it_exactly(backend):
    sources = DraftSources()
    first = ask(backend, HEAD, sources, 1)
    written = first.generation.text
    assert len(written) >= 3, f"the starter model wrote too little to type through: {written!r}"
    typed = HEAD + written[:2]
    plain_sources = plain_with(sources.anchors)
    again = ask(backend, typed, sources, 2)
    plain = ask(backend, typed, plain_sources, 2, settings=replace(SETTINGS, drafter="none"))
    # Typed along the output: the prompt is the first one (its tail ids kept, the typed text healed).
    assert again.prompt.prompt_ids == first.prompt.prompt_ids == plain.prompt.prompt_ids
    assert again.prompt.healed == first.prompt.healed + written[:2]
    assert again.insert_text == plain.insert_text  # exact: only verified drafts are kept
    stats = output_stats(again)
    assert stats and sum(s.accepted for s in stats.values()) > 0, again.generation.stats.sources
    assert again.generation.stats.target_passes < plain.generation.stats.target_passes
    # A key that leaves what the model wrote: the tail is tokenised afresh.
    other = ask(backend, HEAD + "\u00e9", sources, 3)
    assert other.prompt.prompt_ids != first.prompt.prompt_ids


class StopAfter:
    """A cancellation flag that reads as set from its ``calls``-th poll on (a key arriving mid-generation)."""

    def __init__(self, calls: int):
        self.calls, self._event = calls, threading.Event()

    def is_set(self) -> bool:
        self.calls -= 1
        return self.calls < 0

    def set(self) -> None:
        self._event.set()


def test_a_cancelled_generation_feeds_the_next_request(backend):
    # Anchored at the line start: the starter model's answer there takes several passes (a cut needs them).
    settings = replace(SETTINGS, prompt_tail_lines=0)
    sources = DraftSources()
    whole = ask(backend, HEAD, DraftSources(), 1, settings=settings)
    cut = ask(backend, HEAD, sources, 1, cancelled=StopAfter(4), settings=settings)
    assert cut.generation.finish_reason == "cancelled" and cut.generation.token_ids
    assert whole.generation.token_ids[:len(cut.generation.token_ids)] == cut.generation.token_ids
    again = ask(backend, HEAD, sources, 2, settings=settings)
    assert again.insert_text == whole.insert_text
    assert sum(s.accepted for s in output_stats(again).values()) > 0, again.generation.stats.sources


@pytest.mark.parametrize("layout,tail_lines", [("psm", 0), ("tail", 0), ("tail", 2)])
def test_a_pause_at_a_line_end_prepares_the_next_lines_prompt(backend, layout, tail_lines):
    """ModelSession.prepare_ahead at the end of a line: the prompt after Enter goes into the spare cache
    (with a tail of up to 2 lines the anchor holds, and nothing goes there); after Enter the request
    computes only its indentation, and answers as a fresh session."""
    from lsp_server.request import after_enter
    from lsp_server.model.session import ModelSession

    settings = replace(SETTINGS, prompt_layout=layout, prompt_tail_lines=tail_lines)
    line = "    with open(path) as handle:"
    text = HEAD + "lines(path):\n" + line
    below = "\n\n\ndef write_config(path, text):\n    with open(path, 'w') as handle:\n        handle.write(text)\n"
    session = ModelSession(backend)
    at_end = resolve_request(Document("file:///cfg.py", text + below, 1, "python"), types.Position(
        line=text.count("\n"), character=len(line)), UTF32, settings)
    session.complete(at_end)
    assert session.prepare_ahead(at_end, should_stop=lambda: True) == 0  # work queued: it yields at once
    fed = session.prepare_ahead(at_end)
    if tail_lines:
        assert fed == 0  # the anchor holds after Enter: the next line is completed on the prompt in use
    else:
        assert fed > 40  # the whole prompt of the next line, into the spare
    entered = after_enter(at_end)
    assert entered.document.text == text + "\n        " + below and entered.line_prefix == "        "
    request = resolve_request(Document("file:///cfg.py", entered.document.text, 2, "python"), types.Position(
        line=text.count("\n") + 1, character=8), UTF32, settings)
    anchors = copy.deepcopy(session.sources.anchors)  # a fresh session with the same prompt
    answer = session.complete(request)
    # Without the spare the suffix (the function below) would be computed again after the new line break.
    assert answer.generation.stats.prefill_computed <= 3, answer.generation.stats
    # The line was completed ahead too: its output is drafted and accepted.
    assert sum(s.accepted for s in output_stats(answer).values()) > 0, answer.generation.stats.sources
    fresh = ModelSession(as_backend(Engine.load(EngineConfig(model="starter", draft_model="none", device="cpu",
                                                             dtype="float32"))))
    fresh.sources.anchors = anchors
    assert answer.insert_text == fresh.complete(request).insert_text


def test_a_pause_on_a_later_line_of_the_tail_anchors_anew_in_the_spare(backend):
    """ModelSession.prepare_ahead inside a tail that holds a line break: the prompt anchored at the cursor's
    line goes into the spare; when the tail then outgrows promptTailLines, the request takes that anchor
    and computes only its own tail, and answers as a fresh session."""
    from lsp_server.model.session import ModelSession

    settings = replace(SETTINGS, prompt_tail_lines=1)
    below = "\n\n\ndef write_config(path, text):\n    with open(path, 'w') as handle:\n        handle.write(text)\n"
    session = ModelSession(backend)

    def request_at(typed: str, version: int):
        text = HEAD + typed
        return resolve_request(Document("file:///cfg.py", text + below, version, "python"), types.Position(
            line=text.count("\n"), character=len(text) - text.rfind("\n") - 1), UTF32, settings)

    session.complete(request_at("lines(path):", 1))  # anchored at the line "def read_..."
    on_next = request_at("lines(path):\n    ", 2)  # after Enter, on the new line's indentation
    session.complete(on_next)
    assert session.sources.anchors.would_move(on_next, 1)
    assert session.prepare_ahead(on_next) > 40  # the prompt anchored at the new line, into the spare
    third = request_at("lines(path):\n    with open(path) as handle:\n        return", 3)
    assert not session.sources.anchors.holds_for(third, 1)  # two line breaks: the kept anchor fails
    answer = session.complete(third)
    assert answer.generation.stats.prefill_computed < 20, answer.generation.stats  # not the suffix again
    fresh = ModelSession(as_backend(Engine.load(EngineConfig(model="starter", draft_model="none", device="cpu",
                                                             dtype="float32"))))
    fresh.sources.anchors.place(third.uri, third.document.text, len(HEAD) + len("lines(path):\n"), third.offset)
    assert answer.insert_text == fresh.complete(third).insert_text


def test_the_next_line_follows_the_lines_indentation():
    from lsp_server.request import after_enter

    def at_end(text: str):
        return resolve_request(Document("file:///a.py", text, 1, "python"),
                               types.Position(line=text.count("\n"), character=len(text.rsplit("\n", 1)[-1])), UTF32)

    assert after_enter(at_end("x = 1\n\tif x:")).line_prefix == "\t\t"
    assert after_enter(at_end("    y = f(")).line_prefix == "        "
    assert after_enter(at_end("    y = 2")).line_prefix == "    "
    assert after_enter(at_end("    ")) is None  # a blank line: nothing to finish
    crlf = after_enter(at_end("a = 1\r\nb = 2"))
    assert crlf.document.text == "a = 1\r\nb = 2\r\n" and crlf.offset == len(crlf.document.text)
