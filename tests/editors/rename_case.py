"""A next edit both editor clients are tested on: the user renamed a parameter on its definition line,
and the stub server's answer carries the rename through the function. The emoji (2 UTF-16 code units,
4 bytes) before some occurrences checks the offset encoding."""

from __future__ import annotations

# The user renamed the parameter `width` to `w` on the definition line; the rest must follow. The
# emoji (2 UTF-16 code units, 4 bytes) before some occurrences checks the offset encoding.
EDITED = '''\
def area(w, height):
    """Area of a 🙂 rectangle."""
    label = "🙂"; total = width * height
    if width < 0 or width > 99:
        raise ValueError(label, width)
    return total
'''
OLD, NEW = "width", "w"


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def rename_edits(text: str) -> list[dict]:
    """LSP TextEdits (UTF-16 positions) renaming every ``OLD`` after the first line to ``NEW``."""
    edits = []
    for row, line in enumerate(text.split("\n")[1:], start=1):
        start = line.find(OLD)
        while start != -1:
            character = utf16_units(line[:start])
            edits.append({"range": {"start": {"line": row, "character": character},
                                    "end": {"line": row, "character": character + len(OLD)}}, "newText": NEW})
            start = line.find(OLD, start + len(OLD))
    return edits


EXPECTED = "\n".join(EDITED.split("\n")[:1] + [line.replace(OLD, NEW) for line in EDITED.split("\n")[1:]])
ANSWER = {"edits": rename_edits(EDITED), "range": {"start": {"line": 0, "character": 0},
                                                    "end": {"line": 6, "character": 0}},
          "text": EXPECTED}
