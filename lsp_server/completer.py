"""One completion: document + cursor -> prompt -> speculative generation -> text to insert.

Shared by the LSP features and ``speclsp complete``. It runs on the model worker thread, on a request
resolved once by the caller (:mod:`lsp_server.request`).

Special tokens never reach the text (they end generation, and a model spelling one out byte by
byte is cut there too, docs/cases.md L8). :mod:`lsp_server.completion_mode` decides single- or multi-line
before generation and :mod:`lsp_server.postprocess` trims the result after it (block ends, the suffix never repeated, syntax);
line breaks are written in the document's own line ending (docs/cases.md L3).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from decoding.engine import Engine
from decoding.generate import FinishReason, Generation
from lsp_server.completion_mode import Mode, decide_mode
from lsp_server.documents import Document
from lsp_server.draft_sources import DraftSources
from lsp_server.positions import to_document_text
from lsp_server.postprocess import TrimContext, trim
from lsp_server.prompt import Prompt, build_prompt
from lsp_server.related_files import context_documents, label, related_files
from lsp_server.repo_index import RepoIndex
from lsp_server.request import CompletionRequest


@dataclass
class Completion:
    """The answer for one request."""

    insert_text: str  # ready to insert at the cursor, in the document's line ending
    prompt: Prompt
    generation: Generation
    mode: Mode
    ms: dict[str, float] = field(default_factory=dict)  # prompt, engine (the whole generate call), postprocess


def postprocess(text: str, prompt: Prompt, mode: Mode, language_id: str,
                finish_reason: FinishReason = FinishReason.STOP) -> str:
    """Model text -> insert text in the document's line ending (see :func:`lsp_server.postprocess.trim`)."""
    trimmed = trim(text, TrimContext(prompt.prefix, prompt.suffix, language_id, mode, finish_reason))
    return to_document_text(trimmed, prompt.eol)


def complete(
    engine: Engine,
    request: CompletionRequest,
    other_documents: list[Document] = (),
    repo: RepoIndex | None = None,
    sources: DraftSources | None = None,
    seed: int | None = None,
) -> Completion:
    """Complete at the request's cursor: prompt, mode, draft sources, generation, trimming.

    Args:
        other_documents: other open buffers, most recently touched first; their text feeds the n-gram
            drafter, and the recent ones are candidates for prompt snippets. Secret-looking ones are
            left out here (:func:`lsp_server.related_files.context_documents`).
        repo: the repository index: files similar to the cursor's surroundings become draft sources
            and (for models that know the repository format) prompt snippets.
        sources: the draft sources and prompt tokens kept between requests; ``None``: a fresh one.
        seed: random source for sampling (``None``: nondeterministic).
    The generation stops at its next verify round once ``request.cancelled`` is set.
    """
    t0 = time.perf_counter()
    settings, document = request.settings, request.document
    sources = sources if sources is not None else DraftSources()
    other_documents = context_documents(other_documents)  # the one gate: secrets are never context
    capabilities = engine.target.capabilities
    snippet_chars = 4 * settings.extra_tokens if capabilities.repo_prompt else 0
    related, snippets = related_files(document, request.offset, other_documents, repo, snippet_chars)
    repo_names = (repo.repo_name() if repo is not None else "workspace", label(repo, document.uri))
    prompt = build_prompt(request, engine.tokenizer, snippets, repo_names, sources.encoder(engine), capabilities)
    mode = decide_mode(prompt.prefix, prompt.line_suffix, document.language_id)
    sources.sync(engine, request, prompt, other_documents, related)
    t1 = time.perf_counter()
    generation = engine.generate(prompt.prompt_ids, settings.generation_config(mode.multi_line, engine, seed),
                                 settings.drafter, should_stop=request.cancelled.is_set, cache_key=document.uri)
    t2 = time.perf_counter()
    insert_text = postprocess(generation.text, prompt, mode, document.language_id, generation.finish_reason)
    ms = {"context": 1000 * (t1 - t0), "engine": 1000 * (t2 - t1), "postprocess": 1000 * (time.perf_counter() - t2)}
    return Completion(insert_text, prompt, generation, mode, ms)
