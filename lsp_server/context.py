"""Context builder: document + cursor -> fill-in-the-middle prompt.

The prompt is PSM order with Qwen2.5-Coder's special tokens (Bavarian et al. 2022, section 3;
Qwen2.5-Coder technical report, section 3): ``<|fim_prefix|>`` prefix ``<|fim_suffix|>`` suffix
``<|fim_middle|>``; the model writes the middle. A tokenizer without these tokens gets a plain
left-to-right prompt (the prefix alone).

With snippets of other files and a tokenizer that has ``<|repo_name|>`` and ``<|file_sep|>``, the
prompt is Qwen2.5-Coder's repository-level format: ``<|repo_name|>`` name, then per file
``<|file_sep|>`` path, newline, text; then ``<|file_sep|>`` and the current file's path before the
FIM part. Snippets fill at most ``extra_tokens`` tokens, best first.

The prefix keeps its last ``prefix_tokens`` tokens and the suffix its first ``suffix_tokens``,
each cut at a line boundary when one falls inside the kept part. The model always sees ``\\n`` line
breaks (shared case L3); the caller converts the answer back to the document's own line ending.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pygls.workspace.position_codec import PositionCodec
from lsprotocol import types

from decoding.capabilities import FILE_SEP, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, REPO_NAME
from lsp_server.documents import Document
from lsp_server.positions import line_ending
from lsp_server.prompt_tokens import PromptEncoder, document_key

# (text, where it starts in the string it was cut from) -> (ids, character offsets)
Encode = Callable[[str, int], tuple[list[int], list[tuple[int, int]]]]

_MAX_CHARS_PER_TOKEN = 8  # pre-trim before tokenising; a longer token only means fewer tokens kept
_ANCHOR_CHARS = 4096  # the pre-trim's start moves in steps of this many characters
_ANCHOR_TOKENS = 128  # the prefix's first token moves in steps of this many tokens
_LINE_SEARCH_TOKENS = 64  # how far the cut looks for a token that starts exactly at a line start


@dataclass(frozen=True)
class ContextBudget:
    """Token budgets of the prompt's parts."""

    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    extra_tokens: int = 512  # snippets of other files

    def __post_init__(self) -> None:
        if self.prefix_tokens < 1 or self.suffix_tokens < 0 or self.extra_tokens < 0:
            raise ValueError("prefix_tokens must be >= 1, suffix_tokens and extra_tokens >= 0")


@dataclass(frozen=True)
class CompletionContext:
    """A prompt for one completion request and what post-processing needs to know."""

    prompt_ids: list[int]
    prefix: str  # model text (\n line breaks) before the cursor, as kept in the prompt
    suffix: str  # model text after the cursor, as kept in the prompt
    cursor_offset: int  # code points into the document text
    line_suffix: str  # text right of the cursor on its line
    eol: str  # the document's line ending
    fim: bool  # whether the prompt is fill-in-the-middle
    truncated: bool  # the budget left part of the document out of the prompt
    snippets: tuple[str, ...] = ()  # labels of the other files' snippets in the prompt


