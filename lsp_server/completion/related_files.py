"""Related files: which other files' text goes into the prompt and into the n-gram drafter.

Candidates come in order of likely use: the other open buffers, most recently edited or opened
first, then indexed repository files. Each is scored by Jaccard similarity between its identifier
set and that of the text around the cursor (the approach of "jaccard snippets" in editor completion
tools), and from the best files the best window of lines is kept as a snippet, within a character
budget. The same files, whole, become n-gram draft sources.

An open buffer whose file looks secret (``.env``, keys, credentials; by its name or its resolved
path, :func:`lsp_server.workspace.file_rules.uri_looks_secret`) is never context for another document:
:func:`context_documents` is the one gate, applied by the completer before both the prompt and the
n-gram sources see the open buffers. (The repository index never reads such files.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pygls import uris

from lsp_server.workspace.documents import Document
from lsp_server.workspace.file_rules import uri_looks_secret
from lsp_server.workspace.repo_index import RepoIndex, identifiers

WINDOW_LINES = 30  # lines per snippet window
WINDOW_STRIDE = 15
RECENT_BUFFERS = 3  # recent open buffers always considered first
MAX_REPO_FILES = 4  # repository files taken as snippets / draft sources at most
MAX_SOURCE_CHARS = 400_000  # texts larger than this are neither snippets nor n-gram draft sources
QUERY_LINES = (40, 10)  # lines before and after the cursor whose identifiers find related files


@dataclass(frozen=True)
class Candidate:
    """Another file's text: an open buffer or an indexed file."""

    uri: str
    label: str  # path as shown to the model (relative to the workspace folder when known)
    text: str
    version: int  # buffer version or file mtime: a change makes a new n-gram index


@dataclass(frozen=True)
class Snippet:
    label: str
    text: str
    score: float


def context_documents(documents: list[Document]) -> list[Document]:
    """The open buffers that may be context (prompt snippets, n-gram draft sources) for another
    document: those whose URI does not look secret, in the given order."""
    return [document for document in documents if not uri_looks_secret(document.uri)]


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def best_window(text: str, query: frozenset[str]) -> tuple[float, str]:
    """The most similar window of ``WINDOW_LINES`` lines of ``text`` and its score."""
    lines = text.split("\n")
    best = (0.0, "")
    for start in range(0, max(1, len(lines) - WINDOW_LINES + WINDOW_STRIDE), WINDOW_STRIDE):
        window = "\n".join(lines[start:start + WINDOW_LINES])
        score = jaccard(identifiers(window), query)
        if score > best[0]:
            best = (score, window)
    return best


def candidates(recent_buffers: list[Candidate], index: RepoIndex | None, query: frozenset[str],
               open_paths: set[Path]) -> list[Candidate]:
    """Recent buffers first, then the repository files most similar to ``query`` (not open ones:
    an open buffer's text takes precedence over the disk)."""
    chosen = list(recent_buffers)
    if index is not None:
        scored = []
        for entry in index.entries():
            if entry.path in open_paths:
                continue
            score = jaccard(entry.identifiers, query)
            if score > 0:
                scored.append((score, entry))
        scored.sort(key=lambda item: -item[0])
        for _, entry in scored[:MAX_REPO_FILES]:
            chosen.append(Candidate(entry.path.as_uri(), index.relative(entry.path), entry.text, entry.mtime_ns))
    return chosen


def select_snippets(pool: list[Candidate], query: frozenset[str], budget_chars: int) -> list[Snippet]:
    """Best windows of the candidates, best first, until ``budget_chars`` is used."""
    if budget_chars <= 0:
        return []
    windows = []
    for candidate in pool:
        score, window = best_window(candidate.text, query)
        if score > 0 and window.strip():
            windows.append(Snippet(candidate.label, window, score))
    windows.sort(key=lambda s: -s.score)
    out, used = [], 0
    for snippet in windows:
        if used + len(snippet.text) > budget_chars:
            continue
        out.append(snippet)
        used += len(snippet.text)
    return out


def _path(uri: str) -> Path | None:
    path = uris.to_fs_path(uri) if uri.startswith("file:") else None
    return Path(path) if path else None


#: The usual file extension of a language (LSP language id), for a buffer whose name has none.
_EXTENSIONS = {"python": ".py", "javascript": ".js", "javascriptreact": ".jsx", "typescript": ".ts",
               "typescriptreact": ".tsx", "go": ".go", "rust": ".rs", "java": ".java", "c": ".c", "cpp": ".cpp",
               "csharp": ".cs", "kotlin": ".kt", "swift": ".swift", "ruby": ".rb", "php": ".php", "shellscript": ".sh"}


def label(repo: RepoIndex | None, uri: str, language_id: str = "") -> str:
    """A file's path as shown to the model: relative to its workspace folder when indexed, else its name.
    An untitled buffer (``untitled:Untitled-1``) is named with its language's extension (``Untitled-1.ts``):
    the path is what tells the model the language, and a new buffer has little text that does."""
    path = _path(uri)
    if repo is not None and path is not None:
        return repo.relative(path)
    name = uri.rsplit("/", 1)[-1]
    if not uri.startswith("untitled:"):
        return name
    name = name.removeprefix("untitled:")
    return name + _EXTENSIONS.get(language_id, "") if "." not in name else name


def _query(text: str, offset: int) -> frozenset[str]:
    """Identifiers of the ``QUERY_LINES`` lines around ``offset``, found without splitting the whole text."""
    start = offset
    for _ in range(QUERY_LINES[0]):
        start = text.rfind("\n", 0, start)
        if start <= 0:
            start = 0
            break
    end = offset
    for _ in range(QUERY_LINES[1]):
        end = text.find("\n", end + 1)
        if end == -1:
            end = len(text)
            break
    return identifiers(text[start:offset] + "\n" + text[offset:end])


def related_files(document: Document, offset: int, other_documents: list[Document], repo: RepoIndex | None,
                  snippet_chars: int) -> tuple[list[Candidate], list[Snippet]]:
    """(candidate files, snippets of at most ``snippet_chars`` characters; 0: none) for a cursor at
    ``offset`` (code points): the recent open buffers, then similar repository files."""
    query = _query(document.text, offset)
    recent = [Candidate(d.uri, label(repo, d.uri, d.language_id), d.model_text, d.version)
              for d in other_documents[:RECENT_BUFFERS] if len(d.text) <= MAX_SOURCE_CHARS]
    open_paths = {p for p in (_path(d.uri) for d in [document, *other_documents]) if p is not None}
    pool = candidates(recent, repo, query, open_paths)
    return pool, select_snippets(pool, query, snippet_chars)
