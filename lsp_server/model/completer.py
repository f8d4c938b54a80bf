"""One completion: document + cursor -> prompt -> speculative generation -> text to insert.

Shared by the LSP features and ``speclsp complete``. It runs on the model worker thread, on a request
resolved once by the caller (:mod:`lsp_server.request`).

Special tokens never reach the text (they end generation, and a model spelling one out byte by
byte is cut there too, docs/cases.md L8). :mod:`lsp_server.completion.mode` decides single- or multi-line
before generation and :mod:`lsp_server.completion.postprocess` trims the result after it (block ends, the suffix never repeated, syntax);
line breaks are written in the document's own line ending (docs/cases.md L3).

:func:`rewrite` is the next-edit counterpart: the region around the cursor rewritten with the recent
edits carried through (:mod:`lsp_server.next_edit.prompt`), drafted from the region itself, and the
minimal edits from the old region to the new (:mod:`lsp_server.next_edit.text_edits`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from decoding.types import FinishReason, Generation, GenerationConfig
from lsp_server.backends.base import GenerationBackend, Prompt, RewritePrompt
from lsp_server.completion.mode import Mode, decide_mode
from lsp_server.workspace.documents import Document
from lsp_server.model.cold_prompt import shorter_settings
from lsp_server.model.draft_sources import DraftSources
from lsp_server.workspace.positions import line_ending, to_document_text
from lsp_server.completion.postprocess import TrimContext, trim
from lsp_server.completion.prompt import build_prompt
from lsp_server.completion.anchor import KeptTail
from lsp_server.workspace.syntax import syntax_window
from lsp_server.completion.related_files import context_documents, label, related_files
from lsp_server.workspace.repo_index import RepoIndex
from lsp_server.request import CompletionRequest
from lsp_server.next_edit.guard import withholds
from lsp_server.next_edit.prompt import build_rewrite_prompt
from lsp_server.next_edit.span import covered_span
from lsp_server.next_edit.text_edits import Replacement, minimal_edits


@dataclass
class Completion:
    """The answer for one request."""

    insert_text: str  # ready to insert at the cursor, in the document's line ending
    prompt: Prompt
    generation: Generation
    mode: Mode
    ms: dict[str, float] = field(default_factory=dict)  # prompt, engine (the whole generate call), postprocess
    config: GenerationConfig | None = None  # what the generation was asked for (its plain replay, bench/replay.py)
    model: str = ""  # the target that wrote it
    cut_from: int = 0  # tokens of the whole prompt this one was cut from for time (lsp_server.model.cold_prompt); 0: none

    def trace_fields(self) -> dict:
        """What the tracer records of this answer besides the generation's figures."""
        cut = {"prompt_cut_from": self.cut_from} if self.cut_from else {}
        return {"multi_line": self.mode.multi_line, "mode_reason": self.mode.reason, **cut}


def postprocess(text: str, prompt: Prompt, mode: Mode, language_id: str,
                finish_reason: FinishReason = FinishReason.STOP, window: tuple[str, str] | None = None) -> str:
    """Model text -> insert text in the document's line ending (see :func:`lsp_server.completion.postprocess.trim`);
    ``window``: the cursor's syntax window when the caller computed it."""
    trimmed = trim(text, TrimContext(prompt.prefix, prompt.suffix, language_id, mode, finish_reason, window))
    return to_document_text(trimmed, prompt.eol)


#: Model families the typed-tail prompt passed the quality gate on (docs/performance.md#the-typed-tail-prompt);
#: ``completion.promptLayout: auto`` gives them ``tail`` and any other model (e.g. the starter pair, trained on PSM) ``psm``.
TAIL_FAMILIES = ("qwen2.5-coder",)


def prompt_layout(settings, backend: GenerationBackend) -> str:
    """The completion prompt layout for ``backend``'s target: ``tail`` or ``psm`` (``auto`` resolved)."""
    if settings.prompt_layout != "auto":
        return settings.prompt_layout
    target = backend.describe().target.lower()
    return "tail" if any(family in target for family in TAIL_FAMILIES) else "psm"


def prepare_prompt(backend: GenerationBackend, request: CompletionRequest, other_documents: list[Document],
                   repo: RepoIndex | None, sources: DraftSources, spare: bool = False):
    """The request's prompt as :func:`complete` builds it: (prompt, the related files chosen for the cursor,
    the typed-tail anchor or ``None``). ``other_documents`` must have passed
    :func:`lsp_server.completion.related_files.context_documents`. ``spare``: for a cursor expected next (its anchor is
    set as the spare, :meth:`lsp_server.completion.anchor.AnchorBook.anchor_for`)."""
    settings, document = request.settings, request.document
    capabilities = backend.capabilities
    snippet_chars = 4 * settings.extra_tokens if capabilities.repo_prompt else 0
    related, snippets = related_files(document, request.offset, other_documents, repo, snippet_chars)
    repo_names = (repo.repo_name() if repo is not None else "workspace", label(repo, document.uri, document.language_id))
    constrained = backend.constrains_output
    # The typed tail needs healing (its last token is usually part of a word): local engines only.
    tail = settings.token_healing and constrained and capabilities.fim is not None and \
        prompt_layout(settings, backend) == "tail"
    anchor = sources.anchors.anchor_for(request, spare, settings.prompt_tail_lines) if tail else None
    kept = sources.anchors.kept_tail(document.uri) if tail and not spare else None
    prompt = build_prompt(request, backend.tokenizer, snippets, repo_names, sources.encoder(backend), capabilities,
                          heal=settings.token_healing and constrained, anchor=anchor, kept_tail=kept)
    return prompt, related, anchor


