"""Functions of a source file for a typist to type: where each starts and ends, in any language we parse.

A function is ``(name, file text, body start, body end)``: the body starts at the indentation of the line
that declares it (so ``export function``, ``pub fn`` and ``async def`` are typed whole) and ends at its last
line's end (offsets in characters); the name is ``parent/file.ext:LINE function`` (LINE 1-based). Python
functions are found by indentation (``def`` lines); other languages by their tree-sitter grammar
(:func:`lsp_server.workspace.syntax.parser_for`): function and method declarations, and functions bound to a
name (``const f = (...) => {...}``) whose declaration starts its line.
"""

from __future__ import annotations

from pathlib import Path

from lsp_server.workspace.syntax import parser_for

#: The LSP language id of a file extension.
LANGUAGE_IDS = {".py": "python", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript",
                ".tsx": "typescriptreact", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
                ".jsx": "javascriptreact", ".rs": "rust", ".go": "go", ".c": "c", ".h": "c", ".cc": "cpp",
                ".cpp": "cpp", ".hpp": "cpp", ".java": "java"}
_FUNCTION_TYPES = frozenset({"function_declaration", "generator_function_declaration", "method_definition",
                             "function_item", "method_declaration", "function_definition"})
_BOUND_FUNCTION_TYPES = frozenset({"arrow_function", "function_expression", "function"})
MIN_LINES, MAX_LINES = 4, 25


def language_of(path: Path) -> str:
    """The LSP language id of ``path`` by its extension (``plaintext`` where unknown)."""
    return LANGUAGE_IDS.get(path.suffix.lower(), "plaintext")


def file_functions(path: Path, text: str) -> list[tuple[str, str, int, int]]:
    """The functions of :data:`MIN_LINES` to :data:`MAX_LINES` lines in ``text`` (the file at ``path``), in file
    order (see the module docstring); ``[]`` for a language without a grammar."""
    language = language_of(path)
    if language == "python":
        return _python_functions(path, text)
    parser = parser_for(language)
    if parser is None:
        return []
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    found, seen = [], set()
    for node in _walk(parser.parse(text.encode("utf-8")).root_node):
        named = _declared(node)
        if named is None:
            continue
        first, last = node.start_point[0], node.end_point[0]
        start_line = lines[first]
        indent = len(start_line) - len(start_line.lstrip())
        after = lines[last].encode("utf-8")[node.end_point[1]:].decode("utf-8", errors="ignore").strip()
        if not MIN_LINES <= last - first + 1 <= MAX_LINES or first in seen or after not in ("", ";", ",", ");"):
            continue
        seen.add(first)
        found.append((f"{path.parent.name}/{path.name}:{first + 1} {named}", text, offsets[first] + indent,
                      offsets[last] + len(lines[last])))
    return found


def _walk(node):
    """Every node under ``node`` (itself included), depth first in document order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def _declared(node) -> str | None:
    """The name of the function ``node`` declares, where it is a declaration that starts its line (possibly
    after ``export``/modifiers) or a function bound to a name in a declaration that does; else ``None``."""
    if node.type in _FUNCTION_TYPES:
        name = node.child_by_field_name("name") or node.child_by_field_name("declarator")
        return _text(name) if name is not None else None
    if node.type == "variable_declarator":
        value, name = node.child_by_field_name("value"), node.child_by_field_name("name")
        if value is not None and value.type in _BOUND_FUNCTION_TYPES and name is not None:
            return _text(name)
    return None


def _text(node) -> str:
    """A name node's text, its first line (a C declarator may span more)."""
    return node.text.decode("utf-8", errors="replace").split("(", 1)[0].split("\n", 1)[0].strip()


def _python_functions(path: Path, text: str) -> list[tuple[str, str, int, int]]:
    """Python's functions (:func:`python_function_spans`), named ``parent/file.py:LINE function``."""
    return [(f"{path.parent.name}/{path.name}:{line + 1} {name}", text, start, end)
            for line, name, start, end in python_function_spans(text)]


def python_function_spans(text: str, min_lines: int = MIN_LINES, max_lines: int = MAX_LINES
                          ) -> list[tuple[int, str, int, int]]:
    """(0-based line, name, body start, body end) of each Python function of ``min_lines`` to ``max_lines``
    lines in ``text``, found by indentation: a ``def`` line and the lines indented more than it (trailing blank
    lines not counted); the body starts at the ``def``'s indentation and ends at its last line's end."""
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    found = []
    for index, line in enumerate(lines):
        stripped = line.lstrip()
        if not stripped.startswith("def "):
            continue
        indent = len(line) - len(stripped)
        end = index + 1
        while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
            end += 1
        while end > index + 1 and not lines[end - 1].strip():
            end -= 1
        if min_lines <= end - index <= max_lines:
            found.append((index, stripped[4:].split("(", 1)[0], offsets[index] + indent, offsets[end] - 1))
    return found
