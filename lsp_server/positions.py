"""The one module that owns coordinates: LSP positions <-> Python string offsets.

LSP positions are (line, character) with ``character`` counted in the negotiated position encoding
(UTF-16 code units by default, or UTF-8 / UTF-32), and lines separated only by ``\\n``, ``\\r\\n`` or
``\\r`` (LSP 3.17, "Text Documents"). Python ``str`` indexes code points, and ``str.splitlines`` also
breaks at form feeds, ``\\x1c``-``\\x1e``, NEL and U+2028/U+2029, which would shift every later line,
so this module splits lines itself. Code units per character come from pygls' position codec.

Rules for positions from the client:

* ``character`` beyond the end of its line means the end of the line (the specification's rule);
* a ``line`` beyond the last line is an error (:class:`PositionError`): there is no text there;
* a ``character`` inside a UTF-16 surrogate pair or a UTF-8 sequence snaps to that character's start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class PositionError(ValueError):
    """A position that does not exist in the document."""


@dataclass(frozen=True)
class LineIndex:
    """Start offsets (code points) of each line of a text, LSP line breaks only."""

    text: str
    starts: tuple[int, ...]

    @classmethod
    def of(cls, text: str) -> LineIndex:
        return cls(text, (0, *(m.end() for m in _LINE_BREAK.finditer(text))))

    def edited(self, start: int, end: int, replacement: str) -> LineIndex:
        """The index of ``text[:start] + replacement + text[end:]`` (code-point offsets), computed from
        this one: line breaks are searched again only from the line before the edit to the line after
        it (a ``\r`` and a ``\n`` on either side of the edit may join or part), later starts shift.
        Equal to :meth:`of` on the new text; a keystroke in a large file costs microseconds, not a scan."""
        text = self.text[:start] + replacement + self.text[end:]
        starts = self.starts
        first = max(_bisect_right(starts, start) - 2, 0)  # the line before the edit's line
        last = _bisect_right(starts, end) + 1  # starts from here on lie after the next line break
        low = starts[first]
        delta = len(replacement) - (end - start)
        high = starts[last] + delta if last < len(starts) else len(text)
        middle = [m.end() for m in _LINE_BREAK.finditer(text, low, high)]  # absolute offsets
        if last < len(starts) and middle and middle[-1] == high:
            middle.pop()  # ``high`` is already a line start, kept below
        return LineIndex(text, (*starts[: first + 1], *middle, *(s + delta for s in starts[last:])))

    def line_text(self, line: int) -> str:
        """Line ``line`` without its line break."""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset_at(self, position: types.Position, codec: PositionCodec) -> int:
        """Code-point offset of an LSP position.

        Raises:
            PositionError: for a negative position or a line past the last line.
        """
        if position.line < 0 or position.character < 0:
            raise PositionError(f"negative position {position.line}:{position.character}")
        if position.line >= len(self.starts):
            raise PositionError(f"line {position.line} is past the last line ({len(self.starts) - 1}) of the document")
        line = self.line_text(position.line)
        units = 0
        for column, char in enumerate(line):
            width = codec.client_num_units(char)
            if units + width > position.character:
                return self.starts[position.line] + column
            units += width
        return self.starts[position.line] + len(line)  # at or past the end of the line

    def line_end(self, line: int) -> int:
        """Code-point offset of the end of line ``line`` (before its line break)."""
        return self.starts[line] + len(self.line_text(line))

    def locate(self, position: types.Position, codec: PositionCodec) -> tuple[int, int, int]:
        """(start of the position's line, the position's offset, end of its line), code points; the
        one conversion of a request's position on the way in.

        Raises:
            PositionError: as :meth:`offset_at`.
        """
        offset = self.offset_at(position, codec)
        return self.starts[position.line], offset, self.line_end(position.line)

    def position_at(self, offset: int, codec: PositionCodec) -> types.Position:
        """LSP position (in the codec's units) of a code-point offset in ``[0, len(text)]``."""
        if not 0 <= offset <= len(self.text):
            raise PositionError(f"offset {offset} is outside the document (length {len(self.text)})")
        line = _bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        return types.Position(line=line, character=codec.client_num_units(self.text[start:offset]))


def _bisect_right(values: tuple[int, ...], x: int) -> int:
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if x < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def codec_for(encoding: str | None) -> PositionCodec:
    """pygls' codec for a negotiated ``positionEncoding`` (UTF-16 when none was negotiated)."""
    return PositionCodec(encoding or types.PositionEncodingKind.Utf16)


def line_ending(text: str) -> str:
    """The document's own line ending: ``\\r\\n`` if its first line break is one, else ``\\n``
    (a lone ``\\r`` likewise)."""
    match = _LINE_BREAK.search(text)
    return match.group(0) if match else "\n"


def to_model_text(text: str) -> str:
    """Text as the model sees it: every line break normalised to ``\\n``."""
    return _LINE_BREAK.sub("\n", text)


def to_document_text(text: str, eol: str) -> str:
    """Model output with its ``\\n`` line breaks written in the document's line ending."""
    return to_model_text(text).replace("\n", eol) if eol != "\n" else to_model_text(text)
