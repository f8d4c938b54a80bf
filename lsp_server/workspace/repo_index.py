"""The repository index: the text of the workspace's source files, as draft sources and prompt context.

What is indexed, under each workspace folder:

* files not ignored by ``.gitignore`` (every ``.gitignore`` on the way down, with git's semantics,
  through pathspec), nor by the default excludes (``.git``, ``node_modules``, virtual environments,
  caches, build output), nor by the user's ``exclude`` patterns, and matching the user's ``include``
  patterns when there are any (gitignore-style patterns, relative to the folder);
* never a secret-looking file (``.env*``, ``*.pem``, ``*.key``, ``id_rsa*``, credential and token
  files, ``.ssh/``, ``.aws/``...), whatever the patterns say;
* a symlink is judged by its name and by its target (``realpath``): a target outside every folder,
  or one the rules above skip, is not indexed; directories are never entered through a symlink, so
  links cannot lead the scan out of the folders or round a loop;
* only regular files, read without blocking and never past ``max_file_bytes``
  (:func:`lsp_server.workspace.file_rules.read_regular_file`); FIFOs, sockets and devices are skipped
  (``special``);
* only text: files over ``max_file_bytes``, with a NUL byte, or not UTF-8 are skipped.

A scan stops after ``max_entries`` directory entries (the index is then ``partial``). One file that
fails is counted (``error``) and skipped; it never drops the index. The watcher's updates go through
the same rules (:meth:`RepoIndex.update`).

The index keeps at most ``max_tokens`` tokens (estimated as characters / 4); past that, the files
least recently modified are dropped first. Texts are kept with ``\n`` line breaks. Open buffers take precedence over the disk: callers ask
:meth:`RepoIndex.text` only for files that are not open. Paths are absolute ``pathlib.Path`` objects.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from lsp_server.workspace.file_rules import UNREADABLE, is_secret, read_regular_file
from lsp_server.workspace.positions import to_model_text

log = logging.getLogger(__name__)

#: A ``.gitignore`` is read up to this size (or ``max_file_bytes`` if larger); a larger one excludes its directory.
GITIGNORE_MAX_BYTES = 16 * 2**20

DEFAULT_EXCLUDES = (
    ".git/", ".hg/", ".svn/", "node_modules/", ".venv/", "venv/", "env/", ".env/", "virtualenv/",
    "__pycache__/", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".tox/", ".nox/", "*.egg-info/",
    "build/", "dist/", "out/", "target/", ".next/", ".cache/", ".gradle/", ".idea/", "coverage/",
    "*.min.js", "*.map", "*.lock", "package-lock.json",
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


@dataclass(frozen=True)
class IndexConfig:
    """What the repository index takes in."""

    max_file_bytes: int = 1_000_000  # larger files are skipped
    max_tokens: int = 2_000_000  # memory budget, in estimated tokens (characters / 4)
    include: tuple[str, ...] = ()  # gitignore-style patterns; empty: everything not excluded
    exclude: tuple[str, ...] = ()  # gitignore-style patterns, on top of .gitignore and the defaults
    max_entries: int = 200_000  # directory entries one scan looks at, at most (files and directories)

    def __post_init__(self):
        if self.max_file_bytes < 1 or self.max_tokens < 0 or self.max_entries < 1:
            raise ValueError("max_file_bytes and max_entries must be >= 1 and max_tokens >= 0")


@dataclass
class IndexedFile:
    path: Path
    text: str
    mtime_ns: int
    identifiers: frozenset[str] = field(default_factory=frozenset)  # for similarity search

    @property
    def tokens(self) -> int:
        return len(self.text) // 4 + 1


def identifiers(text: str) -> frozenset[str]:
    """Identifier-like words of 3+ characters: the bag compared by Jaccard similarity."""
    return frozenset(_IDENTIFIER.findall(text))


def _spec(lines) -> pathspec.PathSpec:
    return pathspec.GitIgnoreSpec.from_lines(lines)


_DEFAULTS = _spec(DEFAULT_EXCLUDES)


def _is_directory(entry: os.DirEntry) -> bool:
    """Whether a directory entry is a directory itself (a symlink to one is not)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