def _keep_tail(encode: Encode, text: str, budget: int) -> tuple[str, list[int]]:
    """The end of ``text`` within ``budget`` tokens, starting at a line start when possible.

    The start moves in steps (at most ``_ANCHOR_CHARS`` characters for the pre-trim, ``_ANCHOR_TOKENS``
    tokens for the cut), not with every keystroke: while the user types, consecutive prompts share
    their beginning, so the KV cache of the previous prompt is reused and only the new tail is
    prefilled. The kept part is between ``budget - _ANCHOR_TOKENS`` and ``budget`` tokens long.
    """
    limit = budget * _MAX_CHARS_PER_TOKEN
    start = 0
    if len(text) > limit:
        step = min(_ANCHOR_CHARS, limit // 2)  # the window keeps at least limit / 2 characters
        start = ((len(text) - limit) // step + 1) * step  # rounded up: stays put while typing
    trimmed = start > 0
    text = text[start:]
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


def knows_repo_format(tokenizer) -> bool:
    """Whether the tokenizer has the repository-level tokens (``<|repo_name|>``, ``<|file_sep|>``)."""
    special = tokenizer.get_added_vocab()
    return REPO_NAME in special and FILE_SEP in special


def _repo_header(tokenizer, repo: tuple[str, str], snippets, budget: int) -> tuple[list[int], tuple[str, ...]]:
    special = tokenizer.get_added_vocab()
    repo_name, current_label = repo
    ids = [special[REPO_NAME], *tokenizer.encode(repo_name + "\n", add_special_tokens=False)]
    used, labels = 0, []
    for snippet in snippets:
        encoded = tokenizer.encode(f"{snippet.label}\n{snippet.text}\n", add_special_tokens=False)
        if used + len(encoded) + 1 > budget:
            continue
        ids += [special[FILE_SEP], *encoded]
        used += len(encoded) + 1
        labels.append(snippet.label)
    ids += [special[FILE_SEP], *tokenizer.encode(current_label + "\n", add_special_tokens=False)]
    return ids, tuple(labels)


def build_context(
    document: Document, position: types.Position, codec: PositionCodec, tokenizer, budget: ContextBudget,
    snippets=(), repo: tuple[str, str] | None = None, encoder: PromptEncoder | None = None,
) -> CompletionContext:
    """The FIM prompt for a cursor position.

    Args:
        position: LSP position in the codec's units.
        tokenizer: a transformers tokenizer (fast, for offsets).
        snippets: :class:`lsp_server.repo_context.Snippet` objects, best first; used with ``repo``.
        repo: (repository name, current file's path label) to use the repository-level format; ``None``
            (or a tokenizer without its tokens) gives the plain FIM prompt.
        encoder: keeps the previous request's tokens of this document's prefix and suffix, so only
            the changed part is tokenised again (see :mod:`lsp_server.prompt_tokens`); ``None``
            tokenises everything.
    Raises:
        lsp_server.positions.PositionError: the position is not in the document.
    """
    lines = document.lines
    offset = lines.offset_at(position, codec)
    line_end = lines.offset_at(types.Position(line=position.line, character=2**31 - 1), codec)
    line_suffix = document.text[offset:line_end]
    full_prefix, full_suffix = document.model_split(offset)
    encoder = encoder if encoder is not None and encoder.tokenizer is tokenizer else PromptEncoder(tokenizer)
    # The document's own tokens, when the encoder was given them at its opening: the prefix is found
    # from the document's start, the suffix from its end (the user has typed since, at the cursor).
    whole = document_key(document.uri)
    prefix, prefix_ids = _keep_tail(lambda text, at: encoder.encode((document.uri, "prefix"), text, (whole, at)),
                                    full_prefix, budget.prefix_tokens)
    special = tokenizer.get_added_vocab()  # FIM markers are added tokens (a small dict, unlike get_vocab)
    fim = all(t in special for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    labels: tuple[str, ...] = ()
    if fim:
        suffix, suffix_ids = _keep_head(
            lambda text, at: encoder.encode((document.uri, "suffix"), text, (whole, at - len(full_suffix))),
            full_suffix, budget.suffix_tokens)
        prompt_ids = [special[FIM_PREFIX], *prefix_ids, special[FIM_SUFFIX], *suffix_ids, special[FIM_MIDDLE]]
        if repo is not None and knows_repo_format(tokenizer):
            header, labels = _repo_header(tokenizer, repo, snippets, budget.extra_tokens)
            prompt_ids = header + prompt_ids
    else:
        suffix, prompt_ids = "", prefix_ids or [tokenizer.eos_token_id or 0]
    return CompletionContext(
        prompt_ids=prompt_ids,
        prefix=prefix,
        suffix=suffix,
        cursor_offset=offset,
        line_suffix=line_suffix,
        eol=line_ending(document.text),
        fim=fim,
        truncated=len(prefix) < len(full_prefix) or len(suffix) < len(full_suffix),
        snippets=labels,
    )
