"""Post-processing: trim what the model wrote to what is worth inserting.

The completion's mode (single- or multi-line) is decided before generation, in
:mod:`lsp_server.completion.mode`; :func:`trim` applies it:

* single line: cut at the line break; a tail that repeats the text right of the cursor is dropped
  (``def area(radius|):`` never gets ``):`` twice; ``{ ok:| }`` only the gap; docs/cases.md L6);
* in a pair the editor closed (``f() {|}``, ``<ul>|</ul>``): the line's rest as a single line where the
  model writes on the cursor's line, else the block's body, trimmed as multi-line, with a line break and
  the line's indentation after it (the closer onto its own line);
* multi-line: cut at the end of the enclosing block (the first line indented less than the block, or
  at top level the next definition after a blank line); a closing line of a brace block is kept only
  if the document does not already close that block (tree-sitter decides); trailing lines that repeat
  the lines already below the cursor are dropped unless the completion needs them (its own ``}``;
  docs/cases.md L6); lines that add syntax errors at the end are dropped (tree-sitter: the longest run of
  lines with the fewest errors in the window), as are a last line cut off by the token limit and a last
  line that opens a block without its body (not one whose body the document below holds). A completion
  that starts with a line break keeps its first written line: never trimmed to the line break alone;
  on a blank line it starts on that line (the line breaks before its first line dropped).

All text here is model text: ``\\n`` line breaks, ``str`` offsets in code points.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from decoding.types import FinishReason
from lsp_server.completion.mode import IN_PAIR, Mode
from lsp_server.workspace.syntax import INDENT_BLOCK_LANGUAGES, TailTrimmer, error_count, indent_width, parser_for, syntax_window

_CLOSERS = set(")]}>:;,.\"'`")
_BRACKET_CLOSERS = ")]}"
_QUOTES = "\"'`"
_MAX_SYNTAX_TRIMS = 16  # parses per completion at most, for the error-based trimming


@dataclass(frozen=True)
class TrimContext:
    """What :func:`trim` knows about the cursor."""

    prefix: str  # model text before the cursor (the prompt's window of it is enough)
    suffix: str  # model text after the cursor
    language_id: str
    mode: Mode
    finish_reason: FinishReason = FinishReason.STOP  # LENGTH when the token limit cut the text (TIME: whole lines)
    window: tuple[str, str] | None = None  # syntax_window(prefix, suffix) when the caller has it

    @functools.cached_property
    def syntax_window(self) -> tuple[str, str]:
        """(head, tail) parsed around the cursor (:func:`lsp_server.workspace.syntax.syntax_window`), computed once."""
        return self.window if self.window is not None else syntax_window(self.prefix, self.suffix)


def trim(text: str, ctx: TrimContext) -> str:
    """The part of the model's ``text`` worth inserting (see the module docstring)."""
    line_suffix = ctx.suffix.split("\n", 1)[0]
    line_prefix = ctx.prefix[ctx.prefix.rfind("\n") + 1:]
    in_pair = ctx.mode.reason == IN_PAIR
    if not ctx.mode.multi_line or (in_pair and text.split("\n", 1)[0].strip()):
        return _dedupe_line_suffix(text.split("\n", 1)[0].rstrip(), line_suffix, line_prefix)
    body = _trim_lines(text, ctx)
    if in_pair and body.strip():  # the body of a pair: its closer goes onto a line of its own
        return body + "\n" + line_prefix[: len(line_prefix) - len(line_prefix.lstrip())]
    if not line_prefix.strip() and not line_suffix.strip():
        return _start_on_blank_line(body, line_prefix)
    return body


def _start_on_blank_line(body: str, line_prefix: str) -> str:
    """A completion for a blank line starts on that line: the line breaks the model wrote before its first
    line go (they left the cursor's line blank and put the code below it), and that line loses the
    indentation already left of the cursor (``line_prefix``). Kept as written where the first line is
    indented less than the cursor (an insertion cannot take indentation away)."""
    lines = body.split("\n")
    first = _first_written(lines) - 1
    if first == 0 or not lines[first].startswith(line_prefix):
        return body
    return "\n".join([lines[first][len(line_prefix):], *lines[first + 1:]])


