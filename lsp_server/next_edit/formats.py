"""The prompt formats of a next-edit rewrite: :func:`render` turns the parts of a rewrite (the file around
the region, the recent edits, the region) into prompt ids, the end marker and the draft.

Every format puts what stays the same while the user edits the region first (the file around it), then
what changes (the recent edits, the region): a prompt computed ahead (:mod:`lsp_server.requests.rewrite_ahead`)
keeps its prefix through the next edit.

* ``chat``: the tokenizer's chat template; a system turn (rewrite the region, carrying the edits
  through), a user turn (the file with a ``... the region ...`` comment line in the region's place, the
  recent edits as unified diffs, the region in a code block, a sentence naming the latest edit where
  :mod:`lsp_server.next_edit.edit_summary` recognises it, the instruction),
  the assistant turn pre-filled with ``"```<language>\\n"``; the answer ends with
  ``"\\n```"``.
* ``plain``: for code models without a chat template: the file with the region between ``region:`` /
  ``end of region`` comment lines, the diffs as line comments, an instruction comment and the ``region:``
  line again; the answer ends with the ``end of region`` comment line.
* ``sweep``: the repository format of Sweep's next-edit models (blog.sweep.dev "oss-next-edit"): ``<|file_sep|>``
  blocks: the file, each recent edit as ``{path}.diff`` with ``original:`` / ``updated:`` parts, the region
  as ``original/{path}`` (before the latest edit), ``current/{path}``, then ``updated/{path}``; the answer
  ends with the ``<|file_sep|>`` token (or a code fence, ``"\n```"``, which the instruct 1.5B writes
  first). Needs the repository tokens (Qwen2.5-Coder's).
* ``zeta`` / ``zeta_chat``: Zed's Zeta layout: the excerpt with the region between
  ``<|editable_region_start|>`` / ``<|editable_region_end|>`` and ``<|user_cursor_is_here|>`` at the
  cursor (plain text to our models), the edits, the answer the region between the markers (pre-filled
  with the start marker) ending with ``"\\n<|editable_region_end|>"``; ``zeta`` as an ``### Instruction`` /
  ``### Response`` text, ``zeta_chat`` inside the chat template.

Text from the document is tokenised with special tokens split (a ``<|im_end|>`` written in a file is
text); only the format's own tokens are special.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FORMATS = ("chat", "plain", "sweep", "zeta", "zeta_chat")
CHAT_FORMATS = frozenset({"chat", "zeta_chat"})  # need a chat template
CHAT_END_MARKER = "\n```"
SYSTEM_PROMPT = ("You are a code editing assistant. The user has just edited a file. You rewrite one region of "
                 "the file so that the user's recent edits are carried through it, and reply with the rewritten "
                 "region only, as code.")
INSTRUCTION = ("Rewrite the region so that the recent edits are carried through it: make the same change "
               "wherever it applies (a renamed name renamed at every use, a changed signature followed at its "
               "calls, a changed pattern changed the same way). Change nothing else. Reply with the whole "
               "rewritten region in one code block.")
ZETA_INSTRUCTION = ("You are a code completion assistant and your task is to analyze user edits and then rewrite an "
                    "excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking "
                    "into account the cursor location.")
REGION_START, REGION_END, CURSOR = "<|editable_region_start|>", "<|editable_region_end|>", "<|user_cursor_is_here|>"
FILE_SEP = "<|file_sep|>"
REGION_HOLE = "... the region ..."  # chat: the comment line that stands for the region in the file


@dataclass(frozen=True)
class RewriteParts:
    """What a rewrite prompt shows (model text: ``\\n`` line breaks)."""

    name: str  # the file's name
    language: str  # the document's language id
    comment: str  # its line-comment lead
    diffs: Sequence[str]  # the recent edits as unified diffs, oldest first
    before: str  # the file before the region (whole lines, ends with a line break or is empty)
    region: str
    after: str  # the file after the region (starts with the region's last line break or is empty)
    original_region: str  # the region before the latest edit
    cursor: int  # code points into ``region`` (clamped to it)
    draft_region: str = ""  # what the rewrite is drafted from ("": the region)
    summary: str = ""  # one sentence on the latest edit (lsp_server.next_edit.edit_summary; "" when none), chat only


@dataclass(frozen=True)
class Rendered:
    prompt_ids: list[int]
    draft_ids: list[int]  # the region's tokens, then the end marker's
    end_marker: str  # a stop string after the region ("" where a special token ends it)
    trailing_break: bool  # the answer ends with a line break of the format's, not the region's


def _draft(p: RewriteParts) -> str:
    return p.draft_region or p.region


def encode(tokenizer, text: str, split_special: bool = True) -> list[int]:
    return tokenizer(text, add_special_tokens=False, split_special_tokens=split_special)["input_ids"]


def _diff_body(diff: str):
    """(kind, text) of each line of a unified diff, headers left out: kind ``-``, ``+`` or another
    (a context line)."""
    for line in diff.split("\n"):
        if not line.startswith(("---", "+++", "@@")):
            yield line[:1], line[1:]


def split_diff(diff: str) -> tuple[str, str]:
    """(original, updated) lines of a unified diff (headers left out)."""
    original, updated = [], []
    for kind, text in _diff_body(diff):
        if kind != "+":
            original.append(text)
        if kind != "-":
            updated.append(text)
    return "\n".join(original), "\n".join(updated)


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(removed lines, added lines) of a unified diff, without their ``-`` / ``+`` and headers."""
    body = list(_diff_body(diff))
    return [text for kind, text in body if kind == "-"], [text for kind, text in body if kind == "+"]


