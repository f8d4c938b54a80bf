"""The completion service in process: empty answers before the models are ready, settings parsing."""

from __future__ import annotations

import functools
import threading

import pytest
from lsprotocol import types

from decoding.engine import Engine
from lsp_server.documents import DocumentStore
from lsp_server.service import CompletionService
from lsp_server.settings import Settings, parse_settings
from lsp_server.tracing import Tracer
from lsp_server.worker import ERROR, READY, ModelWorker

STARTER = Settings(model="starter", draft_model="starter-draft")


@pytest.mark.model
async def test_requests_before_ready_get_empty_answers_then_real_ones():
    release = threading.Event()

    def slow_loader(config, on_stage):
        release.wait(timeout=60)
        return Engine.load(config, on_stage)

    sent = []
    store = DocumentStore()
    worker = ModelWorker(slow_loader)
    service = CompletionService(store, worker, Tracer(sent.append), lambda: Settings(max_new_tokens=8))
    store.open(types.TextDocumentItem(uri="file:///a.py", language_id="python", version=1,
                                      text="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    "))
    loading = worker.load(STARTER.engine_config())
    assert await service.complete("inlineCompletion", "file:///a.py", types.Position(line=4, character=4)) is None
    assert "models loading" in sent[-1].message
    release.set()
    assert loading.result(timeout=120) == READY
    answer = await service.complete("inlineCompletion", "file:///a.py", types.Position(line=4, character=4))
    assert answer is not None and answer.insert_text.strip()
    assert answer.range == types.Range(start=types.Position(line=4, character=4), end=types.Position(line=4, character=4))
    worker.shutdown()


@pytest.mark.model
async def test_an_opened_document_is_tokenised_ahead_and_its_first_request_starts_from_those_tokens():
    import json.decoder
    from pathlib import Path

    from lsp_server.prompt_tokens import SourceKey

    store = DocumentStore()
    worker = ModelWorker()
    service = CompletionService(store, worker, Tracer(), lambda: Settings(max_new_tokens=4))
    assert worker.load(STARTER.engine_config()).result(timeout=120) == READY
    text = Path(json.decoder.__file__).read_text()
    uri = "file:///big.py"
    store.open(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    service.document_opened(uri)
    encoder = worker.submit(service.sources.encoder).result(timeout=60)  # the seeding ran before this
    assert encoder.holds(SourceKey(uri))
    before = encoder.reused_tokens
    line = text[:text.index("def py_scanstring")].count("\n") + 3
    await service.complete("inlineCompletion", uri, types.Position(line=line, character=4))
    assert encoder.reused_tokens - before > 1000  # the prompt window's tokens (about 1,300)
    worker.shutdown()


@pytest.mark.unit
async def test_failed_load_answers_empty_and_keeps_the_error():
    worker = ModelWorker(lambda config, on_stage: (_ for _ in ()).throw(FileNotFoundError("no weights here")))
    assert worker.load(STARTER.engine_config()).result(timeout=10) == ERROR
    assert "no weights here" in worker.error
    store = DocumentStore()
    store.open(types.TextDocumentItem(uri="file:///a.py", language_id="python", version=1, text="x"))
    service = CompletionService(store, worker, Tracer(), Settings)
    assert await service.complete("inlineCompletion", "file:///a.py", types.Position(line=0, character=1)) is None


@pytest.mark.unit
@pytest.mark.parametrize("options,expected,warning", [
    (None, Settings(), None),
    ([], Settings(), None),  # an empty Lua table (Neovim) is an empty JSON array
    ({"maxNewTokens": 16, "temperature": 0}, Settings(max_new_tokens=16, temperature=0.0), None),
    ({"speclsp": {"drafter": "ngram"}}, Settings(drafter="ngram"), None),
    ({"drafter": "magic"}, Settings(), "invalid value 'magic' for speclsp.drafter"),
    ({"maxNewTokens": "lots"}, Settings(), "invalid value 'lots'"),
    ({"maxNewTokens": True}, Settings(), "invalid value True"),
    ({"topP": 0}, Settings(), "speclsp.topP"),
    ({"colour": "blue"}, Settings(), "unknown setting speclsp.colour"),
    ([1, 2], Settings(), "must be a JSON object"),
    ({"drafter": "model", "draftModel": "none"}, Settings(drafter="ngram", draft_model="none"), "needs a draft model"),
])
def test_settings_are_typed_and_invalid_values_keep_defaults(options, expected, warning):
    settings, warnings = parse_settings(options)
    assert settings == expected
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warning in warnings[0]


@pytest.mark.unit
@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
async def test_l1_l5_ranges_in_the_negotiated_encoding(monkeypatch, encoding):
    """The answer's range sits at the cursor, in the client's units, whatever the model writes."""
    from lsp_server import service as service_module
    from lsp_server.completer import Completion
    from lsp_server.completion_mode import Mode
    from lsp_server.prompt import build_prompt
    from decoding.generate import Generation
    from decoding.stats import GenerationStats

    seen = {}

    def fake_complete(engine, request, others, repo=None, sources=None):
        context = build_prompt(request, _tokenizer())
        seen["prefix"], seen["suffix"] = context.prefix, context.suffix
        return Completion("world", context, Generation([1], "world", "stop", GenerationStats()), Mode(False))

    monkeypatch.setattr(service_module, "complete", fake_complete)
    worker = ModelWorker(lambda config, on_stage: object())  # never used: complete() is replaced
    assert worker.load(STARTER.engine_config()).result(timeout=10) == READY
    store = DocumentStore()
    service = CompletionService(store, worker, Tracer(), Settings)
    service.position_encoding = encoding
    text = '# 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 smoke\n\n    print("Goodbye, ")\n    s = "😀😀"; return s\n    t = "日本語 é"; x\n'
    store.open(types.TextDocumentItem(uri="file:///l1.py", language_id="python", version=1, text=text))
    codec_units = {"utf-16": lambda s: len(s.encode("utf-16-le")) // 2, "utf-8": lambda s: len(s.encode()),
                   "utf-32": len}[encoding]
    for line, before in ((2, '    print("Goodbye, '), (3, '    s = "😀😀"; '), (4, '    t = "日本語 é"; ')):
        position = types.Position(line=line, character=codec_units(before))
        answer = await service.complete("inlineCompletion", "file:///l1.py", position)
        assert answer.range == types.Range(start=position, end=position)
        assert seen["prefix"].endswith(before) and text.split("\n")[line].startswith(before + seen["suffix"][:1])
    worker.shutdown()


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from transformers import AutoTokenizer

    from decoding.starter import TARGET_DIR

    return AutoTokenizer.from_pretrained(TARGET_DIR, local_files_only=True)
