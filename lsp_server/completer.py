"""One completion: document + cursor -> prompt -> speculative generation -> text to insert.

Shared by the LSP features and ``speclsp complete``. It runs on the model worker thread.

Post-processing here is the minimum every answer needs: special tokens never reach the text (they
end generation, and a model spelling one out byte by byte is cut there too, shared case L8); with
code right of the cursor only the current line is completed; trailing whitespace is dropped; line
breaks are written in the document's own line ending (case L3).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

from decoding.engine import Engine
from decoding.generate import Generation, GenerationConfig
from decoding.sampling import SamplingParams
from lsp_server.context import CompletionContext, ContextBudget, build_context
from lsp_server.documents import Document
from lsp_server.positions import to_document_text, to_model_text
from lsp_server.settings import Settings

MAX_SOURCE_CHARS = 400_000  # other buffers larger than this are not used as n-gram sources


@dataclass
class Completion:
    """The answer for one cursor position."""

    insert_text: str  # ready to insert at the cursor, in the document's line ending
    context: CompletionContext
    generation: Generation
    ms: dict[str, float] = field(default_factory=dict)  # context and postprocess stages


def generation_config(settings: Settings, context: CompletionContext, engine: Engine, seed: int | None) -> GenerationConfig:
    special = tuple(t for t in engine.tokenizer.all_special_tokens if t)
    return GenerationConfig(
        max_new_tokens=settings.max_new_tokens,
        sampling=SamplingParams(settings.temperature, settings.top_k, settings.top_p),
        stop_strings=special + (("\n",) if context.single_line else ()),
        stop_token_ids=engine.completion_stop_ids,
        max_draft_tokens=settings.max_draft_tokens,
        seed=seed,
    )


def postprocess(text: str, context: CompletionContext) -> str:
    """Model text -> insert text (see module docstring)."""
    if context.single_line:
        text = text.split("\n", 1)[0]
    return to_document_text(text.rstrip(), context.eol)


def complete(
    engine: Engine,
    document: Document,
    position: types.Position,
    codec: PositionCodec,
    settings: Settings,
    other_documents: list[Document] = (),
    should_stop: Callable[[], bool] | None = None,
    seed: int | None = None,
) -> Completion:
    """Complete ``document`` at ``position``.

    Args:
        position: LSP position in ``codec``'s units.
        other_documents: other open buffers; their text feeds the n-gram drafter.
        should_stop: polled between verify rounds (cancellation).
    Raises:
        lsp_server.positions.PositionError: the position is not in the document.
    """
    t0 = time.perf_counter()
    budget = ContextBudget(settings.prefix_tokens, settings.suffix_tokens)
    context = build_context(document, position, codec, engine.tokenizer, budget)
    sources = {}
    for other in other_documents:
        if other.uri != document.uri and len(other.text) <= MAX_SOURCE_CHARS:
            sources[other.uri] = engine.source_index(other.uri, other.version, to_model_text(other.text))
    if context.truncated and len(document.text) <= MAX_SOURCE_CHARS:
        # The prompt holds only part of this document: its whole text is a draft source too.
        sources[document.uri] = engine.source_index(document.uri, document.version, to_model_text(document.text))
    t1 = time.perf_counter()
    generation = engine.generate(context.prompt_ids, generation_config(settings, context, engine, seed),
                                 settings.drafter, sources, should_stop)
    t2 = time.perf_counter()
    insert_text = postprocess(generation.text, context)
    ms = {"context": 1000 * (t1 - t0), "postprocess": 1000 * (time.perf_counter() - t2)}
    return Completion(insert_text, context, generation, ms)
