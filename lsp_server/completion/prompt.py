"""The prompt builder: a resolved request -> fill-in-the-middle prompt.

The prompt is PSM order with Qwen2.5-Coder's special tokens (Bavarian et al. 2022, section 3;
Qwen2.5-Coder technical report, section 3): ``<|fim_prefix|>`` prefix ``<|fim_suffix|>`` suffix
``<|fim_middle|>``; the model writes the middle. A model without these tokens gets a plain
left-to-right prompt (the prefix alone). The token ids and what a model knows are recorded at load
time (:mod:`decoding.weights.capabilities`, the one home of the special tokens); this module is the one home
of the prompt's format.

With snippets of other files and a model that knows ``<|repo_name|>`` and ``<|file_sep|>``, the
prompt is Qwen2.5-Coder's repository-level format: ``<|repo_name|>`` name, then per file
``<|file_sep|>`` path, newline, text; then ``<|file_sep|>`` and the current file's path before the
FIM part. Snippets fill at most ``extra_tokens`` tokens, best first.

The prefix keeps its last ``prefix_tokens`` tokens and the suffix its first ``suffix_tokens``,
each cut at a line boundary when one falls inside the kept part. The model always sees ``\\n`` line
breaks (docs/cases.md L3); the caller converts the answer back to the document's own line ending.

With an ``anchor`` (a line start at or before the cursor, :mod:`lsp_server.completion.anchor`) the layout is
the typed tail's: the prefix ends at the anchor, and the text between the anchor and the cursor follows
``<|fim_middle|>`` as the start of the middle (its last token healed), so prefix and suffix tokens stay
the same while the user types.
"""

from __future__ import annotations

from collections.abc import Callable

from decoding.weights.capabilities import ModelCapabilities, read_capabilities
from lsp_server.workspace.positions import line_ending, to_model_text
from lsp_server.completion.prompt_tokens import PromptEncoder, SourceKey
from lsp_server.backends.base import Prompt
from lsp_server.request import CompletionRequest

# (text, where it starts in the string it was cut from) -> (ids, character offsets)
Encode = Callable[[str, int], tuple[list[int], list[tuple[int, int]]]]

_MAX_CHARS_PER_TOKEN = 8  # pre-trim before tokenising; a longer token only means fewer tokens kept
_ANCHOR_CHARS = 4096  # the pre-trim's start moves in steps of this many characters
_ANCHOR_TOKENS = 128  # the prefix's first token moves in steps of this many tokens
_LINE_SEARCH_TOKENS = 64  # how far the cut looks for a token that starts exactly at a line start


