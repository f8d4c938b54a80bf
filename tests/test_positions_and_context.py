"""Coordinates (astral characters, the document's edges, CRLF: docs/cases.md L1, L2, L3) and the FIM
prompt, on the starter tokenizer."""

from __future__ import annotations

import pytest
from lsprotocol import types
from transformers import AutoTokenizer

from decoding.weights.starter import TARGET_DIR
from lsp_server.completion.prompt import build_prompt
from lsp_server.workspace.documents import Document, DocumentStore
from lsp_server.workspace.positions import LineIndex, PositionError, codec_for, line_ending, to_document_text
from lsp_server.request import resolve_request
from lsp_server.settings import Settings

pytestmark = pytest.mark.unit

UTF16, UTF8, UTF32 = (codec_for(e) for e in ("utf-16", "utf-8", "utf-32"))
L1_TEXT = '# 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀 smoke\ndef main():\n    print("Goodbye, ")\n'


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TARGET_DIR, local_files_only=True)


def units(text: str, encoding: str) -> int:
    return len(text.encode({"utf-16": "utf-16-le", "utf-8": "utf-8", "utf-32": "utf-32-le"}[encoding])) // {
        "utf-16": 2, "utf-8": 1, "utf-32": 4}[encoding]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
@pytest.mark.parametrize("text,line,before", [
    (L1_TEXT, 2, '    print("Goodbye, '),
    ('def f():\n    s = "😀😀"; return s\n', 1, '    s = "😀😀"; '),
    ('x = "日本語テキスト"; y = 1\n', 0, 'x = "日本語テキスト"; '),
    ('name = "José"  # combining\n', 0, 'name = "José"'),
])
def test_l1_offsets_round_trip_in_every_encoding(encoding, text, line, before):
    codec = codec_for(encoding)
    index = LineIndex.of(text)
    position = types.Position(line=line, character=units(before, encoding))
    offset = index.offset_at(position, codec)
    assert text[index.starts[line]:offset] == before
    assert index.position_at(offset, codec) == position


def test_l1_prefix_and_suffix_split_exactly_at_cursor(tokenizer):
    document = Document("file:///l1.py", L1_TEXT, 1, "python")
    position = types.Position(line=2, character=units('    print("Goodbye, ', "utf-16"))
    request = resolve_request(document, position, UTF16)
    assert (request.line_prefix, request.line_suffix) == ('    print("Goodbye, ', '")')
    context = build_prompt(request, tokenizer)
    assert context.prefix.endswith('    print("Goodbye, ') and context.prefix.startswith("# 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 😀")
    assert context.suffix == '")\n'
    assert context.line_suffix == '")'
    decoded = tokenizer.decode(context.prompt_ids)
    assert decoded == "<|fim_prefix|>" + context.prefix + "<|fim_suffix|>" + context.suffix + "<|fim_middle|>"


def test_utf16_position_inside_surrogate_pair_snaps_to_char_start():
    index = LineIndex.of('a😀b')
    assert index.offset_at(types.Position(line=0, character=2), UTF16) == 1
    assert index.offset_at(types.Position(line=0, character=3), UTF16) == 2


def test_l2_edges():
    assert LineIndex.of("").offset_at(types.Position(line=0, character=0), UTF16) == 0
    index = LineIndex.of("x = 1")
    assert index.offset_at(types.Position(line=0, character=5), UTF16) == 5
    # Past the end of a line: the end of the line (LSP rule); past the last line: an error.
    assert index.offset_at(types.Position(line=0, character=99), UTF16) == 5
    with pytest.raises(PositionError, match="past the last line"):
        index.offset_at(types.Position(line=3, character=0), UTF16)
    with pytest.raises(ValueError):  # lsprotocol refuses negative positions when the request is parsed
        types.Position(line=0, character=-1)


def test_only_lsp_line_breaks_split_lines():
    # Form feed and U+2028 are not LSP line breaks (str.splitlines would split on them).
    text = "a = 1\x0c\nb = '\u2028'\r\nc = 3\rd"
    index = LineIndex.of(text)
    assert len(index.starts) == 4
    assert index.line_text(1) == "b = '\u2028'"
    assert index.offset_at(types.Position(line=3, character=1), UTF16) == len(text)


