"""The one module that owns coordinates: LSP positions <-> Python string offsets.

LSP positions are (line, character) with ``character`` counted in the negotiated position encoding
(UTF-16 code units by default, or UTF-8 / UTF-32), and lines separated only by ``\\n``, ``\\r\\n`` or
``\\r`` (LSP 3.17, "Text Documents"). Python ``str`` indexes code points, and ``str.splitlines`` also
breaks at form feeds, ``\\x1c``-``\\x1e``, NEL and U+2028/U+2029, which would shift every later line,
so this module splits lines itself. Code units per character come from pygls' position codec.

Rules for the positions of requests (:meth:`LineIndex.offset_at`):

* ``character`` beyond the end of its line means the end of the line (the specification's rule);
* a ``line`` beyond the last line is an error (:class:`PositionError`): there is no text there;
* a ``character`` inside a UTF-16 surrogate pair or a UTF-8 sequence snaps to that character's start.

The ranges of document changes are clamped as the reference implementation
(``vscode-languageserver-textdocument``, ``offsetAt``) clamps them (:meth:`LineIndex.change_offset`):
a ``line`` at or past the line count is the end of the text (so the common end
``{line: lineCount, character: 0}`` applies), a negative line is the start of the text, a negative
``character`` the start of its line (see :func:`clamp_raw_position`: lsprotocol refuses negatives), and
a ``character`` past its line's end is the line's end.

Line starts are kept in an ``array('q')`` and shifted with numpy after an edit (:meth:`LineIndex.edited`):
a keystroke in a document of a million lines copies memory, it runs no Python loop over the lines.
"""

from __future__ import annotations

import bisect
import re
from array import array
from dataclasses import dataclass

import numpy as np
from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec, Utf8, Utf32

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
UINTEGER_MAX = 2**31 - 1  # LSP's largest ``uinteger`` (lsprotocol refuses larger line and character numbers)


class PositionError(ValueError):
    """A position that does not exist in the document."""


@dataclass(frozen=True, eq=False)
class LineIndex:
    """Start offsets (code points) of each line of a text, LSP line breaks only.

    ``starts`` is an ``array('q')``: indexing it gives Python ints; treat it as read-only (snapshots
    share it).
    """

    text: str
    starts: array

    @classmethod
    def of(cls, text: str) -> LineIndex:
        """The index of a whole text (a scan: an opened document, a full-text change)."""
        starts = array("q", [0])
        if text.isascii() and "\r" not in text:  # the common case, scanned by numpy
            breaks = np.flatnonzero(np.frombuffer(text.encode("ascii"), dtype=np.uint8) == 0x0A)
            starts.frombytes((breaks + 1).astype(np.int64).tobytes())
        else:
            starts.extend(m.end() for m in _LINE_BREAK.finditer(text))
        return cls(text, starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LineIndex) and self.text == other.text and self.starts == other.starts

    __hash__ = None  # mutable-looking contents: no hashing

    def edited(self, start: int, end: int, replacement: str) -> LineIndex:
        """The index of ``text[:start] + replacement + text[end:]`` (code-point offsets), computed from
        this one: line breaks are searched again only from the line before the edit to the line after
        it (a ``\\r`` and a ``\\n`` on either side of the edit may join or part), later starts shift.
        Equal to :meth:`of` on the new text. Cost: copying the text and the starts (at memory
        speed) and scanning the edited lines; no Python loop over the other lines."""
        text = "".join((self.text[:start], replacement, self.text[end:]))
        starts = self.starts
        first = max(bisect.bisect_right(starts, start) - 2, 0)  # the line before the edit's line
        last = bisect.bisect_right(starts, end) + 1  # starts from here on lie after the next line break
        low = starts[first]
        delta = len(replacement) - (end - start)
        high = starts[last] + delta if last < len(starts) else len(text)
        middle = [m.end() for m in _LINE_BREAK.finditer(text, low, high)]  # absolute offsets
        if last < len(starts) and middle and middle[-1] == high:
            middle.pop()  # ``high`` is already a line start, kept below
        edited = starts[: first + 1]
        edited.extend(middle)
        tail = starts[last:]  # a copy
        if delta and len(tail):
            shifted = np.frombuffer(tail, dtype=np.int64)  # a view of the copy
            shifted += delta
            del shifted  # release the view before the array is read
        edited.extend(tail)
        return LineIndex(text, edited)

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line_text(self, line: int) -> str:
        """Line ``line`` without its line break."""
        start = self.starts[line]
        end = self.starts[line + 1] if line + 1 < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset_at(self, position: types.Position, codec: PositionCodec) -> int:
        """Code-point offset of a request's LSP position.

        Raises:
            PositionError: for a negative position or a line past the last line.
        """
        if position.line < 0 or position.character < 0:
            raise PositionError(f"negative position {position.line}:{position.character}")
        if position.line >= len(self.starts):
            raise PositionError(f"line {position.line} is past the last line ({len(self.starts) - 1}) of the document")
        return self.starts[position.line] + column_of(self.line_text(position.line), position.character, codec)

    def change_offset(self, position: types.Position, codec: PositionCodec) -> int:
        """Code-point offset of an end of a document change's range, clamped as the reference
        implementation clamps it (see the module docstring): never raises."""
        if position.line >= len(self.starts):
            return len(self.text)
        if position.line < 0:
            return 0
        return self.starts[position.line] + column_of(self.line_text(position.line), max(position.character, 0), codec)

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
        line = bisect.bisect_right(self.starts, offset) - 1
        start = self.starts[line]
        return types.Position(line=line, character=units_of(self.text[start:offset], codec))


