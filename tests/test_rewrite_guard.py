"""A next-edit rewrite that undoes the user's latest edit is withheld (lsp_server/next_edit/guard.py): the
guard flags a rewrite that puts an edited line back as it was or drops the lines the user just added, and
leaves alone rewrites that carry the edit through, finish a line being typed, or touch other lines."""

from __future__ import annotations

import pytest

from lsp_server.next_edit.formats import changed_lines
from lsp_server.next_edit.guard import undoes_edit

pytestmark = pytest.mark.unit

KEYWORD_DIFF = ("--- a/loss.py\n+++ b/loss.py\n@@ -93,1 +93,1 @@\n"
                "-    rows = torch.tensor(keys, device=index.device)\n"
                "+    rows = torch.tensor(keys, device_value=index.device)")
REGION = ("    rows = torch.tensor(keys, device_value=index.device)\n"
          "    cols = torch.tensor(values, device=index.device)\n"
          "    return rows, cols")


def test_changed_lines_leave_out_headers_and_context():
    diff = "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a = 1\n-b = 2\n+b = 3\n c = 4"
    assert changed_lines(diff) == (["b = 2"], ["b = 3"])


def test_putting_the_edited_line_back_is_undoing_it():
    # the 1.5B read the new keyword as a typo (bench edits, test set: loss/loss_deimv2.py:93)
    reverted = REGION.replace("device_value=", "device=")
    assert undoes_edit(REGION, reverted, KEYWORD_DIFF)


def test_carrying_the_edit_through_or_leaving_it_is_not():
    carried = REGION.replace("device=", "device_value=")
    assert not undoes_edit(REGION, carried, KEYWORD_DIFF)
    assert not undoes_edit(REGION, REGION, KEYWORD_DIFF)
    # another line changed, the user's line kept: not an undo
    assert not undoes_edit(REGION, REGION.replace("return rows, cols", "return cols, rows"), KEYWORD_DIFF)
    # the user's line changed further (not back): not an undo
    assert not undoes_edit(REGION, REGION.replace("device_value=index.device", "device_value=index.device, "
                                                  "dtype=torch.long"), KEYWORD_DIFF)


def test_a_region_without_the_edited_line_is_never_undoing_it():
    elsewhere = "    cols = torch.tensor(values, device=index.device)\n    return rows, cols"
    assert not undoes_edit(elsewhere, elsewhere.replace("return", "return  "), KEYWORD_DIFF)


def test_dropping_the_lines_the_user_added_is_undoing_them_but_finishing_them_is_not():
    diff = "--- a/x.py\n+++ b/x.py\n@@ -2,1 +2,2 @@\n     a = 1\n+    log(a)"
    span = "    a = 1\n    log(a)\n    return a"
    assert undoes_edit(span, "    a = 1\n    return a", diff)
    assert not undoes_edit(span, "    a = 1\n    log(a, level=2)\n    return a", diff)
    assert not undoes_edit(span, "    a = 1\n    log(a)\n    return a + 1", diff)


def test_a_deletion_is_never_taken_back_and_blank_lines_never_count():
    deletion = "--- a/x.py\n+++ b/x.py\n@@ -2,2 +2,1 @@\n     a = 1\n-    print(a)"
    assert not undoes_edit("    a = 1\n    return a", "    a = 1\n    print(a)\n    return a", deletion)
    blank = "--- a/x.py\n+++ b/x.py\n@@ -2,1 +2,2 @@\n     a = 1\n+"
    assert not undoes_edit("    a = 1\n\n    return a", "    a = 1\n    return a", blank)


def test_line_endings_and_trailing_spaces_do_not_matter():
    reverted = REGION.replace("device_value=", "device=").replace("\n", "  \r\n")
    assert undoes_edit(REGION.replace("\n", "\r\n"), reverted, KEYWORD_DIFF)


class AnswerBackend:
    """A backend whose every rewrite answers ``answer`` (the server's path around the model, no model)."""

    def __init__(self, answer: str):
        from transformers import AutoTokenizer

        from decoding.weights.capabilities import read_capabilities
        from decoding.weights.starter import TARGET_DIR

        self.answer = answer
        self.tokenizer = AutoTokenizer.from_pretrained(TARGET_DIR)
        self.capabilities = read_capabilities(self.tokenizer)
        self.completion_stop_ids = frozenset()

    def describe(self):
        from types import SimpleNamespace
        return SimpleNamespace(target="starter")

    def rewrite(self, prompt, config, drafter, should_stop, cache_key=None):
        from decoding.stats import GenerationStats
        from decoding.types import FinishReason, Generation
        return Generation([], self.answer, FinishReason.STOP, GenerationStats())


@pytest.mark.parametrize("carried", [False, True])
def test_the_server_withholds_a_rewrite_that_undoes_the_edit(carried):
    from lsprotocol import types

    from lsp_server import request
    from lsp_server.model import completer
    from lsp_server.settings import Settings
    from lsp_server.workspace.documents import Document
    from lsp_server.workspace.positions import codec_for

    text = f"def pairs(keys, values, index):\n{REGION}\n"
    document = Document("file:///w/loss.py", text, 2, "python")
    answer = text[:-1].replace("device_value=" if not carried else "device=", "device=" if not carried else "device_value=")
    resolved = request.resolve_request(document, types.Position(line=1, character=40), codec_for("utf-32"), Settings())
    result = completer.rewrite(AnswerBackend(answer), resolved, [KEYWORD_DIFF])
    assert result.withheld is not carried
    if carried:  # the same path shows a rewrite that carries the edit through
        assert [text[start:end] + ">" + new for start, end, new in result.edits] == ["device>device_value"]
    else:
        assert result.edits == [] and result.text == result.prompt.region_text


def test_a_rewrite_that_drops_most_of_the_region_is_withheld_unless_the_user_is_deleting():
    from lsp_server.next_edit.guard import MIN_DROPPED_LINES, drops_region, withholds

    region = "\n".join(f"    line_{i} = {i}" for i in range(20))
    tail = "\n".join(region.split("\n")[-3:])  # the 1.5B wrote back only the last 3 of 20 lines
    assert drops_region(region, tail, KEYWORD_DIFF) and withholds(region, tail, KEYWORD_DIFF)
    assert drops_region(region, tail, "")  # no recorded edit: the same
    kept = "\n".join(region.split("\n")[:11])  # 11 of 20 kept: more than half
    assert not drops_region(region, kept, KEYWORD_DIFF)
    short = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6"
    assert not drops_region(short, "a = 1\nb = 2\nc = 3", KEYWORD_DIFF)  # 3 gone: fewer than MIN_DROPPED_LINES
    assert MIN_DROPPED_LINES == 4 and drops_region(short + "\ng = 7\nh = 8", "a = 1\nb = 2\nc = 3", KEYWORD_DIFF)
    deleting = "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,1 @@\n     line_0 = 0\n-    line_1 = 1"
    assert not drops_region(region, tail, deleting)  # the user deletes lines: the rewrite may follow
    assert not withholds(region, region.replace("line_5 = 5", "line_5 = 50"), KEYWORD_DIFF)
    # blank lines do not count as lines kept or dropped
    assert drops_region(region.replace("\n", "\n\n"), tail, KEYWORD_DIFF)
