"""The typed-tail prompt (lsp_server/completion/anchor.py, build_prompt's anchor): its layout, that its prefix
and suffix tokens stay the same while the user types, and when the anchor moves. Starter tokenizer."""

from __future__ import annotations

import pytest
from lsprotocol import types
from transformers import AutoTokenizer

from decoding.weights.starter import TARGET_DIR
from lsp_server.completion.prompt import build_prompt
from lsp_server.completion.anchor import MAX_TAIL_CHARS, AnchorBook
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for

pytestmark = pytest.mark.unit

UTF32 = codec_for(types.PositionEncodingKind.Utf32)
HEAD = "import math\n\n\ndef area(radius):\n"
FOOT = "\n\nprint(area(2))\n"


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TARGET_DIR, local_files_only=True)


def request_at(text: str, offset: int, version: int = 1):
    document = Document("file:///a.py", text, version, "python")
    return resolve_request(document, _position(text, offset), UTF32, Settings())


def _position(text: str, offset: int) -> types.Position:
    line = text.count("\n", 0, offset)
    return types.Position(line=line, character=offset - (text.rfind("\n", 0, offset) + 1))


def typed(line: str) -> tuple[str, int]:
    """The document with ``line`` typed after HEAD (the cursor at its end), and the cursor offset."""
    return HEAD + line + FOOT, len(HEAD) + len(line)


def special(tokenizer, name: str) -> int:
    return tokenizer.convert_tokens_to_ids(name)


def test_the_tail_follows_the_middle_marker_and_the_prefix_ends_at_the_line_start(tokenizer):
    text, cursor = typed("    return math.pi * rad")
    request = request_at(text, cursor)
    book = AnchorBook()
    prompt = build_prompt(request, tokenizer, anchor=book.anchor_for(request))
    psm = build_prompt(request, tokenizer)
    middle = prompt.prompt_ids.index(special(tokenizer, "<|fim_middle|>"))
    suffix = prompt.prompt_ids.index(special(tokenizer, "<|fim_suffix|>"))
    assert tokenizer.decode(prompt.prompt_ids[1:suffix]) == HEAD  # the prefix ends at the anchor
    assert tokenizer.decode(prompt.prompt_ids[middle + 1:]) == "    return math.pi * rad"
    assert prompt.prefix == psm.prefix and prompt.suffix == psm.suffix  # postprocessing sees the same text
    # The suffix tokens are PSM's: only where the typed text goes differs.
    assert prompt.prompt_ids[suffix:middle] == psm.prompt_ids[psm.prompt_ids.index(special(tokenizer, "<|fim_suffix|>")):-1]


def test_healing_backs_off_the_tails_last_token_and_an_empty_tail_heals_nothing(tokenizer):
    text, cursor = typed("    return math.pi * rad")
    request = request_at(text, cursor)
    prompt = build_prompt(request, tokenizer, heal=True, anchor=AnchorBook().anchor_for(request))
    middle = prompt.prompt_ids.index(special(tokenizer, "<|fim_middle|>"))
    assert prompt.healed and "    return math.pi * rad".endswith(prompt.healed)
    assert tokenizer.decode(prompt.prompt_ids[middle + 1:]) + prompt.healed == "    return math.pi * rad"
    at_line_start = request_at(*typed(""))
    empty = build_prompt(at_line_start, tokenizer, heal=True, anchor=AnchorBook().anchor_for(at_line_start))
    assert empty.healed == "" and empty.prompt_ids[-1] == special(tokenizer, "<|fim_middle|>")


def test_typing_keeps_the_tokens_up_to_the_middle_marker(tokenizer):
    """The point of the layout: key after key, everything before the typed tail is the same ids (the KV
    cache is reused up to it), where PSM's change right after the cursor's token."""
    book = AnchorBook()
    line = "    return math.pi * radius ** 2"
    heads = set()
    for end in range(5, len(line) + 1):
        request = request_at(*typed(line[:end]), version=end)
        prompt = build_prompt(request, tokenizer, heal=True, anchor=book.anchor_for(request))
        heads.add(tuple(prompt.prompt_ids[: prompt.prompt_ids.index(special(tokenizer, "<|fim_middle|>")) + 1]))
    assert len(heads) == 1