def units_of(text: str, codec: PositionCodec) -> int:
    """Length of ``text`` in the codec's code units (what pygls' codec counts, at C speed)."""
    if isinstance(codec.impl, Utf32) or text.isascii():
        return len(text)
    if isinstance(codec.impl, Utf8):
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def column_of(line: str, units: int, codec: PositionCodec) -> int:
    """Code points of ``line`` (no line break) before ``units`` code units: the line's length when
    ``units`` is past its end; a count that ends inside a character (half a UTF-16 surrogate pair, part
    of a UTF-8 sequence) stops at that character's start."""
    if units >= len(line) and (isinstance(codec.impl, Utf32) or line.isascii()):
        return len(line)
    if isinstance(codec.impl, Utf32) or line.isascii():
        return units
    if isinstance(codec.impl, Utf8):
        data = line.encode("utf-8", "surrogatepass")
        cut = min(units, len(data))
        while 0 < cut < len(data) and 0x80 <= data[cut] <= 0xBF:  # inside a sequence: back to its lead byte
            cut -= 1
        return len(data[:cut].decode("utf-8", "surrogatepass"))
    data = line.encode("utf-16-le", "surrogatepass")
    cut = min(2 * units, len(data))
    if 0 < cut < len(data) and 0xD8 <= data[cut - 1] <= 0xDB and 0xDC <= data[cut + 1] <= 0xDF:
        cut -= 2  # between the two halves of a surrogate pair: back to the pair's start
    return len(data[:cut].decode("utf-16-le", "surrogatepass"))


def clamp_raw_position(value: object) -> object:
    """A position of a raw (JSON) change range with negative numbers clamped as the reference
    implementation reads them (a negative line: the text's start; a negative character: its line's
    start) and numbers past ``uinteger`` brought down to it (past any line, or past the line's end);
    anything else unchanged, for the type check to refuse."""
    if not isinstance(value, dict):
        return value
    line, character = value.get("line"), value.get("character")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (line, character)):
        return value
    if line < 0:
        line, character = 0, 0
    return {**value, "line": min(line, UINTEGER_MAX), "character": min(max(character, 0), UINTEGER_MAX)}


def codec_for(encoding: str | None) -> PositionCodec:
    """pygls' codec for a negotiated ``positionEncoding`` (UTF-16 when none was negotiated)."""
    return PositionCodec(encoding or types.PositionEncodingKind.Utf16)


def line_ending(text: str) -> str:
    """The document's own line ending: ``\\r\\n`` if its first line break is one, else ``\\n``
    (a lone ``\\r`` likewise)."""
    match = _LINE_BREAK.search(text)
    return match.group(0) if match else "\n"


def to_model_text(text: str) -> str:
    """Text as the model sees it: every line break normalised to ``\\n`` (``\\r\\n`` first, then a lone
    ``\\r``: the same as replacing each match of the line-break pattern, at ``str.replace`` speed)."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def to_document_text(text: str, eol: str) -> str:
    """Model output with its ``\\n`` line breaks written in the document's line ending."""
    return to_model_text(text).replace("\n", eol) if eol != "\n" else to_model_text(text)
