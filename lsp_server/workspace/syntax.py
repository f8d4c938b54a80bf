"""Syntax trees for post-processing: tree-sitter grammars from their PyPI packages, by LSP language id.

Only what post-processing asks of a tree lives here: how many syntax errors a text has, and the last
code token before an offset (comments skipped). Languages without a grammar get ``None`` from
:func:`parser_for`, and callers fall back to line-based rules.

Offsets are code points into a ``str``; tree-sitter counts bytes of UTF-8, so this module converts.
"""

from __future__ import annotations

import importlib
import logging
from functools import lru_cache

from tree_sitter import Language, Node, Parser

log = logging.getLogger(__name__)

_WINDOW_HEAD_CHARS = 6000  # at most this much text before the cursor is parsed
_WINDOW_TAIL_CHARS = 3000  # and at most this much after it

# LSP languageId -> (module, function returning the grammar)
_GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "javascriptreact": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "java": ("tree_sitter_java", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
}

#: Languages whose blocks are delimited by indentation rather than braces.
INDENT_BLOCK_LANGUAGES = frozenset({"python"})

_COMMENT_TYPES = frozenset({"comment", "line_comment", "block_comment"})


def supported_languages() -> list[str]:
    """LSP language ids with a tree-sitter grammar."""
    return sorted(_GRAMMARS)


@lru_cache(maxsize=None)
def _language(language_id: str) -> Language | None:
    spec = _GRAMMARS.get(language_id)
    if spec is None:
        return None
    try:
        return Language(getattr(importlib.import_module(spec[0]), spec[1])())
    except (ImportError, AttributeError, ValueError) as exc:  # a missing or incompatible grammar package
        log.warning("no tree-sitter grammar for %s: %s", language_id, exc)
        return None


def parser_for(language_id: str) -> Parser | None:
    """A parser for an LSP language id, or ``None`` when there is no grammar for it."""
    language = _language(language_id)
    return Parser(language) if language is not None else None


def error_count(parser: Parser, text: str) -> int:
    """Number of ERROR and MISSING nodes in ``text``'s tree (0 for well-formed code)."""
    return _errors(parser.parse(text.encode("utf-8")))


def _point(data: bytes, offset: int) -> tuple[int, int]:
    """Tree-sitter (row, byte column) of a byte offset."""
    row = data.count(b"\n", 0, offset)
    return row, offset - (data.rfind(b"\n", 0, offset) + 1)


class TailTrimmer:
    """Error counts of ``head + middle + tail`` for ever shorter ``middle``s, each parse incremental.

    Tree-sitter re-parses only what an edit touched when given the edited old tree (``Tree.edit``,
    then ``Parser.parse(new, old_tree)``), so trying ever shorter completions in a 9 KB window costs a
    fraction of a full parse each.
    """

    def __init__(self, parser: Parser, head: str, tail: str):
        self.parser = parser
        self.head, self.tail = head.encode("utf-8"), tail.encode("utf-8")
        self._middle: bytes | None = None
        self._tree = None

    def error_count(self, middle: str) -> int:
        """Errors of ``head + middle + tail``; cheapest when ``middle`` shortens the previous one."""
        new_middle = middle.encode("utf-8")
        data = self.head + new_middle + self.tail
        old = self._middle
        if self._tree is None or old is None or not old.startswith(new_middle):
            self._tree = self.parser.parse(data)
        else:
            old_data = self.head + old + self.tail
            start = len(self.head) + len(new_middle)
            old_end = len(self.head) + len(old)
            self._tree.edit(start_byte=start, old_end_byte=old_end, new_end_byte=start,
                            start_point=_point(old_data, start), old_end_point=_point(old_data, old_end),
                            new_end_point=_point(data, start))
            self._tree = self.parser.parse(data, self._tree)
        self._middle = new_middle
        return _errors(self._tree)


def _errors(tree) -> int:
    count = 0
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        if node.has_error:
            stack.extend(node.children)
    return count


def _last_leaf_before(node: Node, byte_offset: int) -> Node | None:
    best = None
    stack = [node]
    while stack:
        current = stack.pop()
        if current.start_byte >= byte_offset:
            continue
        if current.child_count == 0 or current.type in _COMMENT_TYPES:
            real = not current.is_missing and current.end_byte > current.start_byte
            if real and current.type not in _COMMENT_TYPES and current.end_byte <= byte_offset and (
                    best is None or current.end_byte > best.end_byte):
                best = current
            continue
        stack.extend(current.children)
    return best


