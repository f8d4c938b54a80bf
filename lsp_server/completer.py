"""One completion: document + cursor -> prompt -> speculative generation -> text to insert.

Shared by the LSP features and ``speclsp complete``. It runs on the model worker thread.

Special tokens never reach the text (they end generation, and a model spelling one out byte by
byte is cut there too, shared case L8). :mod:`lsp_server.postprocess` decides single- or multi-line
before generation and trims the result after it (block ends, the suffix never repeated, syntax);
line breaks are written in the document's own line ending (case L3).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lsprotocol import types
from pygls import uris
from pygls.workspace.position_codec import PositionCodec

from decoding.engine import Engine
from decoding.generate import Generation, GenerationConfig
from decoding.sampling import SamplingParams
from lsp_server.context import CompletionContext, ContextBudget, build_context
from lsp_server.documents import Document
from lsp_server.positions import to_document_text
from lsp_server.postprocess import Mode, TrimContext, decide_mode, trim
from lsp_server.prompt_tokens import PromptEncoder, document_key
from lsp_server.repo_context import RECENT_BUFFERS, Candidate, candidates, select_snippets
from lsp_server.repo_index import RepoIndex, identifiers
from lsp_server.settings import Settings

MAX_SOURCE_CHARS = 400_000  # other buffers larger than this are not used as n-gram sources
COLD_PART_CHARS = 8_000  # a document part longer than this is first tokenised after the answer
QUERY_LINES = (40, 10)  # lines before and after the cursor whose identifiers find related files


def _path(uri: str) -> Path | None:
    path = uris.to_fs_path(uri) if uri.startswith("file:") else None
    return Path(path) if path else None


def _label(repo: RepoIndex | None, uri: str) -> str:
    """A file's path as shown to the model: relative to its workspace folder when indexed, else its name."""
    path = _path(uri)
    return repo.relative(path) if repo is not None and path is not None else uri.rsplit("/", 1)[-1]


def cross_file(document: Document, offset: int, other_documents: list[Document], repo: RepoIndex | None,
               with_snippets: bool, snippet_chars: int):
    """(candidate files, snippets) for a cursor: recent open buffers, then similar repository files."""
    text = document.text
    start = offset
    for _ in range(QUERY_LINES[0]):  # the last lines before the cursor, without splitting the whole file
        start = text.rfind("\n", 0, start)
        if start <= 0:
            start = 0
            break
    end = offset
    for _ in range(QUERY_LINES[1]):
        end = text.find("\n", end + 1)
        if end == -1:
            end = len(text)
            break
    before, after = [text[start:offset]], [text[offset:end]]
    query = identifiers("\n".join(before + after))

    recent = [Candidate(d.uri, _label(repo, d.uri), d.model_text, d.version)
              for d in other_documents[:RECENT_BUFFERS] if len(d.text) <= MAX_SOURCE_CHARS]
    open_paths = {p for p in (_path(d.uri) for d in [document, *other_documents]) if p is not None}
    pool = candidates(recent, repo, query, open_paths)
    snippets = select_snippets(pool, query, snippet_chars) if with_snippets else []
    return pool, snippets


@dataclass
class Completion:
    """The answer for one cursor position."""

    insert_text: str  # ready to insert at the cursor, in the document's line ending
    context: CompletionContext
    generation: Generation
    mode: Mode
    ms: dict[str, float] = field(default_factory=dict)  # context, engine (the whole generate call), postprocess
    warm_up: tuple[Callable[[], object], ...] = ()  # work for the model thread after answering (see complete)


def generation_config(settings: Settings, mode: Mode, engine: Engine, seed: int | None) -> GenerationConfig:
    special = tuple(t for t in engine.tokenizer.all_special_tokens if t)
    return GenerationConfig(
        max_new_tokens=settings.max_new_tokens,
        sampling=SamplingParams(settings.temperature, settings.top_k, settings.top_p),
        stop_strings=special + (() if mode.multi_line else ("\n",)),
        stop_token_ids=engine.completion_stop_ids,
        max_draft_tokens=settings.max_draft_tokens,
        draft_min_confidence=settings.draft_min_confidence,
        seed=seed,
    )


def postprocess(text: str, context: CompletionContext, mode: Mode, language_id: str,
                finish_reason: str = "stop") -> str:
    """Model text -> insert text in the document's line ending (see :func:`lsp_server.postprocess.trim`)."""
    trimmed = trim(text, TrimContext(context.prefix, context.suffix, language_id, mode, finish_reason))
    return to_document_text(trimmed, context.eol)


