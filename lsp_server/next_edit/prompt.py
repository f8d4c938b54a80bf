"""The rewrite prompt of a next-edit suggestion: recent edits + the region around the cursor -> prompt.

The region is ``region_lines`` whole lines around the cursor (a quarter of them above it), or, where
tree-sitter knows the language (:func:`lsp_server.workspace.syntax.enclosing_definitions`), the outermost
definition around the cursor that fits in ``region_lines`` lines; when none fits, the window stays
inside the innermost one; blank lines at its edges are left out (the cursor's line stays in). The model
rewrites the region with the recent edits carried through it, and the region is the draft
(``draft_ids``: its tokens, then the end marker's), with the latest edit carried through it where it is
recognised (:func:`predicted_region`).

The format (:mod:`lsp_server.next_edit.formats`) is the ``nextEdit.promptFormat`` setting; ``auto`` picks
``chat`` for a model with a chat template and ``plain`` for a code model with fill-in-the-middle tokens;
any other model: :class:`NextEditUnsupported`. (``speclsp bench edits`` compares the formats on its
development set: docs/next-edit.md.)

The model sees ``\\n`` line breaks; offsets are code points into the document's own text.
"""

from __future__ import annotations

import bisect
import re

from decoding.weights.capabilities import ModelCapabilities
from lsp_server.backends.base import RewritePrompt
from lsp_server.next_edit.edit_summary import edit_summary, latest_edit
from lsp_server.next_edit.formats import CHAT_FORMATS, FORMATS, RewriteParts, render, split_diff
from lsp_server.workspace.syntax import enclosing_definitions
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import to_model_text

CONTEXT_BEFORE_CHARS = 1500  # file text shown before the region, at most (model text, whole lines); its prefill
# is most of a suggestion's time on a CPU
CONTEXT_AFTER_CHARS = 500  # and after it
_HASH_COMMENT = frozenset({"python", "ruby", "shellscript", "perl", "r", "yaml", "toml", "makefile", "dockerfile",
                           "coffeescript", "elixir", "julia", "nim", "powershell"})
_DASH_COMMENT = frozenset({"lua", "sql", "haskell", "elm"})


