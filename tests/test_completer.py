"""Completion post-processing and greedy equivalence on the bundled starter pair."""

from __future__ import annotations

import pytest
import torch
from lsprotocol import types

from bench.corpus import read_texts, stdlib_files
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramDrafter
from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.generate import _Output
from decoding.types import GenerationConfig
from lsp_server.backends.local import as_backend
from lsp_server.model.completer import complete, postprocess
from lsp_server.completion.mode import decide_mode
from lsp_server.completion.prompt import build_prompt
from lsp_server.workspace.documents import Document
from lsp_server.model.draft_sources import DraftSources
from lsp_server.workspace.positions import codec_for
from lsp_server.completion.prompt_tokens import SourceKey
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from tests.greedy_check import assert_greedy_equal

pytestmark = pytest.mark.model

UTF16 = codec_for("utf-16")


@pytest.fixture(scope="module")
def engine():
    # float32: these tests check token-for-token equality, which bfloat16 may break at near-ties
    # (see decoding.weights.loading.resolve_dtype); "auto" would pick bfloat16 on CPUs that have it.
    return Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))


def held_out_prompts(engine, count: int) -> list[list[int]]:
    paths = stdlib_files(want_held_out=True)[:6]
    prompts = []
    for path, text in zip(paths, read_texts(paths)):
        lines = text.split("\n")
        line = len(lines) // 2
        document = Document(path.as_uri(), text, 0, "python")
        request = resolve_request(document, types.Position(line=line, character=0), UTF16,
                                  Settings(prefix_tokens=256, suffix_tokens=64))
        context = build_prompt(request, engine.tokenizer)
        prompts.append(context.prompt_ids)
    return prompts[:count]


def test_special_tokens_spelled_out_as_text_are_cut(engine):
    """No special token in the inserted text (docs/cases.md L8): a model writing '<|endoftext|>' byte by
    byte (not as the special id) is cut there too."""
    document = Document("file:///a.py", "def f():\n    ", 1, "python")
    context = build_prompt(resolve_request(document, types.Position(line=1, character=4), UTF16), engine.tokenizer)
    mode = decide_mode(context.prefix, context.line_suffix, "python")
    config = Settings().generation_config(mode.multi_line, engine)
    assert set(engine.tokenizer.all_special_tokens) <= set(config.stop_strings)
    assert set(engine.tokenizer.all_special_ids) <= config.stop_token_ids  # as ids too: any special token ends it
    assert "\n" not in config.stop_strings  # an empty rest of line: multi-line allowed
    spelled = engine.tokenizer("return 1<|fim_pad|>junk", add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert not set(spelled) & set(engine.tokenizer.all_special_ids)
    output = _Output(engine.tokenizer, config, frozenset())
    for token in spelled:
        if output.commit(token):
            break
    assert output.finish_reason == "stop" and output.final_text() == "return 1"


def test_postprocess_single_line_crlf_and_trailing_space(engine):
    single = build_prompt(resolve_request(Document("file:///a.py", "x = foo()\r\n", 1, "python"),
                                           types.Position(line=0, character=8), UTF16), engine.tokenizer)
    single_mode = decide_mode(single.prefix, single.line_suffix, "python")
    assert not single_mode.multi_line and postprocess("a, b\n    more", single, single_mode, "python") == "a, b"
    multi = build_prompt(resolve_request(Document("file:///b.py", "def f():\r\n    ", 1, "python"),
                                          types.Position(line=1, character=4), UTF16), engine.tokenizer)
    multi_mode = decide_mode(multi.prefix, multi.line_suffix, "python")
    assert multi_mode.multi_line
    assert postprocess("x = 1\n    return x\n\n", multi, multi_mode, "python") == "x = 1\r\n    return x"


@pytest.mark.parametrize("k", [1, 2, 5])
def test_starter_pair_greedy_equivalence(engine, k):
    target = engine.target.model
    config = GenerationConfig(max_new_tokens=20, max_draft_tokens=k)  # stops at end-of-sequence, as generate does
    generated = 0
    for prompt in held_out_prompts(engine, 3):
        plain = engine.generator.generate(prompt, None, config)
        generated += len(plain.token_ids)
        reference = target.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                    max_new_tokens=20, do_sample=False, pad_token_id=0)
        assert_greedy_equal(target, prompt, plain.token_ids, reference[0, len(prompt):].tolist())
        for drafter in (ModelDrafter(engine.draft.model, engine.target.vocab_size), NgramDrafter()):
            spec = engine.generator.generate(prompt, drafter, config)
            assert_greedy_equal(target, prompt, spec.token_ids, plain.token_ids)
            assert spec.stats.drafted > 0 or isinstance(drafter, NgramDrafter)
    assert generated >= 30, "the prompts must give outputs long enough for several rounds"


