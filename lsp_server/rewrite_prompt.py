"""The rewrite prompt of a next-edit suggestion: recent edits + the region around the cursor -> prompt.

The region is ``region_lines`` whole lines around the cursor (a quarter of them above it), or, where
tree-sitter knows the language (:func:`lsp_server.syntax.enclosing_definitions`), the outermost
definition around the cursor that fits in ``region_lines`` lines; when none fits, the window stays
inside the innermost one. The model rewrites the region with the recent edits carried through it, and
the original region is the draft (``draft_ids``: its tokens, then the end marker's).

The format belongs to the model:

* a tokenizer with a chat template (the real Qwen2.5-Coder Instruct pair): the template, with a system
  turn (rewrite the region, carrying the edits through), a user turn (the recent edits as unified
  diffs, the file around the region, the region alone in its own code block, the instruction) and
  the assistant turn pre-filled with ``"```<language>\\n"``: the model writes the code directly and ends it with ``"\\n```"``, the end marker;
* a code model without one but with fill-in-the-middle tokens (the starter pair, base code models):
  plain text: the diffs as line comments, the file around the region with the region between
  ``region:`` / ``end of region`` comment lines (words a small model copies reliably), an instruction
  comment and the ``region:`` comment line
  again; the model writes the region and ends it with the ``end of region`` comment line (the end marker);
* any other model: :class:`NextEditUnsupported`.

Text from the document (code, diffs) is tokenised with special tokens split: a ``<|im_end|>`` written in
a file is text, not the end of a turn. The model sees ``\\n`` line breaks; offsets are code points into
the document's own text.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from decoding.capabilities import ModelCapabilities
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import to_model_text
from lsp_server.syntax import enclosing_definitions

CONTEXT_BEFORE_CHARS = 1500  # file text shown before the region, at most (model text, whole lines); its prefill
# is most of a suggestion's time on a CPU
CONTEXT_AFTER_CHARS = 500  # and after it
CHAT_END_MARKER = "\n```"
SYSTEM_PROMPT = ("You are a code editing assistant. The user has just edited a file. You rewrite one region of "
                 "the file so that the user's recent edits are carried through it, and reply with the rewritten "
                 "region only, as code.")
INSTRUCTION = ("Rewrite the region so that the recent edits are carried through it: make the same change "
               "wherever it applies (a renamed name renamed at every use, a changed signature followed at its "
               "calls, a changed pattern changed the same way). Change nothing else. Reply with the whole "
               "rewritten region in one code block.")
_HASH_COMMENT = frozenset({"python", "ruby", "shellscript", "perl", "r", "yaml", "toml", "makefile", "dockerfile",
                           "coffeescript", "elixir", "julia", "nim", "powershell"})
_DASH_COMMENT = frozenset({"lua", "sql", "haskell", "elm"})


class NextEditUnsupported(Exception):
    """The loaded model cannot write next-edit suggestions (no chat template, not a code model)."""


@dataclass(frozen=True)
class RewritePrompt:
    """A rewrite prompt and its region."""

    prompt_ids: list[int]
    draft_ids: list[int]  # the region's tokens, then the end marker's (tokenised together)
    region_start: int  # code points into the document text: the start of the region's first line
    region_end: int  # the end of its last line, before the line break
    region_text: str  # the document text of the region (its own line endings)
    end_marker: str  # what the model writes after the region; a stop string
    chat: bool  # the chat-template format (else the plain format)


def line_comment(language_id: str) -> str:
    """The line-comment lead of a language (``#``, ``--`` or ``//``)."""
    return "#" if language_id in _HASH_COMMENT else "--" if language_id in _DASH_COMMENT else "//"


def region_lines_around(document: Document, cursor_offset: int, region_lines: int) -> tuple[int, int]:
    """(first line, last line), 0-based and inclusive, of the region for a cursor (see the module docstring)."""
    lines = document.lines
    cursor_line = bisect.bisect_right(lines.starts, cursor_offset) - 1
    last_line = lines.line_count - 1
    spans = enclosing_definitions(document.language_id, document.text, cursor_offset)
    fitting = [span for span in spans if span[1] - span[0] + 1 <= region_lines]
    if fitting:
        return fitting[-1]
    low, high = spans[0] if spans else (0, last_line)
    first = max(low, cursor_line - region_lines // 4)
    return first, min(high, last_line, first + region_lines - 1)


def _context(document: Document, start: int, end: int) -> tuple[str, str]:
    """Model text before ``start`` and after ``end``, within the budgets, cut at line boundaries."""
    before = to_model_text(document.text[max(0, start - CONTEXT_BEFORE_CHARS):start])
    if start > CONTEXT_BEFORE_CHARS and "\n" in before:
        before = before[before.index("\n") + 1:]
    after = to_model_text(document.text[end:end + CONTEXT_AFTER_CHARS])
    if end + CONTEXT_AFTER_CHARS < len(document.text) and "\n" in after:
        after = after[:after.rindex("\n")]
    return before, after


def _encode(tokenizer, text: str, split_special: bool) -> list[int]:
    return tokenizer(text, add_special_tokens=False, split_special_tokens=split_special)["input_ids"]


def _chat_prompt(tokenizer, name: str, language: str, diffs: Sequence[str], before: str, region: str,
                 after: str) -> tuple[list[int], str]:
    """(prompt ids, end marker) of the chat format: the template rendered around placeholders, the
    document's text tokenised with special tokens split."""
    edits = "\n".join(diffs) if diffs else "(none)"
    # The region is shown twice, in the file and alone: with markers inside the file (``<region>`` lines)
    # the real 1.5B copied the markers into its answer.
    user = (f"Recent edits to {name}:\n```diff\n{edits}\n```\n\nThe file around the region:\n```{language}\n"
            f"{before}{region}{after}\n```\n\nThe region:\n```{language}\n{region}\n```\n\n{INSTRUCTION}")
    placeholder = "\x00USER\x00"
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": placeholder}],
        tokenize=False, add_generation_prompt=True)
    head, tail = rendered.split(placeholder)
    ids = _encode(tokenizer, head, False) + _encode(tokenizer, user, True) + _encode(tokenizer, tail, False)
    return ids + _encode(tokenizer, f"```{language}\n", True), CHAT_END_MARKER


def _plain_prompt(tokenizer, name: str, comment: str, diffs: Sequence[str], before: str, region: str,
                  after: str) -> tuple[list[int], str]:
    """(prompt ids, end marker) of the plain format for code models without a chat template."""
    edit_lines = "\n".join(f"{comment} {line}" for diff in diffs for line in diff.split("\n")) or f"{comment} (none)"
    text = (f"{comment} Recent edits to {name}:\n{edit_lines}\n{before}{comment} region:\n{region}\n"
            f"{comment} end of region{after}\n{comment} The region above, rewritten with the recent edits carried "
            f"through it:\n{comment} region:\n")
    return _encode(tokenizer, text, True), f"\n{comment} end of region"


def build_rewrite_prompt(document: Document, cursor_offset: int, history, tokenizer,
                         capabilities: ModelCapabilities, region_lines: int) -> RewritePrompt | None:
    """The rewrite prompt for a cursor; ``None`` when the region is blank (nothing to rewrite).

    Args:
        cursor_offset: code points into ``document.text``.
        history: the document's recent edits: an :class:`lsp_server.workspace.edit_history.EditHistory` or its
            unified diffs (strings, oldest first).
        tokenizer: a transformers tokenizer (the loaded model's).
        capabilities: the loaded model's (:mod:`decoding.capabilities`): picks the format.
        region_lines: the most lines the region spans.
    Raises:
        NextEditUnsupported: the model has neither a chat template nor fill-in-the-middle tokens.
    """
    if not capabilities.chat_template and capabilities.fim is None:
        raise NextEditUnsupported("next-edit suggestions need an instruct model with a chat template (such as "
                                  "qwen2.5-coder-1.5b) or a code model with fill-in-the-middle tokens; the loaded "
                                  "model has neither")
    name = document.uri.rsplit("/", 1)[-1]
    diffs = history.diffs(name) if hasattr(history, "diffs") else list(history)
    first, last = region_lines_around(document, cursor_offset, region_lines)
    start, end = document.lines.starts[first], document.lines.line_end(last)
    region_text = document.text[start:end]
    if not region_text.strip():
        return None
    region = to_model_text(region_text)
    before, after = _context(document, start, end)
    if capabilities.chat_template:
        prompt_ids, marker = _chat_prompt(tokenizer, name, document.language_id, diffs, before, region, after)
    else:
        comment = line_comment(document.language_id)
        prompt_ids, marker = _plain_prompt(tokenizer, name, comment, diffs, before, region, after)
    return RewritePrompt(prompt_ids, _encode(tokenizer, region + marker, True), start, end, region_text, marker,
                         capabilities.chat_template)

