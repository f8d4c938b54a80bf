"""The document store: change ranges clamped as the reference implementation clamps them, a change
that cannot be read marks its document out of sync until healed, and random incremental changes
(CRLF, surrogate pairs, every position encoding, ranges out of bounds) equal the same changes applied
to a plain string by a straightforward model written here."""

from __future__ import annotations

import random
import re

import pytest
from lsprotocol import types
from pygls.protocol import default_converter

from lsp_server.workspace.documents import Document, DocumentStore, MalformedChange, structure_change
from lsp_server.workspace.positions import LineIndex, codec_for, column_of, to_model_text, units_of
from tests.fake_session import services
from lsp_server.tracing import Tracer
from lsp_server.model.worker import ModelWorker

pytestmark = pytest.mark.unit

URI = "file:///doc.py"
CONVERTER = default_converter()
UNIT_BYTES = {"utf-16": ("utf-16-le", 2), "utf-8": ("utf-8", 1), "utf-32": ("utf-32-le", 4)}


# -- the references ----------------------------------------------------------------------------------

def reference_offset_at(text: str, line: int, character: int) -> int:
    """vscode-languageserver-textdocument's ``offsetAt`` (UTF-16 strings), ported line by line, then
    turned from UTF-16 units into code points (the text must hold no astral characters here)."""
    assert all(ord(c) <= 0xFFFF for c in text), "the port counts UTF-16 units: BMP text only"
    line_offsets, i = [0], 0
    while i < len(text):  # computeLineOffsets
        if text[i] in "\r\n":
            if text[i] == "\r" and i + 1 < len(text) and text[i + 1] == "\n":
                i += 1
            line_offsets.append(i + 1)
        i += 1
    if line >= len(line_offsets):
        return len(text)
    if line < 0:
        return 0
    line_offset = line_offsets[line]
    if character <= 0:
        return line_offset
    next_line_offset = line_offsets[line + 1] if line + 1 < len(line_offsets) else len(text)
    offset = min(line_offset + character, next_line_offset)
    while offset > line_offset and text[offset - 1] in "\r\n":  # ensureBeforeEOL
        offset -= 1
    return offset


def plain_lines(text: str) -> list[tuple[int, str]]:
    """(start, text without its break) of each LSP line, by a plain scan."""
    lines, start = [], 0
    for match in re.finditer(r"\r\n|\r|\n", text):
        lines.append((start, text[start:match.start()]))
        start = match.end()
    return [*lines, (start, text[start:])]


def plain_offset(text: str, line: int, character: int, encoding: str) -> int:
    """A change position's offset by the rules, counting units one character at a time."""
    lines = plain_lines(text)
    if line >= len(lines):
        return len(text)
    if line < 0:
        return 0
    start, content = lines[line]
    codec, size = UNIT_BYTES[encoding]
    units = 0
    for column, char in enumerate(content):
        width = len(char.encode(codec, "surrogatepass")) // size
        if units + width > character:
            return start + column
        units += width
    return start + len(content)


def change(version: int, *changes: dict) -> dict:
    """Raw JSON parameters of a didChange."""
    return {"textDocument": {"uri": URI, "version": version}, "contentChanges": list(changes)}


def partial(start: tuple[int, int], end: tuple[int, int], text: str) -> dict:
    return {"range": {"start": {"line": start[0], "character": start[1]},
                      "end": {"line": end[0], "character": end[1]}}, "text": text}


def opened(text: str) -> DocumentStore:
    store = DocumentStore()
    store.open(types.TextDocumentItem(uri=URI, language_id="python", version=1, text=text))
    return store


def apply(store: DocumentStore, raw: dict, encoding: str = "utf-16") -> Document:
    return store.change(structure_change(CONVERTER, raw), codec_for(encoding))


# -- clamping -----------------------------------------------------------------------------------------

CLAMP_TEXT = "def f():\r\n    return 1\n\nx = 'é'\ry"  # CRLF, LF, an empty line, a lone CR, no final break