def test_the_anchor_moves_when_the_cursor_leaves_the_run_text_before_it_changes_or_the_tail_is_long():
    book = AnchorBook()
    text, cursor = typed("    x = 1")
    first = book.anchor_for(request_at(text, cursor))
    assert first == len(HEAD)
    assert book.anchor_for(request_at(*typed("    x = 12"))) == first  # typing on
    text2 = HEAD + "    x = 12\n    y" + FOOT  # a new line: max_lines 0 moves the anchor there
    assert book.anchor_for(request_at(text2, len(HEAD) + len("    x = 12\n    y"))) == len(HEAD) + len("    x = 12\n")
    # Text deleted before the anchor: a new anchor (still the cursor's line start, but set again).
    shorter = HEAD[1:] + "    x = 12" + FOOT
    assert book.anchor_for(request_at(shorter, len(HEAD) - 1 + len("    x = 12"))) == len(HEAD) - 1
    # The text after the cursor changed (an editor closed a bracket): set again at the line start.
    closed = HEAD + "    f(" + ")" + FOOT
    assert book.anchor_for(request_at(closed, len(HEAD) + 6)) == len(HEAD)
    # A cursor before the anchor: the anchor moves to its line.
    assert book.anchor_for(request_at(closed, 4)) == 0
    # Two lines allowed: a new anchor is set a line up (2 // 2), and holds across line breaks up to two.
    wide = AnchorBook()
    up = len("import math\n\n\n")  # the start of the line above the cursor's
    assert wide.anchor_for(request_at(*typed("    x = 1")), max_lines=2) == up
    assert not wide.would_move(request_at(*typed("    x = 1")), max_lines=2)
    assert wide.anchor_for(request_at(text2, len(HEAD) + len("    x = 12\n    y")), max_lines=2) == up
    assert wide.would_move(request_at(text2, len(HEAD) + len("    x = 12\n    y")), max_lines=2)
    three = HEAD + "    x = 12\n    y = 2\n    z = 3\n    w" + FOOT  # four line breaks from there: anew, a line up
    assert wide.anchor_for(request_at(three, len(three) - len(FOOT)), max_lines=2) == three.index("    z = 3")
    long_line = "    s = '" + "a" * MAX_TAIL_CHARS
    assert wide.anchor_for(request_at(*typed(long_line)), max_lines=2) == len(HEAD)  # no line up: the tail is long
    longer = typed(long_line + "b")
    assert wide.anchor_for(request_at(*longer), max_lines=2) == len(HEAD)  # still the line start, placed again


def test_an_anchor_must_be_a_line_start_before_the_cursor():
    book = AnchorBook()
    with pytest.raises(ValueError):
        book.place("file:///a.py", "abc\ndef", 5, 6)
    with pytest.raises(ValueError):
        book.place("file:///a.py", "abc\ndef", 4, 3)
    assert book.place("file:///a.py", "abc\r\ndef", 5, 6).before == "abc\r\n"


def test_auto_layout_is_tail_only_for_the_families_the_gate_passed():
    from types import SimpleNamespace

    from lsp_server.model.completer import prompt_layout

    def backend(target: str):
        return SimpleNamespace(describe=lambda: SimpleNamespace(target=target))

    assert prompt_layout(Settings(), backend("qwen2.5-coder-0.5b")) == "tail"
    assert prompt_layout(Settings(), backend("/models/Qwen2.5-Coder-7B-Q4_K_M.gguf")) == "tail"
    assert prompt_layout(Settings(), backend("starter")) == "psm"  # trained on PSM only
    assert prompt_layout(Settings(prompt_layout="tail"), backend("starter")) == "tail"
    assert prompt_layout(Settings(prompt_layout="psm"), backend("qwen2.5-coder-1.5b")) == "psm"
