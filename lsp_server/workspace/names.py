"""Short names of documents for log lines, trace lines and draft-source statistics.

A name is the path relative to the workspace folder that holds the file (with the folder's name first
when the workspace has several), so it is short, stable and unique within the workspace: basenames are
not (every package has an ``__init__.py``). A file outside every folder (a scratch file, a workspace-less
client) is named by its file name; a URI of another scheme by that scheme and its last segment
(``fugitive:app.py``: such URIs hold paths too), except ``untitled:`` ones, shown as they are. No name is an absolute path:
those appear only at the verbose trace level, with the code text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pygls import uris


def file_name(uri: str) -> str:
    """The last segment of ``uri`` (its file name): the short name without workspace folders."""
    return uri.rsplit("/", 1)[-1]


def short_name(uri: str, roots: tuple[Path, ...] = ()) -> str:
    """The short name of ``uri`` (see the module docstring); ``roots`` are the workspace folders."""
    if not uri.startswith("file:"):
        scheme, _, rest = uri.partition(":")
        if scheme == "untitled" or not rest:
            return uri
        return f"{scheme}:{file_name(rest.split('#', 1)[0].split('?', 1)[0])}"  # e.g. a git buffer's path
    path = uris.to_fs_path(uri)
    if not path:
        return file_name(uri)
    path = Path(path)
    for root in roots:
        if path.is_relative_to(root):
            relative = path.relative_to(root).as_posix()
            return f"{root.name}/{relative}" if len(roots) > 1 else relative
    return path.name


def display_path(path: Path) -> str:
    """A directory as a log line shows it: under the home directory as ``~/...`` (the user's name stays out)."""
    home = Path.home()
    if path == home:
        return "~"
    return f"~/{path.relative_to(home).as_posix()}" if path.is_relative_to(home) else str(path)


class DisplayNames:
    """:func:`short_name` under the current workspace folders (replaced when they change; read from any
    thread: the roots are one immutable tuple)."""

    def __init__(self, roots: Iterable[Path] = ()):
        self.roots: tuple[Path, ...] = tuple(roots)

    def set_roots(self, roots: Iterable[Path]) -> None:
        self.roots = tuple(Path(root) for root in roots)

    def __call__(self, uri: str) -> str:
        return short_name(uri, self.roots)