@pytest.mark.parametrize("start,end", [
    ((5, 0), (5, 0)),  # {line: lineCount, character: 0}: the common end of "append at the end"
    ((4, 1), (5, 0)),  # from inside the last line to lineCount
    ((1, 4), (99, 7)),  # far past the last line
    ((4, 99), (4, 99)),  # past the end of the last line
    ((0, 40), (1, 0)),  # past the end of a CRLF line: before its \r\n
    ((3, 50), (3, 50)),  # past the end of a line ending in a lone \r
    ((2, 3), (2, 3)),  # an empty line
    ((5, 0), (1, 2)),  # start after end: read with the ends swapped
    ((-1, 5), (0, 3)),  # negative line: the text's start
    ((1, -4), (1, 2)),  # negative character: the line's start
    ((2**31 + 5, 0), (2**40, 2**40)),  # past LSP's uinteger: past any line
    ((0, 2**33), (0, 2**33)),  # a character past uinteger: the line's end
])
def test_change_ranges_are_clamped_as_the_reference_clamps_them(start, end):
    def reference(position):
        return reference_offset_at(CLAMP_TEXT, *position)

    low, high = sorted((reference(start), reference(end)))
    expected = CLAMP_TEXT[:low] + "Z" + CLAMP_TEXT[high:]
    document = apply(opened(CLAMP_TEXT), change(2, partial(start, end, "Z")))
    assert document.text == expected and document.in_sync and document.version == 2
    assert document.lines == LineIndex.of(expected)


def test_clamped_offsets_equal_the_reference_for_every_position_near_the_text():
    index = LineIndex.of(CLAMP_TEXT)
    for line in range(-2, 8):
        for character in range(-2, 16):
            if line >= 0 and character >= 0:  # lsprotocol refuses negatives (the raw path clamps them)
                position = types.Position(line=line, character=character)
                assert index.change_offset(position, codec_for("utf-16")) == reference_offset_at(
                    CLAMP_TEXT, line, character), (line, character)


def test_request_positions_keep_their_rule_only_changes_clamp():
    index = LineIndex.of("x = 1\n")
    past = types.Position(line=5, character=0)
    assert index.change_offset(past, codec_for("utf-16")) == 6
    with pytest.raises(ValueError, match="past the last line"):
        index.offset_at(past, codec_for("utf-16"))


# -- a change that cannot be read -------------------------------------------------------------------

@pytest.mark.parametrize("raw,uri", [
    (change(2, {"range": {"start": {"line": "one", "character": 0}, "end": {"line": 0, "character": 0}},
                "text": "x"}), URI),
    (change(2, {"range": {"start": {"line": 0}}, "text": "x"}), URI),  # no character, no end
    (change(2, {"text": 5}), URI),  # text that is not a string (the converter would store "5")
    (change(2, partial((0, 0), (0, 0), "x"), {"text": None}), URI),  # ... or "None"
    (change(2, "x = 1"), URI),  # a change that is not an object
    ({"textDocument": {"uri": URI}, "contentChanges": "x"}, URI),  # no version; changes not a list
    ({"textDocument": {"uri": 7, "version": 1}, "contentChanges": []}, None),  # the URI is unreadable
    ({"contentChanges": []}, None),
    (None, None),
    ([1, 2], None),
])
def test_a_change_that_does_not_fit_names_its_document_when_it_can(raw, uri):
    with pytest.raises(MalformedChange) as caught:
        structure_change(CONVERTER, raw)
    assert caught.value.uri == uri and str(caught.value)


def test_out_of_sync_after_a_lost_change_until_a_full_text_change_or_a_reopen():
    store = opened("a = 1\n")
    apply(store, change(2, partial((1, 0), (1, 0), "b = 2\n")))
    lost = store.mark_out_of_sync(URI, "a didChange could not be read (x)")
    assert not lost.in_sync and lost.text == "a = 1\nb = 2\n" and "after version 2" in lost.sync_problem
    # Later incremental changes refer to text we do not have: skipped; the problem stays the same.
    later = apply(store, change(4, partial((0, 0), (0, 0), "#")))
    assert later.text == "a = 1\nb = 2\n" and not later.in_sync and later.sync_problem == lost.sync_problem
    assert store.mark_out_of_sync(URI, "another").sync_problem == lost.sync_problem
    healed = apply(store, change(5, {"text": "fresh\n"}, partial((1, 0), (1, 0), "more")))
    assert healed.in_sync and healed.text == "fresh\nmore" and healed.sync_problem == ""
    store.mark_out_of_sync(URI, "again")
    store.open(types.TextDocumentItem(uri=URI, language_id="python", version=9, text="reopened"))
    assert store.get(URI).in_sync and store.get(URI).text == "reopened"
    assert store.mark_out_of_sync("file:///never-opened.py", "x") is None


