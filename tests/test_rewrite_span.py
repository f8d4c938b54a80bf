"""lsp_server.next_edit.span: the span a next-edit answer replaces, widened to the lines it wrote again."""

from __future__ import annotations

import textwrap

import pytest

from lsp_server.next_edit.span import covered_span
from lsp_server.next_edit.text_edits import apply_edits, minimal_edits
from lsp_server.workspace.documents import Document

pytestmark = pytest.mark.unit

SOURCE = textwrap.dedent('''\
    import math


    def area(r, scale):
        full = math.pi * radius * radius
        return full * scale
    result = area(
        2,
        3,
    )
    print(result)
''')


def span(text: str, first: str, last: str, answer: str) -> tuple[int, int, str]:
    """(start, end, the document once the answer replaces that span) for the region from the line
    starting with ``first`` to the end of the line starting with ``last``."""
    document = Document("file:///t.py", text, 1, "python")
    start = text.index(first)
    end = text.index("\n", text.index(last))
    start, end, kept = covered_span(document, start, end, answer)
    return start, end, apply_edits(text, minimal_edits(text[start:end], kept, start))


def test_an_answer_within_the_region_replaces_the_region():
    answer = "def area(r, scale):\n    full = math.pi * r * r\n    return full * scale"
    start, end, after = span(SOURCE, "def area", "    return", answer)
    assert (start, end) == (SOURCE.index("def area"), SOURCE.index("\nresult"))
    assert after == SOURCE.replace("radius", "r")


def test_lines_the_answer_goes_on_to_write_below_the_region_are_not_written_twice():
    # the region ends inside the call; the answer goes on with the lines after it, as they are
    answer = "result = area(\n    2,\n    3,\n)\nprint(result)"
    start, end, after = span(SOURCE, "result", "    2,", answer)
    assert end == len(SOURCE) - 1 and after == SOURCE
    # or with the change carried into them: an edit there, nothing doubled
    carried = "result = area(\n    2,\n    scale=3,\n)"
    assert span(SOURCE, "result", "    2,", carried)[2] == SOURCE.replace("    3,", "    scale=3,")


def test_a_line_from_above_the_region_written_again_is_not_inserted():
    answer = "import math\n\n\ndef area(r, scale):\n    full = math.pi * r * r\n    return full * scale"
    start, end, after = span(SOURCE, "def area", "    return", answer)
    assert start == 0 and after == SOURCE.replace("radius", "r")


def test_blank_lines_alone_never_widen_and_new_lines_stay_insertions():
    text = "a = 1\n\nb = 2\n\nc = 3\n"
    start, end, after = span(text, "b = 2", "b = 2", "\nb = 2\nb2 = 2")
    assert (start, end) == (text.index("b = 2"), text.index("b = 2") + 5)
    assert after == "a = 1\n\n\nb = 2\nb2 = 2\n\nc = 3\n"


def test_widening_reaches_no_further_than_the_answer_has_lines_and_keeps_crlf_line_ends():
    text = "x = 1\r\ny = 2\r\nz = 3\r\nw = 4\r\n"
    document = Document("file:///t.py", text, 1, "python")
    region = (text.index("x"), text.index("\r\ny"))
    assert covered_span(document, *region, "x = 10\r\ny = 2") == (0, text.index("\r\nz"), "x = 10\r\ny = 2")
    # "w = 4" lies three lines below the region: past the answer's two lines, so it does not count
    assert covered_span(document, *region, "x = 10\r\nw = 4") == (*region, "x = 10\r\nw = 4")


def test_lines_the_answer_leaves_out_below_the_region_are_not_deleted_and_what_follows_is_not_doubled():
    # the answer closes the call after "2," leaving out "3,": the span stays the region, the ")" is dropped
    answer = "result = area(\n    2,\n)"
    start, end, after = span(SOURCE, "result", "    2,", answer)
    assert end == SOURCE.index("\n    3,") and after == SOURCE
    # it goes on past a left-out line: widened only up to that line, the rest of the answer dropped
    answer = "def area(r, scale):\n    full = math.pi * r * r\nresult = area(\n    2,\n)\nprint(result)"
    start, end, after = span(SOURCE, "def area", "    full", answer)
    assert after == SOURCE.replace("radius", "r")


def test_lines_left_out_above_the_region_are_not_deleted_and_the_ones_written_again_not_doubled():
    answer = "import math\n\ndef area(r, scale):\n    full = math.pi * r * r"  # one blank line of two
    start, end, after = span(SOURCE, "def area", "    full", answer)
    assert start == SOURCE.index("def area") and after == SOURCE.replace("radius", "r", 2)