def _chat(tokenizer, user: str, assistant_start: str, system: str | None) -> list[int]:
    """The chat template around ``user`` (tokenised with special tokens split), the assistant's turn
    begun with ``assistant_start``."""
    placeholder = "\x00USER\x00"
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": placeholder}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    head, tail = rendered.split(placeholder)
    return encode(tokenizer, head, False) + encode(tokenizer, user) + encode(tokenizer, tail, False) + encode(tokenizer, assistant_start)


def _chat_format(tokenizer, p: RewriteParts) -> Rendered:
    edits = "\n".join(p.diffs) if p.diffs else "(none)"
    # The region is shown once, after the edits, and a comment line stands in its place in the file: the
    # file stays the prompt's start through edits inside the region (docs/next-edit.md). Markers around the
    # region inside the file: the real 1.5B copied them into its answer.
    first = p.region.split("\n", 1)[0]
    hole = f"{p.comment} {REGION_HOLE}"
    indented = f"{first[:len(first) - len(first.lstrip())]}{hole}"
    user = (f"The file {p.name}, the region left out:\n```{p.language}\n{p.before}{indented}{p.after}\n```\n\n"
            f"Recent edits to {p.name}:\n```diff\n{edits}\n```\n\n"
            f"The region (it stands where the file says `{hole}`):\n```{p.language}\n{p.region}\n```\n\n"
            f"{p.summary + ' ' if p.summary else ''}{INSTRUCTION}")
    ids = _chat(tokenizer, user, f"```{p.language}\n", SYSTEM_PROMPT)
    return Rendered(ids, encode(tokenizer, _draft(p) + CHAT_END_MARKER), CHAT_END_MARKER, False)


def _plain_format(tokenizer, p: RewriteParts) -> Rendered:
    c = p.comment
    edit_lines = "\n".join(f"{c} {line}" for diff in p.diffs for line in diff.split("\n")) or f"{c} (none)"
    marker = f"\n{c} end of region"
    text = (f"{p.before}{c} region:\n{p.region}{marker}{p.after}\n{c} Recent edits to {p.name}:\n{edit_lines}\n"
            f"{c} The region above, rewritten with the recent edits carried through it:\n{c} region:\n")
    return Rendered(encode(tokenizer, text), encode(tokenizer, _draft(p) + marker), marker, False)


def _sweep_format(tokenizer, p: RewriteParts) -> Rendered:
    sep = tokenizer.convert_tokens_to_ids(FILE_SEP)
    ids = [sep] + encode(tokenizer, f"{p.name}\n{p.before}{p.region}{p.after}\n")
    for diff in p.diffs:
        original, updated = split_diff(diff)
        ids += [sep] + encode(tokenizer, f"{p.name}.diff\noriginal:\n{original}\nupdated:\n{updated}\n")
    ids += [sep] + encode(tokenizer, f"original/{p.name}\n{p.original_region}\n")
    ids += [sep] + encode(tokenizer, f"current/{p.name}\n{p.region}\n")
    ids += [sep] + encode(tokenizer, f"updated/{p.name}\n")
    # An instruct model may close the block as in a chat answer: a code fence ends the region too.
    return Rendered(ids, encode(tokenizer, _draft(p) + "\n") + [sep], CHAT_END_MARKER, True)


def _zeta_user(p: RewriteParts) -> str:
    marked = p.region[:p.cursor] + CURSOR + p.region[p.cursor:]
    edits = "\n\n".join(f'User edited "{p.name}":\n```diff\n{diff}\n```' for diff in p.diffs) or "(none)"
    return (f"### User Excerpt:\n\n```{p.name}\n{p.before}{REGION_START}\n{marked}\n{REGION_END}{p.after}\n```\n\n"
            f"### User Edits:\n\n{edits}\n\n")


def _zeta_format(tokenizer, p: RewriteParts, chat: bool) -> Rendered:
    marker = f"\n{REGION_END}"
    if chat:
        ids = _chat(tokenizer, f"{ZETA_INSTRUCTION}\n\n{_zeta_user(p)}", f"{REGION_START}\n", None)
    else:
        text = f"### Instruction:\n{ZETA_INSTRUCTION}\n\n{_zeta_user(p)}### Response:\n\n{REGION_START}\n"
        ids = encode(tokenizer, text)
    return Rendered(ids, encode(tokenizer, _draft(p) + marker), marker, False)


def render(prompt_format: str, tokenizer, parts: RewriteParts) -> Rendered:
    """The prompt of ``prompt_format`` (one of :data:`FORMATS`) for ``parts``.

    Raises:
        ValueError: an unknown format, a chat format for a tokenizer without a chat template, or ``sweep``
            for one without ``<|file_sep|>``.
    """
    if prompt_format not in FORMATS:
        raise ValueError(f"unknown next-edit prompt format {prompt_format!r}; use {', '.join(FORMATS)}")
    if prompt_format in CHAT_FORMATS and not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"the next-edit prompt format {prompt_format} needs a model with a chat template")
    if prompt_format == "sweep" and FILE_SEP not in tokenizer.get_vocab():
        raise ValueError(f"the next-edit prompt format sweep needs a tokenizer with {FILE_SEP}")
    if prompt_format == "chat":
        return _chat_format(tokenizer, parts)
    if prompt_format == "plain":
        return _plain_format(tokenizer, parts)
    if prompt_format == "sweep":
        return _sweep_format(tokenizer, parts)
    return _zeta_format(tokenizer, parts, prompt_format == "zeta_chat")
