"""Next-edit suggestions, the parts without a model: edit history (coalescing, bounds, diffs), minimal
edits (round trip on random strings), region snapping and the two prompt formats (issue 21)."""

from __future__ import annotations

import random

import pytest
from transformers import AutoTokenizer

from decoding.weights.capabilities import read_capabilities
from decoding.weights.starter import TARGET_DIR
from lsp_server.workspace.documents import Document
from lsp_server.workspace.edit_history import MAX_CHARS, MAX_EDITS, EditHistory, changed_span
from lsp_server.next_edit.formats import CHAT_END_MARKER
from lsp_server.next_edit.prompt import (
    NextEditUnsupported,
    build_rewrite_prompt,
    region_lines_around,
)
from lsp_server.next_edit.text_edits import apply_edits, minimal_edits

pytestmark = pytest.mark.unit

FUNCTION = ("import os\n\n\ndef scale(values, factor):\n    result = []\n    for value in values:\n"
            "        result.append(value * factor)\n    return result\n\n\ndef main():\n    print(scale([1], 2))\n")


def doc(text: str, version: int = 1, language: str = "python") -> Document:
    return Document("file:///w/a.py", text, version, language)


def edited(document: Document, start: int, end: int, new: str) -> tuple[Document, list]:
    text = document.text[:start] + new + document.text[end:]
    return doc(text, document.version + 1, document.language_id), [(start, end, new)]


def type_text(history: EditHistory, document: Document, at: int, typed: str, t0: float, step: float) -> Document:
    """Type ``typed`` at ``at`` one character per change, ``step`` seconds apart."""
    for i, ch in enumerate(typed):
        new, changes = edited(document, at + i, at + i, ch)
        history.record(document, new, changes, now=t0 + i * step)
        document = new
    return document


def test_changed_span_covers_a_sequence_of_changes():
    # "abcdef": replace "b" by "XY" (-> "aXYcdef"), then delete "e" (index 5 of the new text).
    start, old_end, new_end = changed_span(6, [(1, 2, "XY"), (5, 6, "")])
    assert (start, old_end, new_end) == (1, 5, 5)  # old "bcde" -> new "XYcd"


def test_a_burst_of_typing_is_one_edit_with_its_lines_before_and_after():
    history, document = EditHistory(), doc(FUNCTION)
    at = FUNCTION.index("values,")
    new, changes = edited(document, at, at + len("values"), "")
    history.record(document, new, changes, now=0.0)
    type_text(history, new, at, "items", t0=0.1, step=0.2)
    assert len(history.edits) == 1
    edit = history.edits[0]
    assert edit.before == "def scale(values, factor):" and edit.after == "def scale(items, factor):"
    assert edit.line == 3
    diff = history.diffs("a.py")[0]
    assert diff.split("\n") == ["--- a/a.py", "+++ b/a.py", "@@ -4,1 +4,1 @@", "-def scale(values, factor):",
                                "+def scale(items, factor):"]


def test_edits_apart_in_time_or_place_stay_separate():
    history, document = EditHistory(), doc(FUNCTION)
    document = type_text(history, document, FUNCTION.index("values,"), "x", t0=0.0, step=0.1)
    far = document.text.index("print(")
    document = type_text(history, document, far, "y", t0=0.2, step=0.1)  # same time, lines far apart
    document = type_text(history, document, far, "z", t0=10.0, step=0.1)  # same place, much later
    assert [(e.before, e.after) for e in history.edits] == [
        ("def scale(values, factor):", "def scale(xvalues, factor):"),
        ("    print(scale([1], 2))", "    yprint(scale([1], 2))"),
        ("    yprint(scale([1], 2))", "    zyprint(scale([1], 2))")]


