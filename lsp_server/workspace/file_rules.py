"""Which files the server may read, and how: secret-looking paths, the directories it never indexes
wholesale, and a bounded, non-blocking read of regular files only.

* A path is judged by its own name and by what it resolves to (``os.path.realpath``): a link named
  ``notes.txt`` that points at ``.env`` looks secret, and so does a link named ``.env``.
* Only regular files are read: ``os.stat`` after resolving must say ``S_ISREG``, so FIFOs, sockets,
  devices and links to them are skipped without being opened; the file is then opened with
  ``O_NONBLOCK`` and checked again (``fstat``), so one swapped in meanwhile cannot block or be read.
* At most ``limit + 1`` bytes are read, whatever ``st_size`` says (``/proc``-like files report 0).
* A home directory, a parent of it (``/`` included) and the temporary directory itself are never
  indexed as workspace roots: editors without a project root would otherwise hand the server the
  whole of ``/tmp`` or ``$HOME``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pathspec
from pygls import uris

SECRET_PATTERNS = (
    ".env", ".env.*", "*.env", ".envrc", "*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore",
    "*.crt", "*.cer", "*.der", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*", ".ssh/", ".aws/", ".gnupg/",
    ".netrc", ".pgpass", ".npmrc", ".pypirc", ".htpasswd", "credentials", "credentials.*", "*credentials*.json",
    "*.secret", "*.secrets", "secrets.json", "secrets.y*ml", "secrets.toml", "client_secret*.json",
    "*token*.json", "service-account*.json", ".git-credentials", ".dockercfg", "*.kdbx",
)
_SECRETS = pathspec.GitIgnoreSpec.from_lines(SECRET_PATTERNS)
#: Suffixes of backup, swap and temporary copies: a copy of a secret is a secret (see :func:`_unbackup`).
_BACKUP_SUFFIXES = frozenset({"bak", "backup", "orig", "old", "save", "sav", "swp", "swo", "swn", "tmp", "temp",
                              "copy", "prev", "rej", "dpkg-old", "dpkg-dist", "rpmsave", "rpmnew"})
_READ_CHUNK = 1 << 20  # bytes per read() call
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
               | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0))

# Why a file was not read (the reasons the index counts).
SPECIAL = "special"  # not a regular file: FIFO, socket, device, directory (or a link to one)
LARGE = "large"  # over the size limit
UNREADABLE = "unreadable"  # missing, no permission, a symlink loop, or another OSError
HARD_LINK = "hardlink"  # a file with several names, one of which may be a secret's (is_hard_linked)


def _unbackup(name: str) -> str:
    """A file name without the marks editors and tools add to copies of a file: ``.env~``,
    ``server.key.bak``, ``.env.swp``, ``#.env#``, ``.#.env`` -> ``.env``, ``server.key``."""
    while True:
        stripped = name.removeprefix(".#")
        if len(stripped) > 2 and stripped.startswith("#") and stripped.endswith("#"):
            stripped = stripped[1:-1]
        stripped = stripped.rstrip("~")
        root, dot, suffix = stripped.rpartition(".")
        if dot and root and suffix.lower() in _BACKUP_SUFFIXES:
            stripped = root
        if stripped == name or not stripped:
            return name
        name = stripped


def is_secret(relative: str) -> bool:
    """Whether a path (relative, ``/``-separated) looks like a secret, or a backup or swap copy of one;
    secret files are never read."""
    if _SECRETS.match_file(relative):
        return True
    head, _, name = relative.rstrip("/").rpartition("/")
    original = _unbackup(name)
    return original != name and _SECRETS.match_file(f"{head}/{original}" if head else original)


def looks_secret(path: str | os.PathLike) -> bool:
    """Whether a local path looks secret by any of its components, as named or once resolved.

    Stricter than :func:`is_secret` on a path relative to a workspace folder: every directory above
    the file counts too (a file under ``~/.ssh/`` is secret wherever the workspace is), and so does a
    hard-linked file (:func:`is_hard_linked`). A path that cannot be a local path (a NUL in it) counts
    as secret: it is never read.
    """
    if "\0" in os.fspath(path):
        return True
    named = Path(os.path.abspath(path))
    resolved = Path(os.path.realpath(named))
    return any(is_secret(p.as_posix().lstrip("/")) for p in {named, resolved}) or is_hard_linked(resolved)


def is_hard_linked(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a regular file with more than one name (``st_nlink > 1``): one of its other
    names may be a secret's (a hard link to ``.env`` named ``config.txt``), and those names cannot be
    found without searching the whole file system, so such a file is treated as a secret."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink > 1


def uri_looks_secret(uri: str) -> bool:
    """Whether a document URI names a secret-looking file: a ``file:`` URI by its local path (as named
    and resolved, :func:`looks_secret`), any other scheme (``untitled:.env``) by its path alone."""
    try:
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            local = uris.to_fs_path(uri)
            return looks_secret(local) if local else False
        return is_secret(unquote(parsed.path or parsed.netloc).lstrip("/") or "-")
    except ValueError:  # not a URI that names anything readable: never context, never read
        return True


def read_regular_file(path: str | os.PathLike, limit: int, refuse_hard_links: bool = False) -> tuple[bytes | None, str]:
    """The bytes of a regular file of at most ``limit`` bytes: ``(data, "")``, or ``(None, reason)``
    with reason :data:`SPECIAL`, :data:`LARGE`, :data:`UNREADABLE` or (with ``refuse_hard_links``)
    :data:`HARD_LINK`. Never blocks, never reads more than ``limit + 1`` bytes.

    Args:
        path: the resolved path (``os.path.realpath``); a symlink in its last component is refused
            (``O_NOFOLLOW``) as unreadable, so a link swapped in after resolving is not followed.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None, SPECIAL  # never opened: opening some devices has effects
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None, UNREADABLE
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, SPECIAL
        if refuse_hard_links and info.st_nlink > 1:
            return None, HARD_LINK  # see is_hard_linked
        if info.st_size > limit:
            return None, LARGE
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(_READ_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None, UNREADABLE
    finally:
        os.close(fd)
    return (None, LARGE) if size > limit else (b"".join(chunks), "")


_SYSTEM_TREES = ("/proc", "/sys", "/dev", "/run")  # pseudo file systems: files that never end, devices


def _temporary_directories() -> set[Path]:
    found = {Path(os.path.realpath(tempfile.gettempdir()))}
    if os.name == "posix":
        found |= {Path(os.path.realpath(p)) for p in ("/tmp", "/var/tmp", "/dev/shm")}
    return found


def refused_root(path: str | os.PathLike) -> str | None:
    """Why ``path`` is never indexed as a workspace root (a phrase for the log), or ``None`` when it may be.

    Refused, judged on the resolved path: the filesystem root, the user's home directory and every
    directory above it, the temporary directory itself (its subdirectories are fine), and ``/proc``,
    ``/sys``, ``/dev``, ``/run`` and everything under them.
    """
    real = Path(os.path.realpath(path))
    if real == Path(real.anchor):
        return "the filesystem root"
    if os.name == "posix" and any(real == Path(p) or Path(p) in real.parents for p in _SYSTEM_TREES):
        return "a system directory of devices or kernel state"
    if real in _temporary_directories():
        return "the temporary directory"
    try:
        home = Path(os.path.realpath(Path.home()))
    except (RuntimeError, KeyError):  # no HOME and no password entry
        home = None
    if home is not None and real == home:
        return "your home directory"
    if home is not None and real in home.parents:
        return "a parent of your home directory"
    return None
