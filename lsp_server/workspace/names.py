"""Short names of documents for log lines, trace lines and draft-source statistics.

A name is the path relative to the workspace folder that holds the file (with the folder's name first
when the workspace has several), so it is short, stable and unique within the workspace: basenames are
not (every package has an ``__init__.py``). A file outside every folder is named by its parent directory
and its name; a URI of another scheme (``untitled:``) is shown as it is. No name is an absolute path:
those appear only at the verbose trace level, with the code text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from pygls import uris


def short_name(uri: str, roots: tuple[Path, ...] = ()) -> str:
    """The short name of ``uri`` (see the module docstring); ``roots`` are the workspace folders."""
    if not uri.startswith("file:"):
        return uri
    path = uris.to_fs_path(uri)
    if not path:
        return uri.rsplit("/", 1)[-1]
    path = Path(path)
    for root in roots:
        if path.is_relative_to(root):
            relative = path.relative_to(root).as_posix()
            return f"{root.name}/{relative}" if len(roots) > 1 else relative
    return PurePosixPath(*path.parts[-2:]).as_posix() if len(path.parts) > 2 else path.name


class DisplayNames:
    """:func:`short_name` under the current workspace folders (replaced when they change; read from any
    thread: the roots are one immutable tuple)."""

    def __init__(self, roots: Iterable[Path] = ()):
        self.roots: tuple[Path, ...] = tuple(roots)

    def set_roots(self, roots: Iterable[Path]) -> None:
        self.roots = tuple(Path(root) for root in roots)

    def __call__(self, uri: str) -> str:
        return short_name(uri, self.roots)