def complete(
    backend: GenerationBackend,
    request: CompletionRequest,
    other_documents: list[Document] = (),
    repo: RepoIndex | None = None,
    sources: DraftSources | None = None,
    seed: int | None = None,
) -> Completion:
    """Complete at the request's cursor: prompt, mode, draft sources, generation, trimming.

    Args:
        backend: what generates (:mod:`lsp_server.backends`; an engine is wrapped by the caller,
            :func:`lsp_server.backends.local.as_backend`).
        other_documents: other open buffers, most recently touched first; their text feeds the n-gram
            drafter, and the recent ones are candidates for prompt snippets. Secret-looking ones are
            left out here (:func:`lsp_server.completion.related_files.context_documents`).
        repo: the repository index: files similar to the cursor's surroundings become draft sources
            and (for models that know the repository format) prompt snippets.
        sources: the draft sources and prompt tokens kept between requests; ``None``: a fresh one.
        seed: random source for sampling (``None``: nondeterministic).
    The generation stops at its next verify round once ``request.cancelled`` is set.

    Raises:
        lsp_server.backends.base.BackendError: a remote engine failed.
    """
    t0 = time.perf_counter()
    settings, document = request.settings, request.document
    sources = sources if sources is not None else DraftSources()
    other_documents = context_documents(other_documents)  # the one gate: secrets are never context
    prompt, related, anchor = prepare_prompt(backend, request, other_documents, repo, sources)
    cut_from = 0
    short = None if request.uri in sources.answered_cut else shorter_settings(backend, request, prompt)
    if short is not None:  # the whole prompt would take too long: the lines around the cursor that fit
        cut_from = len(prompt.prompt_ids)
        prompt, related, anchor = prepare_prompt(backend, replace(request, settings=short), other_documents, repo,
                                                 sources)
    window = syntax_window(prompt.prefix, prompt.suffix)  # once: for the mode and for trimming
    mode = decide_mode(prompt.prefix, prompt.line_suffix, document.language_id, head=window[0])
    sources.sync(backend, request, prompt, other_documents, related)
    t1 = time.perf_counter()
    config = _generation_config(backend, request, prompt, mode, seed)
    generation = backend.generate(prompt, config, settings.drafter, request.cancelled.is_set, cache_key=document.uri)
    if backend.keeps_sources:
        sources.remember_output(document.uri, prompt.prompt_ids, generation.token_ids)
    if anchor is not None and generation.token_ids:
        written = backend.tokenizer.decode(generation.token_ids, skip_special_tokens=True)
        sources.anchors.keep(document.uri, KeptTail(prompt.tail_ids, prompt.tail_text, written))
    t2 = time.perf_counter()
    insert_text = postprocess(generation.text, prompt, mode, document.language_id, generation.finish_reason, window)
    if not cut_from:
        sources.answered_cut.discard(document.uri)
    elif generation.finish_reason != FinishReason.CANCELLED and insert_text.strip():
        # One quick answer shown; the next requests compute the whole prompt. An empty one shows nothing, so
        # the next key's request is cut again rather than wait for the whole prompt.
        sources.answered_cut.add(document.uri)
    ms = {"context": 1000 * (t1 - t0), "engine": 1000 * (t2 - t1), "postprocess": 1000 * (time.perf_counter() - t2)}
    return Completion(insert_text, prompt, generation, mode, ms, config, backend.describe().target, cut_from)


@dataclass
class Rewrite:
    """A next-edit suggestion: the region rewritten, and the edits that turn the old region into it."""

    prompt: RewritePrompt
    generation: Generation
    text: str  # the new text of [start, end), in the document's line ending ("" when unfinished)
    edits: list[Replacement]  # code points into the request's document text; [] when nothing changes
    ms: dict[str, float] = field(default_factory=dict)  # context, engine, postprocess
    start: int | None = None  # the span ``text`` replaces, code points into the request's document text: the
    end: int | None = None  # region (None), widened to the lines around it the answer wrote again (rewrite_span)
    withheld: bool = False  # not shown (rewrite_guard: it undid the latest edit or dropped most of the region)

    def __post_init__(self):
        self.start = self.prompt.region_start if self.start is None else self.start
        self.end = self.prompt.region_end if self.end is None else self.end

    @property
    def finished(self) -> bool:
        """The model wrote the whole region (its end marker or the end of its turn)."""
        return self.generation.finish_reason == FinishReason.STOP

    @property
    def insert_text(self) -> str:
        """The new region (what the tracer shows at verbose level)."""
        return self.text

    def trace_fields(self) -> dict:
        """What the tracer records of this answer besides the generation's figures (a rewrite has no mode)."""
        return {}