def test_an_edit_undone_leaves_no_edit_and_adjacent_lines_merge():
    history, document = EditHistory(), doc(FUNCTION)
    at = FUNCTION.index("result = []")
    typed = type_text(history, document, at, "q", t0=0.0, step=0.1)
    back, changes = edited(typed, at, at + 1, "")
    history.record(typed, back, changes, now=0.2)
    assert history.edits == []
    # Two adjacent lines edited in one burst: one edit spanning both.
    line2 = back.text.index("for value")
    one = type_text(history, back, at, "a", t0=1.0, step=0.1)
    type_text(history, one, line2 + 1, "b", t0=1.1, step=0.1)
    assert len(history.edits) == 1 and history.edits[0].before.count("\n") == 1


def test_history_is_bounded_in_edits_and_characters():
    history, document = EditHistory(), doc("\n".join(f"line {i}" for i in range(200)))
    for i in range(MAX_EDITS + 3):
        at = document.text.index(f"line {i * 20}\n")
        document = type_text(history, document, at, "x", t0=10.0 * i, step=0.1)
    assert len(history.edits) == MAX_EDITS
    assert history.edits[-1].after.startswith("xline")
    big = "y" * MAX_CHARS
    new, changes = edited(document, 0, 0, big)
    history.record(document, new, changes, now=1000.0)
    assert sum(len(e.before) + len(e.after) for e in history.edits) <= MAX_CHARS


def test_a_full_text_change_is_recorded_as_the_lines_that_differ():
    history, document = EditHistory(), doc(FUNCTION * 40)
    text = document.text.replace("def main():", "def run():", 1)
    history.record(document, doc(text, 2), [(0, len(document.text), text)], now=0.0)
    assert [(e.before, e.after) for e in history.edits] == [("def main():", "def run():")]


@pytest.mark.parametrize("seed", range(40))
def test_minimal_edits_round_trip_on_random_strings(seed):
    rng = random.Random(seed)
    alphabet = "ab c\n_(x)\r\n"
    old = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
    new = list(old)
    for _ in range(rng.randint(0, 6)):
        at = rng.randint(0, len(new))
        new[at:at + rng.randint(0, 4)] = rng.choice(["", "zz", "q\n", "ab"])
    new = "".join(new)
    edits = minimal_edits(old, new, base_offset=7)
    assert apply_edits("#" * 7 + old, edits) == "#" * 7 + new
    assert (edits == []) == (old == new)


def test_minimal_edits_of_a_rename_are_one_per_occurrence():
    old = "def f(values):\n    for value in values:\n        use(values)\n"
    edits = minimal_edits(old, old.replace("values", "items"))
    assert [text for _, _, text in edits] == ["items"] * 3
    assert all(old[start:end] == "values" for start, end, _ in edits)


def test_region_snaps_to_the_enclosing_function_when_it_fits():
    document = doc(FUNCTION)
    cursor = FUNCTION.index("values,")
    assert region_lines_around(document, cursor, 20) == (3, 7)  # def scale ... return result
    assert region_lines_around(document, cursor, 3) == (3, 5)  # too long: a window inside the function
    plain = Document("file:///w/a.txt", FUNCTION, 1, "plaintext")  # no grammar: the window
    assert region_lines_around(plain, cursor, 4) == (3, 5)  # a quarter of the lines above the cursor (2), blank
    spaced = Document("file:///w/b.py", "a = 1\n\n\nb = 2\nc = 3\n\n\nd = 4\n", 1, "python")
    assert region_lines_around(spaced, spaced.text.index("c"), 20) == (0, 7)  # nothing blank at the edges
    assert region_lines_around(spaced, spaced.text.index("c"), 4) == (3, 4)  # the window 3-6, its blank end left out
    assert region_lines_around(spaced, spaced.text.index("\n\nd") + 1, 4) == (6, 7)  # the cursor's blank line stays


@pytest.fixture(scope="module")
def starter_tokenizer():
    return AutoTokenizer.from_pretrained(TARGET_DIR)