class RepoIndex:
    """Indexed text files under the workspace folders; thread-safe (the watcher updates it)."""

    def __init__(self, roots: list[Path], config: IndexConfig = IndexConfig()):
        self.roots = [Path(os.path.abspath(root)) for root in roots]
        self._real_roots = [Path(os.path.realpath(root)) for root in self.roots]  # what links are judged by
        self.config = config
        self._user_include = _spec(config.include) if config.include else None
        self._user_exclude = _spec(config.exclude)
        self._gitignores: dict[Path, pathspec.PathSpec] = {}  # directory -> its .gitignore
        self._files: dict[Path, IndexedFile] = {}
        self._tokens = 0
        self._lock = threading.Lock()
        self.skipped: dict[str, int] = {}  # reason -> count, for the log
        self.partial = False  # a scan stopped at max_entries

    # Rules ------------------------------------------------------------------------------------

    def _root_of(self, path: Path) -> Path | None:
        for root in self.roots:
            if path == root or root in path.parents:
                return root
        return None

    def _target(self, path: Path) -> tuple[Path | None, Path]:
        """(``path`` resolved, then named under the workspace folder that holds it, or ``None`` when it is
        outside every folder; the resolved path itself)."""
        real = Path(os.path.realpath(path))
        for root, real_root in zip(self.roots, self._real_roots):
            if real == real_root or real_root in real.parents:
                return root / real.relative_to(real_root), real
        return None, real

    def _load_gitignore(self, directory: Path) -> None:
        """Read ``directory/.gitignore``. One that exists but cannot be read (too large, not a regular
        file, a link out of the folder...) excludes the whole directory: what it would ignore is unknown."""
        path = directory / ".gitignore"
        if not os.path.lexists(path):
            self._gitignores.pop(directory, None)
            return
        target, real = self._target(path)
        data, reason = None, "outside"
        if target is not None and self.ignored(target) != "secret":
            data, reason = read_regular_file(real, max(self.config.max_file_bytes, GITIGNORE_MAX_BYTES))
        if data is None:
            log.warning("cannot read %s (%s): not indexing %s, since what it ignores is unknown", path,
                        reason or "secret", directory)
            self._count("gitignore-unreadable")
            self._gitignores[directory] = _spec(["*"])
            return
        self._gitignores[directory] = _spec(data.decode("utf-8", errors="replace").splitlines())

    def ignored(self, path: Path, is_dir: bool = False) -> str | None:
        """Why ``path`` is not indexed (``"secret"``, ``"gitignore"``, ``"excluded"``, ``"outside"``), or None.
        Judges the path as named; :meth:`update` judges a link's target too."""
        root = self._root_of(path)
        if root is None:
            return "outside"
        relative = path.relative_to(root).as_posix() + ("/" if is_dir else "")
        if relative in ("", "/"):
            return None
        if is_secret(relative):
            return "secret"
        if _DEFAULTS.match_file(relative) or self._user_exclude.match_file(relative):
            return "excluded"
        for directory, spec in self._gitignores.items():
            if directory == path or directory not in path.parents:
                continue
            inner = path.relative_to(directory).as_posix() + ("/" if is_dir else "")
            if spec.match_file(inner):
                return "gitignore"
        if not is_dir and self._user_include is not None and not self._user_include.match_file(relative):
            return "excluded"
        return None

    def _ignored_here(self, path: Path) -> str | None:
        """:meth:`ignored` for a file, or ``"excluded"`` when a directory above it (inside its folder) is."""
        reason = self.ignored(path)
        root = self._root_of(path)
        if reason is None and any(self.ignored(parent, is_dir=True) for parent in path.parents
                                  if parent != root and root in parent.parents):
            reason = "excluded"
        return reason

    def _why_skipped(self, path: Path) -> tuple[str | None, Path]:
        """(why ``path`` is not indexed, or ``None``; its resolved path). Judged on the name and, for a
        link, on the target: outside every folder, or skipped by the rules where it lies."""
        reason = self._ignored_here(path)
        if reason is not None:
            return reason, path
        target, real = self._target(path)
        if target is None:
            return "outside", real
        return (self._ignored_here(target) if target != path else None), real

    def _read(self, real: Path) -> tuple[str | None, str]:
        """(text, "") or (None, why not: special, large, unreadable, binary, undecodable)."""
        data, reason = read_regular_file(real, self.config.max_file_bytes, refuse_hard_links=True)
        if data is None:
            return None, reason
        if b"\0" in data[:8192]:
            return None, "binary"
        try:
            return to_model_text(data.decode("utf-8")), ""
        except UnicodeDecodeError:
            return None, "undecodable"

    # Building and updating --------------------------------------------------------------------

    def _count(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def _walk(self, top: Path, budget: int) -> Iterator[Path]:
        """Every entry under directory ``top`` that is not a directory (links included), in name order
        per directory; never enters a symlinked directory or an ignored one. Looks at ``budget``
        directory entries at most, then sets ``partial`` and stops."""
        stack, seen = [top], 0
        while stack:
            directory = stack.pop()
            try:
                with os.scandir(directory) as listing:
                    entries = list(itertools.islice(listing, budget - seen + 1))
            except OSError:
                self._count(UNREADABLE)
                continue
            seen += len(entries)
            if seen > budget:
                self.partial, entries = True, entries[: len(entries) - (seen - budget)]
            if any(entry.name == ".gitignore" for entry in entries):
                self._load_gitignore(directory)
            subdirectories = []
            for entry in sorted(entries, key=lambda e: e.name):
                if _is_directory(entry):
                    if self.ignored(directory / entry.name, is_dir=True) is None:
                        subdirectories.append(directory / entry.name)
                else:
                    yield directory / entry.name
            if self.partial:
                return
            stack.extend(reversed(subdirectories))

    def scan(self, progress: Callable[[int, str], None] | None = None) -> int:
        """Walk every root and index what the rules allow; returns the number of files indexed.

        ``progress(count, path)`` is called every 100 files seen. Stops after ``max_entries`` directory
        entries in all (``partial`` is then set and a warning logged).
        """
        seen = 0
        for root in self.roots:
            for path in self._walk(root, self.config.max_entries):
                seen += 1
                if progress is not None and seen % 100 == 0:
                    progress(seen, str(path))
                self._update_counting_errors(path)
            if self.partial:
                log.warning("indexing stopped after %d directory entries: the index is partial",
                            self.config.max_entries)
                break
        return len(self._files)

    def _update_counting_errors(self, path: Path) -> None:
        try:
            self.update(path)
        except Exception as exc:  # noqa: BLE001 - one file never drops the whole index
            self._count("error")
            log.warning("indexing %s failed: %s: %s", path, type(exc).__name__, exc)

    def update(self, path: Path) -> bool:
        """(Re)index one file after it was created or modified; returns whether it is indexed now."""
        path = Path(os.path.abspath(path))
        if path.name == ".gitignore":
            self._load_gitignore(path.parent)
        reason, real = self._why_skipped(path)
        text = None
        if reason is None:
            text, reason = self._read(real)
        if text is None:
            self._count(reason)
            self.remove(path)
            return False
        try:
            mtime = os.stat(real).st_mtime_ns
        except OSError:
            mtime = 0
        entry = IndexedFile(path, text, mtime, identifiers(text))
        with self._lock:
            old = self._files.pop(path, None)
            self._tokens -= old.tokens if old else 0
            self._files[path] = entry
            self._tokens += entry.tokens
            self._evict()
        return path in self._files

    def remove(self, path: Path) -> None:
        """Forget a deleted file (or a whole deleted directory)."""
        path = Path(os.path.abspath(path))
        with self._lock:
            for key in [k for k in self._files if k == path or path in k.parents]:
                self._tokens -= self._files.pop(key).tokens

    def move(self, source: Path, destination: Path) -> None:
        """Follow a rename: forget ``source``; index ``destination`` (a file, or a directory's files,
        never entering a symlinked directory, within ``max_entries``)."""
        self.remove(source)
        destination = Path(os.path.abspath(destination))
        if destination.is_dir() and not destination.is_symlink():
            for path in self._walk(destination, self.config.max_entries):
                self._update_counting_errors(path)
        else:
            self.update(destination)

    def _evict(self) -> None:
        if self._tokens <= self.config.max_tokens:
            return
        for entry in sorted(self._files.values(), key=lambda e: e.mtime_ns):
            if self._tokens <= self.config.max_tokens:
                break
            self._tokens -= self._files.pop(entry.path).tokens

    # Queries ----------------------------------------------------------------------------------

    @property
    def tokens(self) -> int:
        return self._tokens

    def paths(self) -> list[Path]:
        with self._lock:
            return list(self._files)

    def text(self, path: Path) -> str | None:
        entry = self._files.get(Path(os.path.abspath(path)))
        return entry.text if entry else None

    def entries(self) -> list[IndexedFile]:
        with self._lock:
            return list(self._files.values())

    def repo_name(self) -> str:
        return self.roots[0].name if self.roots else ""

    def relative(self, path: Path) -> str:
        root = self._root_of(path)
        return path.relative_to(root).as_posix() if root else path.name