def _rewrite_prompt(backend: GenerationBackend, request: CompletionRequest, history) -> RewritePrompt | None:
    """The request's rewrite prompt in the format its settings and the backend's model choose."""
    settings = request.settings
    return build_rewrite_prompt(request.document, request.offset, history, backend.tokenizer, backend.capabilities,
                                settings.next_edit_region_lines, settings.next_edit_prompt_format)


def rewrite(backend: GenerationBackend, request: CompletionRequest, history=(), seed: int | None = None) -> Rewrite | None:
    """Rewrite the region around the request's cursor with the recent edits carried through it.

    Args:
        history: the document's recent edits (see :func:`lsp_server.next_edit.prompt.build_rewrite_prompt`).
        seed: random source for sampling (``None``: nondeterministic).
    Returns:
        ``None`` when the region is blank. An unfinished rewrite (``max_new_tokens`` reached, or
        cancelled) has no text and no edits.
    Raises:
        lsp_server.next_edit.prompt.NextEditUnsupported: the model cannot write rewrites.
        lsp_server.backends.base.BackendError: a remote engine failed.
    The generation stops at its next verify round once ``request.cancelled`` is set.
    """
    t0 = time.perf_counter()
    settings, document = request.settings, request.document
    prompt = _rewrite_prompt(backend, request, history)
    if prompt is None:
        return None
    config = settings.rewrite_config(prompt.end_marker, backend, seed)
    cache_key = rewrite_cache_key(document.uri)
    t1 = time.perf_counter()
    generation = backend.rewrite(prompt, config, settings.drafter, request.cancelled.is_set, cache_key=cache_key)
    t2 = time.perf_counter()
    text, edits, start, end, withheld = "", [], prompt.region_start, prompt.region_end, False
    if generation.finish_reason == FinishReason.STOP:
        answer = generation.text
        if prompt.trailing_break and answer.endswith("\n"):
            answer = answer[:-1]
        text = to_document_text(answer, line_ending(document.text))
        start, end, text = covered_span(document, start, end, text)
        withheld = withholds(document.text[start:end], text, prompt.latest_diff)
        if withheld:  # not shown: see lsp_server.next_edit.guard
            start, end, text = prompt.region_start, prompt.region_end, prompt.region_text
        edits = minimal_edits(document.text[start:end], text, start)
    ms = {"context": 1000 * (t1 - t0), "engine": 1000 * (t2 - t1), "postprocess": 1000 * (time.perf_counter() - t2)}
    return Rewrite(prompt, generation, text, edits, ms, start, end, withheld)


def _generation_config(backend: GenerationBackend, request: CompletionRequest, prompt, mode, seed) -> GenerationConfig:
    """The settings' generation config for ``request``: its healing constraint, the time budget's deadline, and
    (typing the rest of a line) the time it answers by as it stands (``completion.answerByMs``)."""
    settings, constrained = request.settings, backend.constrains_output
    typing_a_line = request.automatic and not mode.multi_line
    return replace(settings.generation_config(mode.multi_line, backend, seed), required_prefix=prompt.healed,
                   deadline=request.received + settings.time_budget_ms / 1000
                   if settings.time_budget_ms and constrained else None,
                   answer_by=request.received + settings.answer_by_ms / 1000
                   if settings.answer_by_ms and constrained and typing_a_line else None)


def prefill_rewrite(backend: GenerationBackend, request: CompletionRequest, history=(),
                    should_stop: Callable[[], bool] | None = None) -> int:
    """Compute the rewrite prompt of the request's cursor ahead of a next-edit request for it (into the
    document's next-edit cache, in a rewrite's pieces, ``should_stop`` polled between them, the request's
    cancellation also between the model's layers: a change drops the piece in flight at once): a
    :func:`rewrite` of the same document, cursor region and edits then prefills nothing but its last
    token. Returns the prompt tokens computed (0 for a blank region, a remote engine, or a stop before
    any piece).

    Raises:
        lsp_server.next_edit.prompt.NextEditUnsupported: the model cannot write rewrites.
    """
    prompt = _rewrite_prompt(backend, request, history)
    if prompt is None:
        return 0
    return backend.prefill(prompt.prompt_ids, rewrite_cache_key(request.uri), should_stop or (lambda: False),
                           preempt=request.cancelled.is_set)


def rewrite_cache_key(uri: str) -> tuple[str, str]:
    """The KV-cache key of a document's next-edit prompts (not the completion prompt's cache: the prompts
    share nothing)."""
    return ("nextEdit", uri)