def _trim_lines(text: str, ctx: TrimContext) -> str:
    """A multi-line completion trimmed (see the module docstring)."""
    lines = text.rstrip().split("\n")
    if ctx.finish_reason == FinishReason.LENGTH and len(lines) > 1:
        lines = lines[:-1]  # the token limit cut the last line
    parser = parser_for(ctx.language_id)
    trimmer = TailTrimmer(parser, *ctx.syntax_window) if parser is not None else None
    lines = _cut_at_block_end(lines, ctx, parser)
    lines = _drop_repeated_lines_below(lines, ctx.suffix, trimmer)
    if trimmer is not None:
        lines = _drop_lines_adding_errors(lines, trimmer)
    return "\n".join(_drop_trailing_header(lines, trimmer)).rstrip()


def _first_written(lines: list[str]) -> int:
    """How many lines a multi-line completion keeps at least: up to its first written (non-blank) line,
    so that a completion that starts with a line break is never trimmed to that line break alone."""
    return next((index + 1 for index, line in enumerate(lines) if line.strip()), len(lines))


def _adds_no_errors(trimmer: TailTrimmer | None, shorter: list[str], lines: list[str]) -> bool:
    """Whether the completion ``shorter`` (a prefix of ``lines``) has no more syntax errors in the window
    than ``lines``; True without a grammar."""
    if trimmer is None:
        return True
    whole = trimmer.error_count("\n".join(lines))
    return trimmer.error_count("\n".join(shorter)) <= whole


def _drop_trailing_header(lines: list[str], trimmer: TailTrimmer | None) -> list[str]:
    """Drop a last line that opens a block (``:``, ``{``) the completion never wrote, unless the document
    after the cursor holds that block (dropping the header then leaves the suffix's body or closer
    without it: more syntax errors)."""
    while len(lines) > _first_written(lines) and lines[-1].rstrip().endswith((":", "{")):
        if not _adds_no_errors(trimmer, lines[:-1], lines):
            break
        lines = lines[:-1]
    return lines


def _dedupe_line_suffix(completion: str, line_suffix: str, line_prefix: str = "") -> str:
    """Drop a tail of ``completion`` that the text right of the cursor already holds (docs/cases.md L6);
    where it closes the bracket or string the cursor is in, whose closer is right of the cursor (the
    editor closed it), it ends there: its closer and what follows would come twice."""
    right = line_suffix.rstrip()
    if not right or not completion:
        return completion
    if completion.endswith(right):
        return completion[: -len(right)].rstrip() if right.strip() else completion
    for size in range(min(len(right), len(completion)), 0, -1):
        head = right[:size]
        if head.strip() and all(ch in _CLOSERS or ch.isspace() for ch in head) and completion.endswith(head):
            return completion[:-size]
    closer = right.lstrip()[:1]
    if closer in _BRACKET_CLOSERS or (closer in _QUOTES and _inside_string(line_prefix, closer)):
        end = _closing_point(completion, closer)
        if end is not None:  # the document's own closer ends the bracket or string from here
            return completion[:end]
    return completion


def _closing_point(completion: str, closer: str) -> int | None:
    """Where ``completion`` closes the bracket or string the cursor is in, with ``closer`` (the first
    character right of the cursor: the editor's auto-closed ``)``, ``]``, ``}`` or quote): the index of its
    first closer that matches nothing it opened itself (strings it opened skipped); ``None`` where it
    never closes it or closes another kind. ``console.log(|)`` and ``"hi");`` give 4: ``"hi"``, not
    ``"hi");)``."""
    if closer in _QUOTES:
        return next((i for i, ch in enumerate(completion) if ch == closer and not _escaped(completion, i)), None)
    depth, quote = 0, None
    for index, ch in enumerate(completion):
        if quote is not None:
            if ch == quote and not _escaped(completion, index):
                quote = None
        elif ch in _QUOTES:
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in _BRACKET_CLOSERS:
            if depth == 0:
                return index if ch == closer else None
            depth -= 1
    return None


def _inside_string(line_prefix: str, quote: str) -> bool:
    """Whether the cursor, after ``line_prefix``, is inside a string delimited by ``quote`` opened on its line
    (an odd count of unescaped ``quote``s before it)."""
    return sum(1 for i, ch in enumerate(line_prefix) if ch == quote and not _escaped(line_prefix, i)) % 2 == 1


def _escaped(text: str, index: int) -> bool:
    """Whether ``text[index]`` follows an odd number of backslashes."""
    slashes = 0
    while slashes < index and text[index - slashes - 1] == "\\":
        slashes += 1
    return slashes % 2 == 1