async def test_completion_on_an_out_of_sync_document_says_why_once_per_state():
    sent = []
    store = opened("def f():\n    ")
    _, service, _ = services(store, ModelWorker(), Tracer(sent.append))
    store.mark_out_of_sync(URI, "a didChange could not be read (bad)")
    for _ in range(3):
        assert await service.complete("inlineCompletion", URI, types.Position(line=1, character=4)) is None
    explained = [m for m in sent if "out of sync with the editor" in m.message]
    assert len(explained) == 1 and "could not be read (bad)" in explained[0].message
    assert explained[0].type == types.MessageType.Warning
    assert sum("document out of sync" in m.message for m in sent) == 3  # each request's own log line
    apply(store, change(3, {"text": "def g():\n    "}))
    store.mark_out_of_sync(URI, "a second loss")
    await service.complete("inlineCompletion", URI, types.Position(line=1, character=4))
    assert sum("out of sync with the editor" in m.message for m in sent) == 2  # a new state: said again


# -- random changes against a plain string ------------------------------------------------------------

ALPHABET = ["a", "b", " ", "\n", "\r", "\r\n", "é", "😀", "𝔘", "\x0c", "\u2028", "日"]


def random_text(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(length))


def random_end(rng: random.Random, text: str, encoding: str) -> tuple[int, int]:
    """A range end: mostly inside the text, sometimes past a line's end, past the last line, or negative."""
    lines = plain_lines(text)
    roll = rng.random()
    if roll < 0.08:
        return len(lines), 0  # {line: lineCount, character: 0}
    if roll < 0.12:
        return len(lines) + rng.randint(1, 3), rng.randint(0, 5)
    if roll < 0.16:
        return rng.choice([(-1, rng.randint(0, 3)), (rng.randrange(len(lines)), -2)])
    line = rng.randrange(len(lines))
    codec, size = UNIT_BYTES[encoding]
    width = len(lines[line][1].encode(codec, "surrogatepass")) // size
    return line, rng.randint(0, width + 3)  # may fall inside a surrogate pair or a UTF-8 sequence


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
def test_random_incremental_changes_equal_a_plain_string_model(encoding):
    rng = random.Random(f"changes-{encoding}")
    for _ in range(300):
        text = random_text(rng, rng.randint(0, 25))
        store, model = opened(text), text
        for version in range(2, 2 + rng.randint(1, 6)):
            edits = []
            for _ in range(rng.randint(1, 3)):  # several changes in one didChange, applied in order
                start, end = random_end(rng, model, encoding), random_end(rng, model, encoding)
                inserted = random_text(rng, rng.randint(0, 4)) + rng.choice(["", "", "\udcff"])  # a lone surrogate
                edits.append(partial(start, end, inserted))
                low, high = sorted((plain_offset(model, *start, encoding), plain_offset(model, *end, encoding)))
                model = model[:low] + inserted.replace("\udcff", "\ufffd") + model[high:]
            document = apply(store, change(version, *edits), encoding)
            assert document.text == model, (text, edits)
            assert document.lines == LineIndex.of(model) and document.in_sync


def test_unit_counts_and_columns_equal_pygls_codec_character_by_character():
    rng = random.Random(7)
    for encoding in ("utf-16", "utf-8", "utf-32"):
        codec = codec_for(encoding)
        for _ in range(500):
            line = "".join(rng.choice(["a", "é", "😀", "日", "\ud800", " "]) for _ in range(rng.randint(0, 12)))
            assert units_of(line, codec) == codec.client_num_units(line)
            units = rng.randint(0, codec.client_num_units(line) + 2)
            assert column_of(line, units, codec) == plain_offset(line, 0, units, encoding), (line, units)


def test_model_window_equals_slices_of_the_whole_model_text():
    rng = random.Random(3)
    for _ in range(2000):
        text = "".join(rng.choice(["a", "\n", "\r", "\r\n", "é"]) for _ in range(rng.randint(0, 30)))
        document = Document(URI, text, 1, "python")
        offset = rng.randint(0, len(text))
        prefix, suffix = to_model_text(text[:offset]), to_model_text(text[offset:])
        before, after = rng.randint(0, 12), rng.randint(0, 12)
        window = document.model_window(offset, before, after)
        assert (window.prefix_length, window.suffix_length) == (len(prefix), len(suffix))
        assert window.prefix == prefix[max(0, len(prefix) - before):] and window.suffix == suffix[:after]
        assert document.model_split(offset) == (prefix, suffix)