def last_token_and_parent(parser: Parser, text: str, offset: int) -> tuple[str, str] | None:
    """(text, its parent node's type) of the last code token (not a comment) that ends at or before
    ``offset`` code points: ``(">", "jsx_opening_element")`` after ``<ul>`` in JSX/TSX."""
    data = text.encode("utf-8")
    byte_offset = len(text[:offset].encode("utf-8"))
    leaf = _last_leaf_before(parser.parse(data).root_node, byte_offset)
    if leaf is None:
        return None
    parent = leaf.parent.type if leaf.parent is not None else ""
    return data[leaf.start_byte:leaf.end_byte].decode("utf-8", errors="replace"), parent


def indent_width(line: str, tab_size: int = 4) -> int:
    """Columns of ``line``'s leading whitespace, tabs to the next multiple of ``tab_size``."""
    width = 0
    for ch in line:
        if ch == " ":
            width += 1
        elif ch == "\t":
            width += tab_size - width % tab_size
        else:
            break
    return width


def syntax_window(prefix: str, suffix: str) -> tuple[str, str]:
    """The part of ``prefix`` and ``suffix`` that tree-sitter parses around the cursor.

    The head starts at the beginning of the enclosing definition: the nearest line, within the last
    ``_WINDOW_HEAD_CHARS``, whose indentation is the least of all lines from it to the cursor (lines that
    start with a closing bracket don't count). A head cut at a fixed count of characters may start inside
    a docstring or a bracket, and the flood of errors that follows makes each parse several times slower
    (docs/decisions.md#syntax-window). The tail ends before the
    first line after the cursor's line that is indented no deeper than the head's first line (the next
    definition); closing lines at that depth stay in. Both are whole lines, bar the cursor's own.
    """
    lines = prefix[-_WINDOW_HEAD_CHARS:].split("\n")
    if len(prefix) > _WINDOW_HEAD_CHARS and len(lines) > 1:
        lines = lines[1:]  # the first is likely a fragment of a line
    start, base = len(lines) - 1, None
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if not line.strip() or line.lstrip()[:1] in ")]}":
            continue
        width = indent_width(line)
        if base is None or width < base:
            start, base = index, width
    head = "\n".join(lines[start:])
    tail_lines = suffix[:_WINDOW_TAIL_CHARS].split("\n")
    end = len(tail_lines)
    for index, line in enumerate(tail_lines[1:], start=1):
        if base is not None and line.strip() and indent_width(line) <= base and line.lstrip()[:1] not in ")]}":
            end = index
            break
    return head, "\n".join(tail_lines[:end])


#: Node types that are definitions, for snapping a rewrite region (python, JS/TS, Go, Rust, Java, C/C++).
_DEFINITION_TYPES = frozenset({
    "function_definition", "class_definition", "decorated_definition", "function_declaration",
    "generator_function_declaration", "class_declaration", "method_definition", "method_declaration",
    "constructor_declaration", "interface_declaration", "enum_declaration", "function_item", "impl_item",
    "struct_item", "enum_item", "trait_item", "mod_item", "struct_specifier", "class_specifier",
})
_MAX_DEFINITION_PARSE_CHARS = 500_000  # a larger document is not parsed for definitions


def enclosing_definitions(language_id: str, text: str, offset: int) -> list[tuple[int, int]]:
    """(first line, last line) of each definition that contains ``offset`` (code points), innermost
    first; 0-based lines of ``text`` split at ``\\n``. Empty without a grammar for the language or for
    a document over ``_MAX_DEFINITION_PARSE_CHARS``."""
    parser = parser_for(language_id)
    if parser is None or len(text) > _MAX_DEFINITION_PARSE_CHARS:
        return []
    data = text.encode("utf-8")
    byte_offset = len(text[:offset].encode("utf-8"))
    node = parser.parse(data).root_node.descendant_for_byte_range(byte_offset, byte_offset)
    spans = []
    while node is not None:
        if node.type in _DEFINITION_TYPES:
            last = node.end_point[0] - (1 if node.end_point[1] == 0 and node.end_point[0] > node.start_point[0] else 0)
            span = (node.start_point[0], last)
            if not spans or spans[-1] != span:  # a decorated definition and its function share lines
                spans.append(span)
        node = node.parent
    return spans
