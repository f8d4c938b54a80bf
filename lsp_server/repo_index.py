"""The repository index: the text of the workspace's source files, as draft sources and prompt context.

What is indexed, under each workspace folder:

* files not ignored by ``.gitignore`` (every ``.gitignore`` on the way down, with git's semantics,
  through pathspec), nor by the default excludes (``.git``, ``node_modules``, virtual environments,
  caches, build output), nor by the user's ``exclude`` patterns, and matching the user's ``include``
  patterns when there are any (gitignore-style patterns, relative to the folder);
* never a secret-looking file (``.env*``, ``*.pem``, ``*.key``, ``id_rsa*``, credential and token
  files, ``.ssh/``, ``.aws/``...), whatever the patterns say;
* only text: files over ``max_file_bytes``, with a NUL byte, or not UTF-8 are skipped.

The index keeps at most ``max_tokens`` tokens (estimated as characters / 4); past that, the files
least recently modified are dropped first. Texts are kept with ``\n`` line breaks. Open buffers take precedence over the disk: callers ask
:meth:`RepoIndex.text` only for files that are not open. Paths are absolute ``pathlib.Path`` objects.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from lsp_server.positions import to_model_text

log = logging.getLogger(__name__)

DEFAULT_EXCLUDES = (
    ".git/", ".hg/", ".svn/", "node_modules/", ".venv/", "venv/", "env/", ".env/", "virtualenv/",
    "__pycache__/", ".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".tox/", ".nox/", "*.egg-info/",
    "build/", "dist/", "out/", "target/", ".next/", ".cache/", ".gradle/", ".idea/", "coverage/",
    "*.min.js", "*.map", "*.lock", "package-lock.json",
)
SECRET_PATTERNS = (
    ".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",
    "*.crt", "*.cer", "*.der", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".ssh/", ".aws/", ".gnupg/",
    ".netrc", ".pgpass", ".npmrc", ".pypirc", ".htpasswd", "credentials", "credentials.*", "*credentials*.json",
    "*.secret", "*.secrets", "secrets.json", "secrets.y*ml", "secrets.toml", "client_secret*.json",
    "*token*.json", "service-account*.json", ".git-credentials", ".dockercfg", "*.kdbx",
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")


@dataclass(frozen=True)
class IndexConfig:
    """What the repository index takes in."""

    max_file_bytes: int = 1_000_000  # larger files are skipped
    max_tokens: int = 2_000_000  # memory budget, in estimated tokens (characters / 4)
    include: tuple[str, ...] = ()  # gitignore-style patterns; empty: everything not excluded
    exclude: tuple[str, ...] = ()  # gitignore-style patterns, on top of .gitignore and the defaults

    def __post_init__(self):
        if self.max_file_bytes < 1 or self.max_tokens < 0:
            raise ValueError("max_file_bytes must be >= 1 and max_tokens >= 0")


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


_SECRETS = _spec(SECRET_PATTERNS)
_DEFAULTS = _spec(DEFAULT_EXCLUDES)


def is_secret(relative: str) -> bool:
    """Whether a path (relative, ``/``-separated) looks like a secret; secret files are never read."""
    return _SECRETS.match_file(relative)


class RepoIndex:
    """Indexed text files under the workspace folders; thread-safe (the watcher updates it)."""

    def __init__(self, roots: list[Path], config: IndexConfig = IndexConfig()):
        self.roots = [Path(os.path.abspath(root)) for root in roots]
        self.config = config
        self._user_include = _spec(config.include) if config.include else None
        self._user_exclude = _spec(config.exclude)
        self._gitignores: dict[Path, pathspec.PathSpec] = {}  # directory -> its .gitignore
        self._files: dict[Path, IndexedFile] = {}
        self._tokens = 0
        self._lock = threading.Lock()
        self.skipped: dict[str, int] = {}  # reason -> count, for the log

    # Rules ------------------------------------------------------------------------------------

    def _root_of(self, path: Path) -> Path | None:
        for root in self.roots:
            if path == root or root in path.parents:
                return root
        return None

    def _load_gitignore(self, directory: Path) -> None:
        try:
            lines = (directory / ".gitignore").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            self._gitignores.pop(directory, None)
            return
        self._gitignores[directory] = _spec(lines)

    def ignored(self, path: Path, is_dir: bool = False) -> str | None:
        """Why ``path`` is not indexed (``"secret"``, ``"gitignore"``, ``"excluded"``, ``"outside"``), or None."""
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

    def _read(self, path: Path) -> tuple[str | None, str]:
        try:
            stat = path.stat()
            if stat.st_size > self.config.max_file_bytes:
                return None, "large"
            data = path.read_bytes()
        except OSError:
            return None, "unreadable"
        if b"\0" in data[:8192]:
            return None, "binary"
        try:
            return to_model_text(data.decode("utf-8")), ""
        except UnicodeDecodeError:
            return None, "undecodable"

    # Building and updating --------------------------------------------------------------------

    def scan(self, progress: Callable[[int, str], None] | None = None) -> int:
        """Walk every root and index what the rules allow; returns the number of files indexed.

        ``progress(count, path)`` is called every 100 files seen.
        """
        seen = 0
        for root in self.roots:
            for dirpath, dirnames, filenames in os.walk(root):
                directory = Path(dirpath)
                if ".gitignore" in filenames:
                    self._load_gitignore(directory)
                dirnames[:] = sorted(d for d in dirnames if self.ignored(directory / d, is_dir=True) is None)
                for name in sorted(filenames):
                    seen += 1
                    if progress is not None and seen % 100 == 0:
                        progress(seen, str(directory / name))
                    self.update(directory / name)
        return len(self._files)

    def update(self, path: Path) -> bool:
        """(Re)index one file after it was created or modified; returns whether it is indexed now."""
        path = Path(os.path.abspath(path))
        if path.name == ".gitignore":
            self._load_gitignore(path.parent)
        reason = self.ignored(path)
        if reason is None and any(self.ignored(parent, is_dir=True) for parent in path.parents
                                  if self._root_of(parent) is not None and parent != self._root_of(path)):
            reason = "excluded"
        text = None
        if reason is None:
            text, reason = self._read(path)
        if text is None:
            self.skipped[reason] = self.skipped.get(reason, 0) + 1
            self.remove(path)
            return False
        try:
            mtime = path.stat().st_mtime_ns
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
        self.remove(source)
        destination = Path(os.path.abspath(destination))
        if destination.is_dir():
            for dirpath, _, filenames in os.walk(destination):
                for name in filenames:
                    self.update(Path(dirpath) / name)
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
