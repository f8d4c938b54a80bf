"""Where the cut benches cut, and what they check, per language.

* :func:`parses`: whether a text is valid code of its language: Python's ``ast`` for Python, for the
  other languages no ERROR or MISSING node in the tree-sitter tree (:mod:`lsp_server.workspace.syntax`).
  Cuts are made only in files that parse, so a completion that "still parses" introduced no error.
* :func:`is_cut_line`: a code line a hole may start on: indented, not a comment, a string or a line
  that starts with a closing bracket.
* :func:`source_documents`: the files of the corpora that parse, as documents with their language id.
"""

from __future__ import annotations

import ast
import platform
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from bench.corpus import corpus_files, corpus_names, language_of, stdlib_root
from bench.corpus_fetch import DEFAULT_CORPUS_DIR, provenance
from lsp_server.workspace.documents import Document
from lsp_server.workspace.syntax import error_count, parser_for

#: line starts that are not code to complete, per language family (comments, strings, closers)
_PYTHON_SKIP = ("#", '"', "'", ")", "]", "}")
_BRACE_SKIP = ("//", "/*", "*", "#", '"', "'", "`", ")", "]", "}")


def parses(text: str, language: str = "python") -> bool:
    """Whether ``text`` is valid code of ``language`` (an LSP language id): Python's ``ast``, else no
    ERROR or MISSING node in its tree-sitter tree.

    Raises:
        ValueError: no tree-sitter grammar for ``language``.
    """
    if language == "python":
        try:
            ast.parse(text)
        except (SyntaxError, ValueError):
            return False
        return True
    parser = parser_for(language)
    if parser is None:
        raise ValueError(f"no tree-sitter grammar for {language!r}")
    return error_count(parser, text) == 0


def first_line(text: str) -> str:
    """The first line of ``text``, trailing blanks removed."""
    return text.split("\n", 1)[0].rstrip()


def is_cut_line(line: str, language: str = "python") -> bool:
    """Whether a hole may start at ``line``'s indentation: an indented code line (spaces, or tabs outside
    Python) that is not a comment, a string or a closing bracket's line."""
    stripped = line.strip()
    indents = (" ",) if language == "python" else (" ", "\t")
    skip = _PYTHON_SKIP if language == "python" else _BRACE_SKIP
    return line.startswith(indents) and bool(stripped) and not stripped.startswith(skip)


def source_documents(corpus: str, corpus_dir: Path = DEFAULT_CORPUS_DIR, fetch_missing: bool = False,
                     ) -> list[Document]:
    """The files of the comma-separated ``corpus`` that parse, as documents (language id by extension),
    in corpus order then path order."""
    documents = []
    for name in corpus_names(corpus):
        for path in corpus_files(name, corpus_dir, fetch_missing):
            try:
                text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
            except (UnicodeDecodeError, OSError):
                continue
            language = language_of(path)
            if parses(text, language):
                documents.append(Document(path.as_uri(), text, 0, language))
    return documents


def describe(document: Document, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> dict:
    """``language``, ``package``, ``version`` and ``file`` of a corpus document (for every record): a
    2026-* corpus file by the manifest, an installed package's file by its distribution, a standard-library
    file as ``python`` at the interpreter's version; else the path alone."""
    path = Path(unquote(urlparse(document.uri).path))
    found = provenance(path, corpus_dir)
    if "package" not in found:
        found = _installed(path)
    return {"language": document.language_id, **found}


def _installed(path: Path) -> dict:
    """Package, version and file of a file in site-packages or the standard library."""
    parts = path.parts
    if "site-packages" in parts:
        rest = parts[parts.index("site-packages") + 1:]
        try:
            version = metadata.version(rest[0])
        except metadata.PackageNotFoundError:
            version = ""
        return {"package": rest[0], "version": version, "file": "/".join(rest)}
    try:
        return {"package": "python", "version": platform.python_version(),
                "file": path.relative_to(stdlib_root()).as_posix()}
    except ValueError:
        return {"file": str(path)}