def _keep_tail(encode: Encode, text: str, budget: int, skipped: int = 0) -> tuple[str, list[int]]:
    """The end of ``text`` within ``budget`` tokens, starting at a line start when possible.

    ``text`` may be the last ``budget * _MAX_CHARS_PER_TOKEN`` characters (or more) of a longer text
    that has ``skipped`` characters before it: the result is the same as for the whole text.

    The start moves in steps (at most ``_ANCHOR_CHARS`` characters for the pre-trim, ``_ANCHOR_TOKENS``
    tokens for the cut), not with every keystroke: while the user types, consecutive prompts share
    their beginning, so the KV cache of the previous prompt is reused and only the new tail is
    prefilled. The kept part is between ``budget - _ANCHOR_TOKENS`` and ``budget`` tokens long.
    """
    limit = budget * _MAX_CHARS_PER_TOKEN
    start = 0
    if skipped + len(text) > limit:
        step = min(_ANCHOR_CHARS, limit // 2)  # the window keeps at least limit / 2 characters
        start = ((skipped + len(text) - limit) // step + 1) * step  # rounded up: stays put while typing
    trimmed = start > 0
    text = text[start - skipped:]  # start > skipped when anything was skipped
    ids, offsets = encode(text, start)
    if len(ids) <= budget and not trimmed:
        return text, ids
    if not ids:
        return "", []
    over = max(0, len(ids) - budget)
    step = min(_ANCHOR_TOKENS, max(1, budget // 4))
    first = min(len(ids) - 1, -(-over // step) * step) if over else 0  # rounded up to a step
    newline = text.find("\n", max(offsets[first][0] - 1, 0))
    if newline != -1:  # move the cut to the next token that starts a line
        line_start = newline + 1
        while first < len(ids) - 1 and offsets[first][0] < line_start:
            first += 1
        for candidate in range(first, min(first + _LINE_SEARCH_TOKENS, len(ids))):
            at = offsets[candidate][0]
            if text[at - 1 : at] == "\n":  # some tokenizers glue a line break to the next indentation
                first = candidate
                break
    # The kept tokens are the ones the whole window tokenised to (BPE works within pre-tokens, so they
    # are what the model would see in the file itself); no second tokenisation of the kept text.
    return text[offsets[first][0]:], ids[first:]


def _keep_head(encode: Encode, text: str, budget: int) -> tuple[str, list[int]]:
    """The start of ``text`` within ``budget`` tokens, ending at a line end when possible."""
    if budget == 0:
        return "", []
    text = text[: budget * _MAX_CHARS_PER_TOKEN]
    ids, offsets = encode(text, 0)
    if len(ids) <= budget:
        return text, ids
    last = budget  # tokens kept: ids[:last]
    line_end = text.rfind("\n", 0, offsets[budget - 1][1])
    if line_end > 0:
        while last > 1 and offsets[last - 1][1] > line_end + 1:
            last -= 1
    return text[: offsets[last - 1][1]], ids[:last]


def _repo_header(tokenizer, repo_tokens: tuple[int, int], repo: tuple[str, str], snippets,
                 budget: int) -> tuple[list[int], tuple[tuple[str, str], ...]]:
    repo_name_id, file_sep_id = repo_tokens
    repo_name, current_label = repo
    ids = [repo_name_id, *tokenizer.encode(repo_name + "\n", add_special_tokens=False)]
    used, labels = 0, []
    for snippet in snippets:
        encoded = tokenizer.encode(f"{snippet.label}\n{snippet.text}\n", add_special_tokens=False)
        if used + len(encoded) + 1 > budget:
            continue
        ids += [file_sep_id, *encoded]
        used += len(encoded) + 1
        labels.append((snippet.label, snippet.text))
    ids += [file_sep_id, *tokenizer.encode(current_label + "\n", add_special_tokens=False)]
    return ids, tuple(labels)


def _heal(tokenizer, prefix: str, prefix_ids: list[int]) -> tuple[list[int], str]:
    """Token healing's back-off: the prefix's tokens less the last, and that token's text ("" and the
    ids unchanged when the last token is not whole text of the prefix, e.g. part of a character)."""
    if not prefix_ids:
        return prefix_ids, ""
    text = tokenizer.decode(prefix_ids[-1:], skip_special_tokens=False)
    if not text or "\ufffd" in text or not prefix.endswith(text):
        return prefix_ids, ""
    return prefix_ids[:-1], text


def _tail_ids(tokenizer, tail: str, heal: bool, kept_tail) -> tuple[list[int], str]:
    """(the typed tail's ids after ``<|fim_middle|>``, the text healed off its end): the kept tail's ids
    when the typed tail extends it (the rest of the typed text healed), else the tail tokenised, its
    last token healed with ``heal``."""
    if heal and kept_tail is not None and kept_tail.serves(tail):
        return list(kept_tail.ids), tail[len(kept_tail.text):]
    tail_ids = tokenizer.encode(tail, add_special_tokens=False)
    return _heal(tokenizer, tail, tail_ids) if heal else (tail_ids, "")


def build_prompt(
    request: CompletionRequest, tokenizer, snippets=(), repo: tuple[str, str] | None = None,
    encoder: PromptEncoder | None = None, capabilities: ModelCapabilities | None = None, heal: bool = False,
    anchor: int | None = None, kept_tail=None,
) -> Prompt:
    """The FIM prompt for a request's cursor, within the token budgets of the request's settings
    (``prefix_tokens``, ``suffix_tokens``, ``extra_tokens``).

    Args:
        tokenizer: a transformers tokenizer (fast, for offsets).
        snippets: :class:`lsp_server.completion.related_files.Snippet` objects, best first; used with ``repo``.
        repo: (repository name, current file's path label) to use the repository-level format; ``None``
            (or a model without it) gives the plain FIM prompt.
        encoder: keeps the previous request's tokens of this document's prefix and suffix, so only
            the changed part is tokenised again (see :mod:`lsp_server.completion.prompt_tokens`); ``None``
            tokenises everything.
        capabilities: the model's FIM and repository token ids (the loaded model's); ``None``: read
            from ``tokenizer``.
        heal: token healing (:mod:`decoding.healing`): the prefix's last token is left out of the prompt
            and named in ``Prompt.healed``, for the generation to start with.
        anchor: the typed-tail layout's anchor (code points into the document text, a line start at or
            before the cursor); ``None`` (or a model without FIM): PSM. With ``heal`` the tail's last token
            is healed (an empty tail heals nothing: a line start is a token boundary).
        kept_tail: the last prompt's tail at this anchor (:class:`lsp_server.completion.anchor.KeptTail`); with
            ``heal``, when the typed tail extends it along what the model wrote, its ids are kept and the
            rest of the typed text is healed.
    """
    document, offset, budget = request.document, request.offset, request.settings
    capabilities = capabilities if capabilities is not None else read_capabilities(tokenizer)
    typed_tail = anchor is not None and capabilities.fim is not None and anchor != offset
    tail = to_model_text(document.text[anchor:offset]) if typed_tail else ""
    # Only the parts within reach of the budgets, not the whole document (a copy per request).
    window = document.model_window(offset, budget.prefix_tokens * _MAX_CHARS_PER_TOKEN,
                                   budget.suffix_tokens * _MAX_CHARS_PER_TOKEN)
    before = window if not tail else document.model_window(anchor, budget.prefix_tokens * _MAX_CHARS_PER_TOKEN, 0)
    encoder = encoder if encoder is not None and encoder.tokenizer is tokenizer else PromptEncoder(tokenizer)
    # The document's own tokens, when the encoder was given them at its opening: the prefix is found
    # from the document's start, the suffix from its end (the user has typed since, at the cursor).
    whole = SourceKey(document.uri)
    prefix, prefix_ids = _keep_tail(lambda text, at: encoder.encode(SourceKey(document.uri, "prefix"), text, (whole, at)),
                                    before.prefix, budget.prefix_tokens, before.prefix_length - len(before.prefix))
    if tail:
        tail_ids, healed = _tail_ids(tokenizer, tail, heal, kept_tail)
    else:
        tail_ids, healed = [], ""
        if heal and anchor is None:
            prefix_ids, healed = _heal(tokenizer, prefix, prefix_ids)
    fim = capabilities.fim
    labels: tuple[tuple[str, str], ...] = ()
    if fim is not None:
        suffix, suffix_ids = _keep_head(
            lambda text, at: encoder.encode(SourceKey(document.uri, "suffix"), text, (whole, at - window.suffix_length)),
            window.suffix, budget.suffix_tokens)
        prompt_ids = [fim.prefix, *prefix_ids, fim.suffix, *suffix_ids, fim.middle, *tail_ids]
        if repo is not None and capabilities.repo_prompt:
            header, labels = _repo_header(tokenizer, capabilities.repo_tokens, repo, snippets, budget.extra_tokens)
            prompt_ids = header + prompt_ids
    else:
        suffix, prompt_ids = "", prefix_ids or [tokenizer.eos_token_id or 0]
    return _prompt(request, window, prompt_ids, prefix, tail, suffix, healed, tail_ids, labels, fim is not None)


def _prompt(request: CompletionRequest, window, prompt_ids: list[int], prefix: str, tail: str, suffix: str,
            healed: str, tail_ids: list[int], labels: tuple[tuple[str, str], ...], fim: bool) -> Prompt:
    """The :class:`Prompt` of :func:`build_prompt`'s parts (``window``: the document's model window)."""
    document, offset = request.document, request.offset
    return Prompt(
        prompt_ids=prompt_ids,
        prefix=prefix + tail,
        suffix=suffix,
        cursor_offset=offset,
        line_suffix=request.line_suffix,
        eol=line_ending(document.text),
        fim=fim,
        truncated=len(prefix) + len(tail) < window.prefix_length or len(suffix) < window.suffix_length,
        snippets=tuple(label for label, _ in labels),
        extra=labels,
        healed=healed,
        tail_ids=tuple(tail_ids),
        tail_text=tail[: len(tail) - len(healed)] if tail else "",
    )