def test_incremental_changes_and_delete_last_character():
    store = DocumentStore()
    store.open(types.TextDocumentItem(uri="file:///a.py", language_id="python", version=1, text="x = 1\x0c\ny = 2"))
    change = types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri="file:///a.py", version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=1, character=4), end=types.Position(line=1, character=5)),
            text="")])
    assert store.change(change, UTF16).text == "x = 1\x0c\ny = "
    # A range past the last line is clamped to the end of the text (the reference implementation's rule;
    # tests/test_documents.py covers every kind of out-of-range end).
    past = types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri="file:///a.py", version=3),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=9, character=0), end=types.Position(line=9, character=0)),
            text="z")])
    document = store.change(past, UTF16)
    assert document.text == "x = 1\x0c\ny = z" and document.in_sync and store.get("file:///a.py") is document


def test_l3_crlf_prompt_equals_lf_prompt(tokenizer):
    lf = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return \n"
    crlf = lf.replace("\n", "\r\n")
    position = types.Position(line=4, character=11)
    contexts = [build_prompt(resolve_request(Document("file:///x.py", t, 1, "python"), position, UTF16), tokenizer)
                for t in (lf, crlf)]
    assert contexts[0].prompt_ids == contexts[1].prompt_ids
    assert (contexts[0].eol, contexts[1].eol) == ("\n", "\r\n")
    assert line_ending("a\r\nb") == "\r\n" and to_document_text("x\ny\n", "\r\n") == "x\r\ny\r\n"


def test_budget_keeps_whole_lines_at_the_tail(tokenizer):
    text = "".join(f"value_{i} = compute({i})\n" for i in range(400))
    document = Document("file:///big.py", text, 1, "python")
    position = types.Position(line=399, character=8)
    context = build_prompt(resolve_request(document, position, UTF16, Settings(prefix_tokens=64, suffix_tokens=8)),
                            tokenizer)
    assert context.prefix.startswith("value_") and context.prefix.endswith("value_39")
    assert len(tokenizer.encode(context.prefix)) <= 64
    assert len(context.prompt_ids) <= 64 + 8 + 3


def test_long_prefix_start_stays_put_while_typing_so_the_prompt_cache_is_reused(tokenizer):
    """Typing at the end of a long prefix keeps the prompt's beginning: only the tail is new."""
    body = "".join(f"def function_{i}(argument):\n    return argument * {i}\n\n" for i in range(400))
    budget = Settings(prefix_tokens=512, suffix_tokens=16)
    previous = None
    shared = []
    for typed in ("", "d", "de", "def", "def ", "def n", "def ne", "def new"):
        document = Document("file:///long.py", body + typed, 1, "python")
        lines = body.count("\n")
        request = resolve_request(document, types.Position(line=lines, character=len(typed)), UTF16, budget)
        context = build_prompt(request, tokenizer)
        assert len(context.prompt_ids) <= 512 + 16 + 3
        assert ("\n" + context.prefix) in ("\n" + body + typed)  # cut at a line start
        if previous is not None:
            common = 0
            for a, b in zip(previous, context.prompt_ids):
                if a != b:
                    break
                common += 1
            shared.append(common)
        previous = context.prompt_ids
    assert min(shared) >= 512 - 128 - 8, shared  # all but the last few tokens of the prefix are shared


def test_line_index_follows_edits_exactly():
    """LineIndex.edited gives the index a fresh scan gives, for random edits that join or part \\r\\n
    pairs, insert and delete breaks, and touch both ends of the text (the document store uses it)."""
    import random

    from lsp_server.workspace.positions import LineIndex

    rng = random.Random(0)
    alphabet = ["a", "b", "\n", "\r", "\r\n", " ", "\u2028", "é", "\x0c"]
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        start = rng.randint(0, len(text))
        end = rng.randint(start, len(text))
        replacement = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
        assert LineIndex.of(text).edited(start, end, replacement) == LineIndex.of(text[:start] + replacement + text[end:])
