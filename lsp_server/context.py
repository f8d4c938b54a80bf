"""Context builder: document + cursor -> fill-in-the-middle prompt.

The prompt is PSM order with Qwen2.5-Coder's special tokens (Bavarian et al. 2022, section 3;
Qwen2.5-Coder technical report, section 3): ``<|fim_prefix|>`` prefix ``<|fim_suffix|>`` suffix
``<|fim_middle|>``; the model writes the middle. A tokenizer without these tokens gets a plain
left-to-right prompt (the prefix alone).

The prefix keeps its last ``prefix_tokens`` tokens and the suffix its first ``suffix_tokens``,
each cut at a line boundary when one falls inside the kept part. The model always sees ``\\n`` line
breaks (shared case L3); the caller converts the answer back to the document's own line ending.
"""

from __future__ import annotations

from dataclasses import dataclass

from pygls.workspace.position_codec import PositionCodec
from lsprotocol import types

from lsp_server.documents import Document
from lsp_server.positions import line_ending, to_model_text

FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
_MAX_CHARS_PER_TOKEN = 8  # pre-trim before tokenising; a longer token only means fewer tokens kept


@dataclass(frozen=True)
class ContextBudget:
    """Token budgets of the prompt's parts."""

    prefix_tokens: int = 1024
    suffix_tokens: int = 256

    def __post_init__(self) -> None:
        if self.prefix_tokens < 1 or self.suffix_tokens < 0:
            raise ValueError("prefix_tokens must be >= 1 and suffix_tokens >= 0")


@dataclass(frozen=True)
class CompletionContext:
    """A prompt for one completion request and what post-processing needs to know."""

    prompt_ids: list[int]
    prefix: str  # model text (\n line breaks) before the cursor, as kept in the prompt
    suffix: str  # model text after the cursor, as kept in the prompt
    cursor_offset: int  # code points into the document text
    line_suffix: str  # text right of the cursor on its line
    eol: str  # the document's line ending
    single_line: bool  # code right of the cursor: complete the line only
    fim: bool  # whether the prompt is fill-in-the-middle
    truncated: bool  # the budget left part of the document out of the prompt


def _keep_tail(tokenizer, text: str, budget: int) -> tuple[str, list[int]]:
    """The end of ``text`` within ``budget`` tokens, starting at a line start when possible."""
    limit = budget * _MAX_CHARS_PER_TOKEN
    trimmed = len(text) > limit
    text = text[-limit:] if trimmed else text
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    if len(ids) <= budget and not trimmed:
        return text, ids
    cut = offsets[len(ids) - budget][0] if len(ids) > budget else 0
    newline = text.find("\n", max(cut - 1, 0))
    if newline != -1 and newline + 1 < len(text):
        cut = newline + 1
    kept = text[cut:]
    return kept, tokenizer.encode(kept, add_special_tokens=False)


def _keep_head(tokenizer, text: str, budget: int) -> tuple[str, list[int]]:
    """The start of ``text`` within ``budget`` tokens, ending at a line end when possible."""
    if budget == 0:
        return "", []
    text = text[: budget * _MAX_CHARS_PER_TOKEN]
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    if len(ids) <= budget:
        return text, ids
    cut = offsets[budget - 1][1]
    newline = text.rfind("\n", 0, cut)
    if newline > 0:
        cut = newline + 1
    kept = text[:cut]
    return kept, tokenizer.encode(kept, add_special_tokens=False)


def build_context(
    document: Document, position: types.Position, codec: PositionCodec, tokenizer, budget: ContextBudget
) -> CompletionContext:
    """The FIM prompt for a cursor position.

    Args:
        position: LSP position in the codec's units.
        tokenizer: a transformers tokenizer (fast, for offsets).
    Raises:
        lsp_server.positions.PositionError: the position is not in the document.
    """
    lines = document.lines
    offset = lines.offset_at(position, codec)
    line_end = lines.offset_at(types.Position(line=position.line, character=2**31 - 1), codec)
    line_suffix = document.text[offset:line_end]
    full_prefix, full_suffix = to_model_text(document.text[:offset]), to_model_text(document.text[offset:])
    prefix, prefix_ids = _keep_tail(tokenizer, full_prefix, budget.prefix_tokens)
    special = tokenizer.get_added_vocab()  # FIM markers are added tokens (a small dict, unlike get_vocab)
    fim = all(t in special for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    if fim:
        suffix, suffix_ids = _keep_head(tokenizer, full_suffix, budget.suffix_tokens)
        prompt_ids = [special[FIM_PREFIX], *prefix_ids, special[FIM_SUFFIX], *suffix_ids, special[FIM_MIDDLE]]
    else:
        suffix, prompt_ids = "", prefix_ids or [tokenizer.eos_token_id or 0]
    return CompletionContext(
        prompt_ids=prompt_ids,
        prefix=prefix,
        suffix=suffix,
        cursor_offset=offset,
        line_suffix=line_suffix,
        eol=line_ending(document.text),
        single_line=bool(line_suffix.strip()),
        fim=fim,
        truncated=len(prefix) < len(full_prefix) or len(suffix) < len(full_suffix),
    )
