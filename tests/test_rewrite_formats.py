"""The next-edit prompt formats (lsp_server/next_edit/formats.py): each drafts the region and its end marker,
shows the recent edits and the region, keeps what an edit inside the region leaves unchanged at the
prompt's start, and a format the model cannot take is refused with a clear error."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from decoding.weights.capabilities import read_capabilities
from decoding.weights.starter import TARGET_DIR
from lsp_server.next_edit.formats import FILE_SEP, FORMATS, REGION_END, REGION_START, CURSOR, split_diff
from lsp_server.next_edit.prompt import NextEditUnsupported, build_rewrite_prompt, choose_format
from lsp_server.workspace.documents import Document

pytestmark = pytest.mark.unit

FUNCTION = ("import os\n\n\ndef scale(values, factor):\n    result = []\n    for value in values:\n"
            "        result.append(value * factor)\n    return result\n\n\ndef main():\n    print(scale([1], 2))\n")
RENAMED = FUNCTION.replace("(values, factor)", "(items, factor)")
DIFF = "--- a/a.py\n+++ b/a.py\n@@ -4,1 +4,1 @@\n-def scale(values, factor):\n+def scale(items, factor):"


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR)
    tokenizer.chat_template = ("{% for m in messages %}<|fim_pad|>{{ m.role }}\n{{ m.content }}<|endoftext|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|fim_pad|>assistant\n{% endif %}")
    return tokenizer


def prompt_for(tokenizer, text: str, prompt_format: str, diffs=(DIFF,)):
    document = Document("file:///w/a.py", text, 2, "python")
    return build_rewrite_prompt(document, text.index("(items") + 6 if "(items" in text else text.index("values,"),
                                list(diffs), tokenizer, read_capabilities(tokenizer), 20, prompt_format)


@pytest.mark.parametrize("prompt_format", FORMATS)
def test_each_format_drafts_the_region_and_shows_the_edit(tokenizer, prompt_format):
    prompt = prompt_for(tokenizer, RENAMED, prompt_format)
    region = RENAMED[RENAMED.index("def scale"):RENAMED.index("\n\n\ndef main")]
    assert prompt.region_text == region and prompt.prompt_format == prompt_format
    rendered = tokenizer.decode(prompt.prompt_ids, skip_special_tokens=False)
    assert "items" in rendered and "values, factor" in rendered  # the edit, before and after
    assert "import os" in rendered.split(region)[0]  # the file around the region comes first
    draft = tokenizer.decode(prompt.draft_ids, skip_special_tokens=False)
    predicted = region.replace("in values", "in items")  # the rename carried through (the draft only)
    if prompt_format == "sweep":
        assert draft == predicted + "\n" + FILE_SEP and prompt.trailing_break and prompt.end_marker == "\n```"
        assert rendered.endswith(f"{FILE_SEP}updated/a.py\n")
        assert f"{FILE_SEP}original/a.py\n{region.replace('items', 'values')}\n{FILE_SEP}current/a.py\n{region}\n" in rendered
    else:
        assert draft == predicted + prompt.end_marker and not prompt.trailing_break
    if prompt_format.startswith("zeta"):
        assert rendered.endswith(f"{REGION_START}\n") and prompt.end_marker == f"\n{REGION_END}"
        assert f"def scale(items{CURSOR}, factor)" in rendered


@pytest.mark.parametrize("prompt_format", FORMATS)
def test_an_edit_inside_the_region_keeps_the_prompts_start(tokenizer, prompt_format):
    first = prompt_for(tokenizer, RENAMED, prompt_format)
    again = prompt_for(tokenizer, RENAMED.replace("result = []", "result = list()"), prompt_format)
    shared = next(i for i, (a, b) in enumerate(zip(first.prompt_ids, again.prompt_ids)) if a != b)
    before_region = len(tokenizer(RENAMED[:RENAMED.index("def scale")])["input_ids"])
    assert shared >= before_region  # at least the file above the region is the same prefix


def test_a_format_the_model_cannot_take_is_refused(tokenizer):
    starter = AutoTokenizer.from_pretrained(TARGET_DIR)  # no chat template
    capabilities = read_capabilities(starter)
    for prompt_format in ("chat", "zeta_chat"):
        with pytest.raises(NextEditUnsupported, match="chat template"):
            choose_format(prompt_format, capabilities)
    with pytest.raises(NextEditUnsupported, match="unknown next-edit prompt format"):
        choose_format("diff", capabilities)
    assert choose_format("auto", capabilities) == "plain"
    assert choose_format("auto", read_capabilities(tokenizer)) in FORMATS


def test_split_diff_gives_the_original_and_updated_lines():
    assert split_diff(DIFF + "\n  return 1") == ("def scale(values, factor):\n return 1", "def scale(items, factor):\n return 1")


def test_a_rename_the_latest_edit_shows_shapes_the_draft(tokenizer):
    from lsp_server.next_edit.edit_summary import renamed_word
    from lsp_server.next_edit.prompt import predicted_region

    assert renamed_word([DIFF]) == ("values", "items")
    region = "def scale(items, factor):\n    for value in values:\n        out.values = values_2 + values\n"
    assert predicted_region(region, [DIFF]) == (
        "def scale(items, factor):\n    for value in items:\n        out.values = values_2 + items\n")
    assert renamed_word([DIFF.replace("+def scale(items, factor):", "+def scale(items, factor, context):")]) is None
    assert renamed_word([DIFF.replace("+def scale(items, factor):", "+def scale(items, scale):")]) is None  # two changed
    assert renamed_word([]) is None and predicted_region(region, []) == region
    prompt = prompt_for(tokenizer, RENAMED, "chat")
    assert tokenizer.decode(prompt.draft_ids).startswith(prompt.region_text.replace("in values", "in items"))
    assert "in values" in prompt.region_text  # the region itself is as the user left it


def diff_of(old: str, new: str) -> str:
    return f"--- a/a.py\n+++ b/a.py\n@@ -1,1 +1,1 @@\n-{old}\n+{new}"


def test_a_new_parameter_or_argument_or_keyword_the_latest_edit_shows_shapes_the_draft():
    from lsp_server.next_edit.prompt import predicted_region

    region = ("def scale(values, factor, context):\n    a = scale(x, 2)\n    b = self.scale(y, f(3))\n"
              "    c = scale(\n        z,\n        4,\n    )\n    d = scale()\n    e = scale(w, context)\n"
              "    return rescale(a)\n")
    parameter = diff_of("def scale(values, factor):", "def scale(values, factor, context):")
    assert predicted_region(region, [parameter]) == (
        "def scale(values, factor, context):\n    a = scale(x, 2, context)\n    b = self.scale(y, f(3), context)\n"
        "    c = scale(\n        z,\n        4, context,\n    )\n    d = scale(context)\n    e = scale(w, context)\n"
        "    return rescale(a)\n")  # the definition, a call that has it and another function's calls stay
    argument = diff_of("    a = scale(x, 2)", "    a = scale(x, 2, context)")
    assert predicted_region(region, [argument]) == predicted_region(region, [parameter])
    keyword = diff_of("    run(nargs=1)", "    run(nargs_value=1)")
    calls = "    run(nargs_value=1)\n    nargs = 2\n    run(nargs=nargs, x=obj.nargs)\n"
    assert predicted_region(calls, [keyword]) == "    run(nargs_value=1)\n    nargs = 2\n    run(nargs_value=nargs, x=obj.nargs)\n"
    unrecognised = diff_of("    a = scale(x, 2)", "    a = scale(x + 1, 2)")
    assert predicted_region(region, [unrecognised]) == region