def test_every_drafter_mode_completes_the_same(engine):
    text = read_texts(stdlib_files(want_held_out=True)[:1])[0]
    document = Document("file:///held_out.py", text, 0, "python")
    line = len(text.split("\n")) // 3
    position = types.Position(line=line, character=0)
    texts = {mode: complete(as_backend(engine), resolve_request(document, position, UTF16,
                                                    Settings(drafter=mode, max_new_tokens=24, time_budget_ms=0))).insert_text
             for mode in ("none", "ngram", "model", "staged", "auto")}
    assert len(set(texts.values())) == 1, texts



def test_repository_files_similar_to_the_cursor_become_draft_sources(engine, tmp_path):
    from lsp_server.workspace.repo_index import RepoIndex

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "shapes.py").write_text("class Circle:\n    def area(self):\n        return self.radius_value ** 2\n")
    (tmp_path / "pkg" / "other.py").write_text("import os\nprint(os.getcwd())\n")
    index = RepoIndex([tmp_path])
    index.scan()
    document = Document((tmp_path / "pkg" / "square.py").as_uri(), "class Square:\n    def area(self):\n        return ", 1,
                        "python")
    engine.reset_caches()
    complete(as_backend(engine), resolve_request(document, types.Position(line=2, character=15), UTF16, Settings(max_new_tokens=4)),
             repo=index)
    assert SourceKey((tmp_path / "pkg" / "shapes.py").as_uri()) in engine.sources  # shares identifiers: a source
    assert SourceKey((tmp_path / "pkg" / "other.py").as_uri()) not in engine.sources  # nothing in common


def test_each_document_keeps_its_own_prompt_cache(engine):
    """Working in another file in between does not cost the first file its cached prompt; a closed
    document's caches go; outputs equal a cold start."""
    config = GenerationConfig(max_new_tokens=4)
    texts = read_texts(stdlib_files(want_held_out=True)[:2])
    prompt_a, prompt_b = (engine.tokenizer.encode(t[:1500]) for t in texts)
    engine.reset_caches()
    engine.generate(prompt_a, config, "none", cache_key="a")
    engine.generate(prompt_b, config, "none", cache_key="b")
    again = engine.generate(prompt_a + [prompt_b[0]], config, "none", cache_key="a")
    assert again.stats.prefill_reused == len(prompt_a)  # only the new token is computed
    cold = engine.generate(prompt_a + [prompt_b[0]], config, "none", cache_key="fresh")
    assert cold.stats.prefill_reused == 0 and cold.token_ids == again.token_ids
    engine.forget_cache("a")
    assert engine.generate(prompt_a, config, "none", cache_key="a").stats.prefill_reused == 0