def _cut_at_block_end(lines: list[str], ctx: TrimContext, parser) -> list[str]:
    line_prefix = ctx.prefix[ctx.prefix.rfind("\n") + 1:]
    if line_prefix.strip():  # after a header on the cursor's line: the block is deeper than that line
        block_min = indent_width(line_prefix) + 1
    elif lines[0].strip():  # on a blank line: the block is as deep as the first line written
        block_min = indent_width(line_prefix + lines[0])
    else:
        first_code = next((line for line in lines[1:] if line.strip()), line_prefix)
        block_min = indent_width(first_code)
    top_level = block_min == 0
    indent_blocks = ctx.language_id in INDENT_BLOCK_LANGUAGES
    kept = [lines[0]]
    seen_code = bool(lines[0].strip())
    for index, line in enumerate(lines[1:], start=1):
        if not line.strip():
            kept.append(line)
            continue
        width = indent_width(line)
        if width < block_min:
            closer = line.strip()
            if indent_blocks or not _closing_line(closer):
                break
            reopens = closer.endswith(("{", "(", "["))  # ``} else {``: the block ends and the next one starts
            if not _closer_needed(kept, _closing_part(line) if reopens else line, ctx, parser):
                break
            kept.append(line)
            if not reopens:
                break
            continue  # the next block's lines are as deep as this one's
        if top_level and seen_code and width == 0 and not kept[-1].strip():
            break  # a new top-level definition after a blank line
        kept.append(line)
        seen_code = True
    while len(kept) > 1 and not kept[-1].strip():
        kept.pop()
    return kept


def _closing_line(stripped: str) -> bool:
    """Whether a line (stripped) closes something: a bracket (``}``, ``)``, ``]``) or a JSX/TSX element
    (``</div>``, the ``/>`` of a tag written over several lines)."""
    return stripped[:1] in _BRACKET_CLOSERS or stripped.startswith(("</", "/>"))


def _closing_part(line: str) -> str:
    """A closing line's indentation and leading closers: ``  }`` of ``  } else {``, ``  })`` of ``  }).then(() => {``."""
    body = line.lstrip()
    closers = len(body) - len(body.lstrip(_BRACKET_CLOSERS))
    return line[: len(line) - len(body) + closers]


def _closer_needed(kept: list[str], closer_line: str, ctx: TrimContext, parser) -> bool:
    """Whether a closing line belongs in the completion: the document does not close the block itself."""
    without = "\n".join(kept)
    with_closer = without + "\n" + closer_line
    if parser is None:
        return not ctx.suffix.strip()
    head, tail = ctx.syntax_window
    return error_count(parser, head + with_closer + tail) < error_count(parser, head + without + tail)


def _drop_repeated_lines_below(lines: list[str], suffix: str, trimmer: TailTrimmer | None) -> list[str]:
    """Drop trailing lines equal (stripped, blank lines aside) to the first non-blank lines below the
    cursor (docs/cases.md L6), the longest such run whose drop adds no syntax errors where it holds a
    closing line: a ``}`` that closes a block the completion opened stays, though the line below the
    cursor is a ``}`` too."""
    below = [line.strip() for line in suffix.split("\n")[1:] if line.strip()][: len(lines)]
    for cut in range(_first_written(lines), len(lines)):
        tail = [line.strip() for line in lines[cut:] if line.strip()]
        if not lines[cut].strip() or tail != below[: len(tail)]:
            continue
        kept = lines[:cut]
        while not kept[-1].strip():
            kept = kept[:-1]  # blank lines before the repeated ones go with them
        closes = any(_closing_line(line) for line in tail)  # may close what the completion opened
        if not closes or _adds_no_errors(trimmer, kept, lines):
            return kept
    return lines


def _drop_lines_adding_errors(lines: list[str], trimmer: TailTrimmer) -> list[str]:
    """The longest prefix of ``lines`` (whole lines, up to the first written one at least) with the fewest
    syntax errors in the window around the cursor: trailing lines that open what they never close, or
    break what follows, go. At most ``_MAX_SYNTAX_TRIMS`` parses (the longest candidates)."""
    best_count, best_size = None, len(lines)
    for size in range(len(lines), max(_first_written(lines) - 1, len(lines) - _MAX_SYNTAX_TRIMS), -1):
        if size < len(lines) and not lines[size - 1].strip():
            continue
        count = trimmer.error_count("\n".join(lines[:size]))
        if best_count is None or count < best_count:
            best_count, best_size = count, size
        if count == 0:
            break
    return lines[:best_size]
