"""Next-edit rewrites that are not shown: one that undoes the user's latest edit, or drops most of the region.

A next-edit suggestion carries the user's edits through the region; one that puts a line the user just
changed back as it was (a reversal, counted as a failure in Zed's Zeta evaluation) works against the
user: a model that reads a new keyword argument as a typo "fixes" it. And one that leaves out most of
the region's lines, after an edit that deleted none, is a model that lost its place (the 1.5B, shown a
region that begins inside a docstring, wrote back its last 3 of 20 lines): accepted, it deletes code.
Such a rewrite is not shown (:func:`lsp_server.model.completer.rewrite` leaves the document unchanged).
"""

from __future__ import annotations

import re
from collections import Counter

from lsp_server.next_edit.formats import changed_lines

MIN_DROPPED_LINES = 4  # drops_region: fewer non-blank lines gone is never "most of the region"


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


def drops_region(old_text: str, new_text: str, diff: str) -> bool:
    """Whether replacing ``old_text`` with ``new_text`` leaves out most of its lines: the rewrite keeps at
    most half of the span's non-blank lines (at least ``MIN_DROPPED_LINES`` of them gone) while the
    user's latest edit (``diff``, "" for none) removed no more lines than it added."""
    removed, added = changed_lines(diff)
    if len(removed) > len(added):  # the user is deleting: a rewrite may carry that through
        return False
    old, new = sum(_line_counts(old_text).values()), sum(_line_counts(new_text).values())
    return old - new >= MIN_DROPPED_LINES and new * 2 <= old


def withholds(old_text: str, new_text: str, diff: str) -> bool:
    """Whether the rewrite is not shown: :func:`undoes_edit` or :func:`drops_region`."""
    return undoes_edit(old_text, new_text, diff) or drops_region(old_text, new_text, diff)