def test_large_document_parts_are_tokenised_after_the_first_answer_then_drafted_from(engine):
    """The first request in a large document leaves its parts outside the prompt to warm_up (run after
    answering); once run, the next request searches them without tokenising anything large."""
    text = max(read_texts(stdlib_files(want_held_out=True)[:8]), key=len)
    assert len(text) > 40_000
    document = Document("file:///big.py", text, 0, "python")
    line = len(text.split("\n")) // 2
    sources = DraftSources(defer_cold_parts=True)
    request = resolve_request(document, types.Position(line=line, character=0), UTF16, Settings(max_new_tokens=4, cold_prompt_ms=0))  # the whole prompt each time
    above_key = SourceKey(document.uri, "above")
    sources.document_closed(engine, document.uri)
    first = complete(as_backend(engine), request, sources=sources)
    assert above_key not in engine.sources and not sources.encoder(engine).holds(above_key)
    sources.warm_up(engine)
    assert sources.encoder(engine).holds(above_key)
    second = complete(as_backend(engine), request, sources=sources)
    above = engine.sources.tokens(above_key)
    assert above == engine.tokenizer.encode(text[: len(text) - len(text.split("\n", line)[-1])][: -len(
        second.prompt.prefix)], add_special_tokens=False)
    assert first.prompt.prefix == second.prompt.prefix
    sources.document_closed(engine, document.uri)
    assert above_key not in engine.sources


def test_without_deferring_a_large_part_is_a_draft_source_at_once(engine):
    """The command line has no "after the answer": its parts are tokenised during the request."""
    text = max(read_texts(stdlib_files(want_held_out=True)[:8]), key=len)
    document = Document("file:///big-cli.py", text, 0, "python")
    request = resolve_request(document, types.Position(line=len(text.split("\n")) // 2, character=0), UTF16,
                              Settings(max_new_tokens=4))
    sources = DraftSources()
    complete(as_backend(engine), request, sources=sources)
    assert SourceKey(document.uri, "above") in engine.sources and SourceKey(document.uri, "below") in engine.sources
    sources.document_closed(engine, document.uri)


def test_the_engine_refuses_work_from_a_thread_that_does_not_own_it(engine):
    """Only the model thread may change the engine's sources and caches (the server's did_close once
    did it from the event loop while a generation ran)."""
    import threading

    errors = []
    thread = threading.Thread(target=lambda: errors.append(_raises(lambda: engine.forget_source(SourceKey("x")))))
    thread.start()
    thread.join()
    assert errors == ["RuntimeError"]
    engine.forget_source(SourceKey("x"))  # the owner may


def _raises(fn) -> str | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the type is the result
        return type(exc).__name__
    return None


def test_while_typing_a_line_an_answer_by_its_time_is_a_prefix_of_the_whole_answer(engine):
    """``completion.answerByMs``: an automatic request for the rest of a line past its time answers as it stands,
    a prefix of what the whole generation writes; a requested completion and a new line's are never cut."""
    text = "def scale(values, factor):\n    result = [v * factor for v in values]\n    return resu\n"
    document = Document("file:///partial.py", text, 1, "python")
    position = types.Position(line=2, character=15)  # inside "resu": the rest of a line
    settings = Settings(answer_by_ms=1, max_new_tokens=24, time_budget_ms=0)

    def answer(automatic: bool, at: types.Position = position, doc: Document = document):
        engine.reset_caches()
        request = resolve_request(doc, at, UTF16, settings, automatic=automatic)
        return complete(as_backend(engine), request, sources=DraftSources())

    whole, partial = answer(automatic=False), answer(automatic=True)
    assert whole.generation.finish_reason != "partial" and len(whole.generation.text.strip()) > 4
    assert partial.generation.finish_reason == "partial" and partial.config.answer_by is not None
    assert whole.generation.token_ids[: len(partial.generation.token_ids)] == partial.generation.token_ids
    assert whole.generation.text.startswith(partial.generation.text)
    blank = Document("file:///partial.py", text + "\n", 1, "python")
    new_line = answer(automatic=True, at=types.Position(line=4, character=0), doc=blank)
    assert new_line.mode.multi_line and new_line.config.answer_by is None