class NextEditUnsupported(Exception):
    """The loaded model cannot write next-edit suggestions (no chat template, not a code model), or
    not in the format asked for."""


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
        first, last = fitting[-1]
    else:
        low, high = spans[0] if spans else (0, last_line)
        first = max(low, cursor_line - region_lines // 4)
        last = min(high, last_line, first + region_lines - 1)
    # Blank lines at its edges carry nothing, and the model leaves them out of its answer
    while first < min(last, cursor_line) and not lines.line_text(first).strip():
        first += 1
    while last > max(first, cursor_line) and not lines.line_text(last).strip():
        last -= 1
    return first, last


def _context(document: Document, start: int, end: int) -> tuple[str, str]:
    """Model text before ``start`` and after ``end``, within the budgets, cut at line boundaries."""
    before = to_model_text(document.text[max(0, start - CONTEXT_BEFORE_CHARS):start])
    if start > CONTEXT_BEFORE_CHARS and "\n" in before:
        before = before[before.index("\n") + 1:]
    after = to_model_text(document.text[end:end + CONTEXT_AFTER_CHARS])
    if end + CONTEXT_AFTER_CHARS < len(document.text) and "\n" in after:
        after = after[:after.rindex("\n")]
    return before, after


def original_region(region: str, diffs) -> str:
    """The region before the latest edit: the latest diff's updated lines replaced by its original
    lines where they occur once in the region; else the region as it is."""
    if not diffs:
        return region
    original, updated = split_diff(diffs[-1])
    return region.replace(updated, original) if updated and region.count(updated) == 1 else region


def _pass_argument(region: str, callee: str, name: str) -> str:
    """``region`` with ``name`` passed last in every call of ``callee`` that lacks it (brackets counted,
    strings not: a draft)."""
    out, position = [], 0
    for call in re.finditer(rf"(?<!\w){re.escape(callee)}\s*\(", region):
        if call.start() < position or re.search(r"\bdef\s+$", region[:call.start()]):
            continue
        depth, close = 0, None
        for i in range(call.end(), len(region)):
            if region[i] in "([{":
                depth += 1
            elif region[i] in ")]}":
                if depth == 0:
                    close = i
                    break
                depth -= 1
        if close is None:
            break
        arguments = region[call.end():close]
        if re.search(rf"(?<![\w.]){re.escape(name)}\b", arguments):
            continue
        stripped = arguments.rstrip()
        at = call.end() + len(stripped)
        insert = name if not stripped else f" {name}," if stripped.endswith(",") else f", {name}"
        out.append(region[position:at] + insert)
        position = at
    return "".join(out) + region[position:]


def predicted_region(region: str, diffs) -> str:
    """The region as the rewrite will likely read (its draft), with the latest edit
    (:func:`lsp_server.next_edit.edit_summary.latest_edit`) carried through it: a rename through its whole words, a
    keyword argument renamed at its other ``old=``, a new parameter or argument passed in the other calls;
    else the region. Only speed depends on it: every drafted token is verified."""
    edit = latest_edit(diffs)
    if edit is None:
        return region
    if edit.kind == "rename":
        return re.sub(rf"(?<![\w.]){re.escape(edit.old)}\b", edit.new, region)
    if edit.kind == "keyword":
        return re.sub(rf"(?<![\w.]){re.escape(edit.old)}(?==(?!=))", edit.new, region)
    return _pass_argument(region, edit.callee, edit.new)


def choose_format(setting: str, capabilities: ModelCapabilities) -> str:
    """The prompt format for the ``nextEdit.promptFormat`` setting and the loaded model.

    Raises:
        NextEditUnsupported: the model has neither a chat template nor fill-in-the-middle tokens, or the
            format asked for needs a chat template it lacks.
    """
    if not capabilities.chat_template and capabilities.fim is None:
        raise NextEditUnsupported("next-edit suggestions need an instruct model with a chat template (such as "
                                  "qwen2.5-coder-1.5b) or a code model with fill-in-the-middle tokens; the loaded "
                                  "model has neither")
    if setting == "auto":
        setting = "chat" if capabilities.chat_template else "plain"
    if setting not in FORMATS:
        raise NextEditUnsupported(f"unknown next-edit prompt format {setting!r}; use auto, {', '.join(FORMATS)}")
    if setting in CHAT_FORMATS and not capabilities.chat_template:
        raise NextEditUnsupported(f"the next-edit prompt format {setting} needs a model with a chat template; "
                                  "the loaded model has none")
    return setting


def build_rewrite_prompt(document: Document, cursor_offset: int, history, tokenizer,
                         capabilities: ModelCapabilities, region_lines: int, prompt_format: str = "auto") -> RewritePrompt | None:
    """The rewrite prompt for a cursor; ``None`` when the region is blank (nothing to rewrite).

    Args:
        cursor_offset: code points into ``document.text``.
        history: the document's recent edits: an :class:`lsp_server.workspace.edit_history.EditHistory` or its
            unified diffs (strings, oldest first).
        tokenizer: a transformers tokenizer (the loaded model's).
        capabilities: the loaded model's (:mod:`decoding.weights.capabilities`).
        region_lines: the most lines the region spans.
        prompt_format: ``auto`` or one of :data:`lsp_server.next_edit.formats.FORMATS` (:func:`choose_format`).
    Raises:
        NextEditUnsupported: as :func:`choose_format`, or ``sweep`` for a tokenizer without its tokens.
    """
    chosen = choose_format(prompt_format, capabilities)
    name = document.uri.rsplit("/", 1)[-1]
    diffs = history.diffs(name) if hasattr(history, "diffs") else list(history)
    first, last = region_lines_around(document, cursor_offset, region_lines)
    start, end = document.lines.starts[first], document.lines.line_end(last)
    region_text = document.text[start:end]
    if not region_text.strip():
        return None
    region = to_model_text(region_text)
    before, after = _context(document, start, end)
    cursor = len(to_model_text(document.text[start:min(max(cursor_offset, start), end)]))
    parts = RewriteParts(name, document.language_id, line_comment(document.language_id), diffs, before, region, after,
                         original_region(region, diffs), cursor, predicted_region(region, diffs), edit_summary(diffs) or "")
    try:
        rendered = render(chosen, tokenizer, parts)
    except ValueError as exc:
        raise NextEditUnsupported(str(exc)) from exc
    return RewritePrompt(rendered.prompt_ids, rendered.draft_ids, start, end, region_text, rendered.end_marker,
                         chosen in CHAT_FORMATS, chosen, rendered.trailing_break, diffs[-1] if diffs else "")