def complete(
    engine: Engine,
    document: Document,
    position: types.Position,
    codec: PositionCodec,
    settings: Settings,
    other_documents: list[Document] = (),
    should_stop: Callable[[], bool] | None = None,
    seed: int | None = None,
    repo: RepoIndex | None = None,
    encoder: PromptEncoder | None = None,
) -> Completion:
    """Complete ``document`` at ``position``.

    Args:
        position: LSP position in ``codec``'s units.
        other_documents: other open buffers, most recently touched first; their text feeds the n-gram
            drafter, and the recent ones are candidates for prompt snippets.
        repo: the repository index: files similar to the cursor's surroundings become draft sources
            and (for models that know the repository format) prompt snippets.
        should_stop: polled between verify rounds (cancellation).
        encoder: reuses the previous request's prompt tokens (see :mod:`lsp_server.prompt_tokens`).
    Returns:
        the :class:`Completion`; its ``warm_up`` functions (tokenising large parts of the document
        seen for the first time) are for the caller to run on the model thread after answering.
    Raises:
        lsp_server.positions.PositionError: the position is not in the document.
    """
    t0 = time.perf_counter()
    budget = ContextBudget(settings.prefix_tokens, settings.suffix_tokens, settings.extra_tokens)
    offset = document.lines.offset_at(position, codec)
    repo_prompt = engine.target.capabilities.repo_prompt
    pool, snippets = cross_file(document, offset, other_documents, repo, repo_prompt and budget.extra_tokens > 0,
                                4 * budget.extra_tokens)
    repo_names = (repo.repo_name() if repo is not None else "workspace", _label(repo, document.uri))
    context = build_context(document, position, codec, engine.tokenizer, budget, snippets,
                            repo_names if repo_prompt else None, encoder)
    mode = decide_mode(context.prefix, context.line_suffix, document.language_id, automatic=False)
    sources: dict[str, tuple[object, object]] = {}  # name -> (version, text or its tokens' getter)
    for other in other_documents:
        if other.uri != document.uri and len(other.text) <= MAX_SOURCE_CHARS:
            sources[other.uri] = (other.version, other.model_text)
    open_uris = {document.uri, *(d.uri for d in other_documents)}
    repo_files = set()  # kept in the store after they leave the pool: the file watcher reports their changes
    parts = set()  # parts of this document outside the prompt
    warm_up: list[Callable[[], object]] = []
    for candidate in pool:  # similar repository files
        if candidate.uri not in sources and len(candidate.text) <= MAX_SOURCE_CHARS:
            sources[candidate.uri] = (candidate.version, candidate.text)
            if candidate.uri not in open_uris:
                repo_files.add(candidate.uri)
    if context.truncated and len(document.text) <= MAX_SOURCE_CHARS:
        # The prompt holds only part of this document: the parts above and below it are draft sources
        # too. They do not change while the user types inside the window (its start moves in steps),
        # so the store keeps them from keystroke to keystroke. They are searched, not indexed
        # (indexing a large file takes hundreds of milliseconds), and
        # tokenised through the encoder: the part above grows at its end when the window moves on.
        # The first time, a large part is tokenised after the answer instead (warm_up), not on its path.
        full_prefix, full_suffix = document.model_split(offset)
        above = full_prefix[: len(full_prefix) - len(context.prefix)]
        below = full_suffix[len(context.suffix):]
        whole = document_key(document.uri)
        for part, text, at in (("above", above, 0), ("below", below, -len(below))):  # found from the ends
            if not text:
                continue
            name, key, origin = f"{document.uri}#{part}", (document.uri, part), (whole, at)
            cold = (encoder is not None and not encoder.holds(key) and not encoder.holds(whole)
                    and name not in engine.sources)
            if cold and len(text) > COLD_PART_CHARS:
                warm_up.append(lambda key=key, text=text, origin=origin: encoder.ids(key, text, origin))
                continue
            tokens = ((lambda key=key, text=text, origin=origin: encoder.ids(key, text, origin))
                      if encoder is not None else text)
            sources[name] = ((len(text), hash(text)), tokens)
            parts.add(name)
    engine.sync_sources(sources, retain=repo_files, drop=open_uris, searched=parts)
    t1 = time.perf_counter()
    generation = engine.generate(context.prompt_ids, generation_config(settings, mode, engine, seed),
                                 settings.drafter, should_stop=should_stop, cache_key=document.uri)
    t2 = time.perf_counter()
    insert_text = postprocess(generation.text, context, mode, document.language_id, generation.finish_reason)
    ms = {"context": 1000 * (t1 - t0), "engine": 1000 * (t2 - t1), "postprocess": 1000 * (time.perf_counter() - t2)}
    return Completion(insert_text, context, generation, mode, ms, tuple(warm_up))
