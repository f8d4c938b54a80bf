"""Whether a next-edit rewrite undoes the user's latest edit.

A next-edit suggestion carries the user's edits through the region; one that puts a line the user just
changed back as it was (a reversal, counted as a failure in Zed's Zeta evaluation) works against the
user: a model that reads a new keyword argument as a typo "fixes" it. Such a rewrite is not shown
(:func:`lsp_server.completer.rewrite` leaves the document unchanged), since the rest of it was written
by a model that read the edit the other way.
"""

from __future__ import annotations

import re
from collections import Counter


def changed_lines(diff: str) -> tuple[list[str], list[str]]:
    """(removed lines, added lines) of a unified diff, without their ``-`` / ``+`` and headers."""
    removed, added = [], []
    for line in diff.split("\n"):
        if line.startswith(("---", "+++", "@@")):
            continue
        if line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
    return removed, added


def _line_counts(text: str) -> Counter:
    return Counter(line.rstrip() for line in re.split(r"\r\n|\r|\n", text) if line.strip())


def undoes_edit(old_text: str, new_text: str, diff: str) -> bool:
    """Whether replacing ``old_text`` (a span of the document as the user left it) with ``new_text``
    undoes the edit ``diff`` (a unified diff of the user's latest edit, model text).

    An edit that changed lines is undone when a line it added is there fewer times afterwards and a line
    it removed more times; an edit that only added lines, when the rewrite is the span without them and
    otherwise the same lines (one that also changes an added line may be finishing it). A deletion
    cannot be told from a line the rewrite writes anew, so it never counts as undone.
    Lines are compared without their trailing white space; blank lines never count. Any line breaks.
    """
    removed, added = changed_lines(diff)
    removed_keys = {line.rstrip() for line in removed if line.strip()}
    added_keys = {line.rstrip() for line in added if line.strip()}
    removed_keys, added_keys = removed_keys - added_keys, added_keys - removed_keys
    old, new = _line_counts(old_text), _line_counts(new_text)
    if removed_keys and added_keys:
        return any(new[key] < old[key] for key in added_keys) and any(new[key] > old[key] for key in removed_keys)
    if removed_keys or not any(old[key] for key in added_keys):
        return False
    return new == Counter({key: count for key, count in old.items() if key not in added_keys})
