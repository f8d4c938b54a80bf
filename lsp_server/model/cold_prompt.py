"""A prompt in time: the answer after opening a file (or a jump far from the cached prompt) comes from a
shorter prompt when the whole one would take too long to compute.

A completion prompt holds up to ``prefixTokens + suffixTokens + extraTokens`` tokens (1,792 by default).
Once cached, typing adds a few tokens per key (the typed-tail layout, :mod:`lsp_server.completion.anchor`),
but the first request in a document finds nothing cached, and computing the whole prompt costs its
length times the cost of a token in a long pass: seconds on a CPU without bfloat16 for the model that
writes completions. Where that estimate (:meth:`lsp_server.backends.base.GenerationBackend.prompt_cost`)
passes ``completion.coldPromptMs`` and the caches lack most of the prompt (:data:`COLD_SHARE`), the request is answered from the same prompt with budgets that fit
that time (:func:`shorter_settings`): no snippets of other files, three quarters of the tokens before the
cursor and a quarter after. The budgets depend only on the time and the measured cost, not on the
request, so the short prompts of consecutive keys share their cache as whole ones do.

Only automatic requests (typing) are cut: a completion the user asked for is answered from the whole
prompt (a held-out function's first request, cut, wrote code that did not parse). A cut prompt whose
answer is empty shows nothing at once, and the next key's request is cut again (answering it from the
whole prompt instead makes that request wait seconds for the whole prompt, which the next key supersedes).
One shown answer per cold spell: once a request of the document was answered from a cut prompt, the
requests after it are given the whole prompt again (:class:`lsp_server.model.draft_sources.DraftSources`
``answered_cut``, cleared by an answer from a whole prompt), which they compute piece by piece (a
request superseded by a key keeps the pieces it computed) as before. Cutting every request until the
whole prompt was ready in the background cost a typist half the characters it took
(docs/bench/first-answer-amd-2026-12-07): the short prompt's answers are much worse, and on a CPU the
model thread is busy with them between keys, so the whole prompt hardly progressed. The whole prompt is
also computed in the background in the pauses, in pieces that give way to requests
(:meth:`lsp_server.model.session.ModelSession.prefill_prompt`, scheduled by
:mod:`lsp_server.requests.work_ahead`), into the document's spare cache. Every answer is the model's greedy answer to the prompt it was given (the
trace records the prompt, and ``prompt_cut_from`` the length of the whole one it was cut from).
"""

from __future__ import annotations

from dataclasses import replace

from lsp_server.backends.base import GenerationBackend, Prompt
from lsp_server.request import CompletionRequest

#: The fewest tokens a short prompt keeps, however slow the model: a few lines around the cursor.
MIN_SHORT_TOKENS = 48
#: A prompt is cut only where its caches lack more than this share of it: a cold one (a file just opened, a
#: jump far away). A mostly cached one (the anchor moved, the text after the cursor changed) is computed
#: whole: the short prompt's answers are much worse, and its few hundred tokens are soon done.
COLD_SHARE = 0.5
PREFIX_SHARE = 0.75  # of a short prompt's tokens before the cursor; the rest after it


def shorter_settings(backend: GenerationBackend, request: CompletionRequest, prompt: Prompt):
    """The request's settings with prompt budgets that fit ``completion.coldPromptMs``, where ``prompt``
    (the whole prompt of the request) would take longer to compute; ``None`` where it fits, the limit is
    off, or the backend cannot estimate (a remote engine)."""
    settings = request.settings
    if not settings.cold_prompt_ms or not request.automatic:  # a completion asked for waits for the whole prompt
        return None
    cost = backend.prompt_cost(prompt.prompt_ids, request.uri)
    if cost is None:
        return None
    missing, ms_per_token = cost
    if missing * ms_per_token <= settings.cold_prompt_ms or ms_per_token <= 0 or \
            missing <= COLD_SHARE * len(prompt.prompt_ids):
        return None
    tokens = max(MIN_SHORT_TOKENS, int(settings.cold_prompt_ms / ms_per_token))
    prefix = max(1, int(tokens * PREFIX_SHARE))
    if prefix >= settings.prefix_tokens and tokens - prefix >= settings.suffix_tokens:
        return None  # the budgets are that short already: nothing to cut but the snippets
    return replace(settings, prefix_tokens=min(prefix, settings.prefix_tokens),
                   suffix_tokens=min(tokens - prefix, settings.suffix_tokens), extra_tokens=0)