def test_plain_format_for_a_code_model_drafts_the_region_and_its_end_marker(starter_tokenizer):
    capabilities = read_capabilities(starter_tokenizer)
    assert not capabilities.chat_template and capabilities.fim is not None
    document = doc(FUNCTION)
    prompt = build_rewrite_prompt(document, FUNCTION.index("values,"), ["-old\n+new"], starter_tokenizer,
                                  capabilities, 20)
    assert prompt.region_text == FUNCTION[FUNCTION.index("def scale"):FUNCTION.index("\n\n\ndef main")]
    assert (prompt.region_start, prompt.region_end) == (FUNCTION.index("def scale"), FUNCTION.index("\n\n\ndef main"))
    assert not prompt.chat and prompt.end_marker == "\n# end of region"
    assert starter_tokenizer.decode(prompt.draft_ids) == prompt.region_text + prompt.end_marker
    text = starter_tokenizer.decode(prompt.prompt_ids)
    assert "# -old\n# +new\n" in text and text.endswith("# region:\n")
    assert f"# region:\n{prompt.region_text}\n# end of region\n" in text


def test_chat_format_prefills_the_code_block_and_splits_special_tokens_in_code(starter_tokenizer):
    tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR)
    tokenizer.chat_template = ("{% for m in messages %}<|fim_pad|>{{ m.role }}\n{{ m.content }}<|endoftext|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|fim_pad|>assistant\n{% endif %}")
    capabilities = read_capabilities(tokenizer)
    assert capabilities.chat_template
    text = FUNCTION.replace("result = []", "result = ['<|endoftext|>']")
    prompt = build_rewrite_prompt(doc(text), text.index("values,"), [], tokenizer, capabilities, 20)
    assert prompt.chat and prompt.end_marker == CHAT_END_MARKER
    rendered = tokenizer.decode(prompt.prompt_ids, skip_special_tokens=False)
    assert rendered.endswith("<|fim_pad|>assistant\n```python\n")
    assert "says `# ... the region ...`):\n```python\ndef scale(values, factor):" in rendered and "(none)" in rendered
    assert rendered.count("def scale(values, factor):") == 1  # the region is shown once; the file has a line for it
    assert "import os\n\n\n# ... the region ...\n\n\ndef main():" in rendered
    assert prompt.prompt_ids.count(tokenizer.convert_tokens_to_ids("<|endoftext|>")) == 2  # the two turns' ends only
    assert tokenizer.decode(prompt.draft_ids) == prompt.region_text + "\n```"


def test_a_model_without_chat_template_or_fim_is_refused(starter_tokenizer):
    capabilities = read_capabilities(starter_tokenizer)
    bare = type(capabilities)(None, False, None, capabilities.stop_ids, False)
    with pytest.raises(NextEditUnsupported, match="chat template"):
        build_rewrite_prompt(doc(FUNCTION), 0, [], starter_tokenizer, bare, 20)


def test_a_blank_region_gives_no_prompt(starter_tokenizer):
    capabilities = read_capabilities(starter_tokenizer)
    assert build_rewrite_prompt(doc("\n\n\n"), 1, [], starter_tokenizer, capabilities, 1) is None


def test_the_prefill_ahead_is_preempted_by_the_requests_cancellation(starter_tokenizer):
    from types import SimpleNamespace

    from lsprotocol import types

    from lsp_server import request
    from lsp_server.model import completer
    from lsp_server.settings import Settings
    from lsp_server.workspace.positions import codec_for

    calls = []

    class RecordingBackend:
        tokenizer, capabilities, completion_stop_ids = starter_tokenizer, read_capabilities(starter_tokenizer), frozenset()

        def describe(self):
            return SimpleNamespace(target="starter")

        def prefill(self, prompt_ids, cache_key, should_stop, spare=False, preempt=None):
            calls.append((cache_key, should_stop, spare, preempt))
            return len(prompt_ids) - 1

    resolved = request.resolve_request(doc(FUNCTION), types.Position(line=3, character=10), codec_for("utf-32"),
                                       Settings())
    assert completer.prefill_rewrite(RecordingBackend(), resolved, ["-old\n+new"], lambda: False) > 0
    (cache_key, should_stop, spare, preempt), = calls
    assert cache_key == completer.rewrite_cache_key(resolved.uri) and not spare and not should_stop()
    assert not preempt()
    resolved.cancelled.set()  # a change cancels the request: the piece in flight is dropped
    assert preempt()
