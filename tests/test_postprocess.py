"""Post-processing rules (lsp_server.completion.postprocess) on hand-written model outputs, per language: text
right of the cursor not repeated, no automatic suggestion while indenting, completions on an empty
line and after a header at the end of the file (docs/cases.md L6, L7, L9, L10), block ends, closers,
syntax trimming; and the type-through cache."""

from __future__ import annotations

import pytest

from lsp_server.completion.mode import decide_mode, suppresses_automatic
from lsp_server.completion.postprocess import TrimContext, trim
from lsp_server.workspace.syntax import error_count, parser_for, supported_languages
from lsp_server.requests.type_through import TypeThroughCache

pytestmark = pytest.mark.unit


def run(prefix: str, suffix: str, text: str, language: str = "python", automatic: bool = True,
        finish: str = "stop"):
    line_suffix = suffix.split("\n", 1)[0]
    if automatic and suppresses_automatic(prefix[prefix.rfind("\n") + 1:], line_suffix):
        return None, None
    mode = decide_mode(prefix, line_suffix, language)
    return mode, trim(text, TrimContext(prefix, suffix, language, mode, finish))


def test_every_promised_language_has_a_working_grammar():
    for language in ("python", "javascript", "typescript", "typescriptreact", "go", "rust", "c", "cpp", "java"):
        assert language in supported_languages()
        parser = parser_for(language)
        assert parser is not None and error_count(parser, "}{") > 0


# Never repeat the suffix (docs/cases.md L6) ------------------------------------------------------

def test_l6_closing_text_right_of_the_cursor_is_not_repeated():
    mode, text = run("def area(radius", "):\n    return radius\n", "radius):")
    assert not mode.multi_line and text == "radius"
    assert run("def area(", "):\n", "radius)")[1] == "radius"  # a partial overlap of the closers


def test_l6_inside_braces_only_the_gap_is_filled():
    assert run("const x = { ok:", " }\n", " true }", "javascript")[1] == " true"


def test_l6_ordinary_words_that_happen_to_match_are_kept():
    # The completion's end equals the start of the rest of the line only by chance: keep it.
    assert run("x = ", "b + c\n", "a + b")[1] == "a + b"


@pytest.mark.parametrize("language,prefix,suffix,text,expected", [
    ("c", "int f(void) {\n    ", "\n}\n", "return 1;\n}", "return 1;"),
    ("cpp", "int f() {\n    ", "\n}\n", "return 1;\n}\n\nint g() {", "return 1;"),
    ("java", "class A {\n  int f() {\n    ", "\n  }\n}\n", "return 1;\n  }\n}", "return 1;"),
    ("go", "func f() int {\n\t", "\n}\n", "return 1\n}\n", "return 1"),
    ("rust", "fn f() -> i32 {\n    ", "\n}\n", "1\n}\n\nfn g() {}", "1"),
    ("javascript", "function f() {\n  ", "\n}\n", "return 1;\n}\nf();", "return 1;"),
    ("typescript", "function f(): number {\n  ", "\n}\n", "return 1;\n}", "return 1;"),
    ("python", "if x:\n    ", "\nelse:\n    pass\n", "y = 1\nelse:\n    pass", "y = 1"),
])
def test_l6_a_closing_line_already_below_is_not_emitted_again(language, prefix, suffix, text, expected):
    mode, result = run(prefix, suffix, text, language)
    assert mode.multi_line and result == expected


@pytest.mark.parametrize("language,prefix,text,expected", [
    ("c", "int f(void) {\n    ", "return 1;\n}\n\nint g(void) {", "return 1;\n}"),
    ("go", "func f() int {\n\t", "return 1\n}\n\nfunc g() {", "return 1\n}"),
    ("java", "class A {\n  int f() {\n    ", "return 1;\n  }\n", "return 1;\n  }"),
])
def test_an_unclosed_block_at_the_end_of_the_file_gets_its_closer(language, prefix, text, expected):
    assert run(prefix, "", text, language)[1] == expected


# No automatic suggestion while indenting (docs/cases.md L7) --------------------------------------

def test_l7_indenting_gets_no_automatic_suggestion_but_an_explicit_request_completes():
    mode, text = run("    ", "result = compute()\n", "x")
    assert mode is None and text is None
    mode, text = run("    ", "result = compute()\n", "x", automatic=False)
    assert not mode.multi_line and text == "x"
    assert suppresses_automatic("", "result = compute()")  # column 0 too
    assert not suppresses_automatic("x = ", "compute()")  # code left: not indenting
    assert not suppresses_automatic("    ", "   ")  # nothing right of the cursor: a blank line


# Empty line at column 0, end of file after a header (docs/cases.md L9, L10), block ends ----------

def test_l9_empty_line_at_column_0_is_offered_a_multi_line_completion():
    mode, text = run("def main():\n    x = 1\n", "", "    y = 2\n    return y\n\n\nif __name__ == '__main__':\n    main()\n")
    assert mode.multi_line and text == "    y = 2\n    return y"


def test_l9_a_new_top_level_definition_is_kept_until_the_next_one():
    text = run("import os\n\n", "", "def helper():\n    return 1\n\n\ndef other():\n    pass\n")[1]
    assert text == "def helper():\n    return 1"


def test_l10_end_of_file_after_a_header_gets_the_whole_body():
    mode, text = run("def add(a, b):\n    ", "", "total = a + b\n    return total\n\n\ndef sub(a, b):\n    pass")
    assert mode.multi_line and text == "total = a + b\n    return total"


def test_after_a_header_with_a_comment_the_completion_is_multi_line():
    mode, text = run("def f(x):  # the header, then a comment", "", "\n    y = x * 2\n    return y\nprint(1)")
    assert mode.multi_line and mode.reason == "after a block header"
    assert text == "\n    y = x * 2\n    return y"


def test_end_of_an_ordinary_line_is_single_line():
    mode, text = run("x = compute(", "", "1, 2)\ny = 3")
    assert not mode.multi_line and text == "1, 2)"


def test_a_last_line_cut_by_the_token_limit_is_dropped():
    text = run("def f():\n    ", "", "a = 1\n    b = [1,", finish="length")[1]
    assert text == "a = 1"


def test_a_trailing_header_without_its_block_is_dropped():
    text = run("def f(items):\n    ", "", "total = 0\n    for item in items:")[1]
    assert text == "total = 0"


@pytest.mark.parametrize("language,prefix,suffix,text,expected", [
    ("python", "def f():\n    ", "\n\nprint(f())\n", "a = 1\n    b = g(1,", "a = 1"),
    ("javascript", "function f() {\n  ", "\n}\n", "const a = 1;\n  const b = [1, (2;", "const a = 1;"),
    ("rust", "fn f() {\n    ", "\n}\n", "let a = 1;\n    let b = vec![1, 2;", "let a = 1;"),
])
def test_trailing_lines_that_break_the_syntax_are_dropped(language, prefix, suffix, text, expected):
    assert run(prefix, suffix, text, language)[1] == expected


def test_languages_without_a_grammar_fall_back_to_line_rules():
    mode, text = run("fn main() {\n    ", "", "println!(1);\n}\n\nfn g", "zig")
    assert mode.multi_line and text == "println!(1);\n}"
    assert run("x := f(", "", "1)\ny", "zig")[1] == "1)"


# Type-through cache ------------------------------------------------------------------------------

def test_type_through_answers_the_rest_after_matching_keystrokes():
    cache = TypeThroughCache()
    text = "def f():\n    \n"
    cache.remember("u", text, 13, "return 1")
    assert cache.lookup("u", text, 13) == "return 1"
    typed = text[:13] + "ret" + text[13:]
    assert cache.lookup("u", typed, 16) == "urn 1"
    assert cache.lookup("u", text[:13] + "rex" + text[13:], 16) is None  # typed something else
    assert cache.lookup("u", typed.replace("def f", "def g"), 16) is None  # text elsewhere changed
    assert cache.lookup("u", text[:13] + "return 1" + text[13:], 21) is None  # typed in full
    assert cache.lookup("other", typed, 16) is None
    cache.forget("u")
    assert cache.lookup("u", typed, 16) is None


@pytest.mark.parametrize("language", ["python", "javascript", "go"])
def test_incremental_error_counts_equal_fresh_parses(language):
    """TailTrimmer's incremental re-parses (edited old tree) count the same errors as parsing each text
    from scratch, for completions cut line by line, including non-ASCII text before the cut."""
    import random

    from lsp_server.workspace.syntax import TailTrimmer, error_count, parser_for

    rng = random.Random(0)
    parser = parser_for(language)
    pieces = {"python": ["x = (1,", "    y = 'é'", "if a:", "    pass", "return b", "]", "def f(", "z = {}"],
              "javascript": ["let x = [1,", "  y('é');", "if (a) {", "}", "return b;", ")", "function f(", "{"],
              "go": ["x := []int{1,", "  y(\"é\")", "if a {", "}", "return b", ")", "func f(", "{"]}[language]
    for _ in range(20):
        head = "\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 8))) + "\n"
        tail = "\n" + "\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        lines = [rng.choice(pieces) for _ in range(rng.randint(1, 10))]
        trimmer = TailTrimmer(parser, head, tail)
        for size in range(len(lines), 0, -1):
            middle = "\n".join(lines[:size])
            assert trimmer.error_count(middle) == error_count(parser, head + middle + tail), (head, middle, tail)


def test_syntax_window_is_the_enclosing_definition_not_a_cut_inside_a_docstring():
    """The parsed window starts at the enclosing definition and ends before the next one. A window cut
    at a fixed character count can start inside a docstring: valid code then parses with many errors."""
    from lsp_server.workspace.syntax import _WINDOW_HEAD_CHARS, syntax_window

    docstring = '    def earlier(self):\n        """' + "Words that are prose, not code.\n        " * 200 + '"""\n'
    prefix = "class A:\n" + docstring + "\n    def current(self, x):\n        y = x + 1\n        "
    suffix = "\n        return y\n\n    def later(self):\n        return 2\n"
    assert len(docstring) > _WINDOW_HEAD_CHARS
    head, tail = syntax_window(prefix, suffix)
    assert head.startswith("    def current(self, x):\n") and head.endswith("        y = x + 1\n        ")
    assert tail == "\n        return y\n"
    parser = parser_for("python")
    middle = "z = y * 2"
    assert error_count(parser, head + middle + tail) <= 1  # at most the indented first line
    assert error_count(parser, prefix[-_WINDOW_HEAD_CHARS:] + middle + suffix) > 5
    # brace languages: closing lines at the definition's depth stay in the tail
    head, tail = syntax_window("int a;\nint f() {\n  if (x) {\n    ", "\n  }\n}\nint g() {\n}\n")
    assert head == "int f() {\n  if (x) {\n    " and tail == "\n  }\n}"
    # a short prefix keeps its first line
    assert syntax_window("def f():\n    ", "")[0] == "def f():\n    "


@pytest.mark.parametrize("prefix, suffix, text", [
    ("def area(r):", "\n\nx = 1\n", "\n    return 3.14 * r * r\n\ndef other():\n    pass"),  # after a header
    ("class A:\n    def f(self):\n        if x:\n", "\n    def g(self):\n        pass\n",
     "            return (1,\n        y = [\n"),  # lines that open what they never close
    ("function f(a) {\n", "\n", "  return a;\n}\n}\n"),
])
def test_the_syntax_window_is_computed_once_by_the_caller_and_handed_to_mode_and_trim(monkeypatch, prefix, suffix, text):
    from lsp_server.completion import mode as completion_mode, postprocess
    from lsp_server.workspace import syntax

    language = "javascript" if prefix.startswith("function") else "python"
    line_suffix = suffix.split("\n", 1)[0]
    expected = run(prefix, suffix, text, language, automatic=False)
    window = syntax.syntax_window(prefix, suffix)

    def computed_again(*args):
        raise AssertionError("the syntax window was computed again")

    monkeypatch.setattr(completion_mode, "syntax_window", computed_again)
    monkeypatch.setattr(postprocess, "syntax_window", computed_again)
    mode = decide_mode(prefix, line_suffix, language, head=window[0])
    assert (mode, trim(text, TrimContext(prefix, suffix, language, mode, "stop", window))) == expected
    with pytest.raises(AssertionError, match="computed again"):  # without the window, it is computed here
        trim(text, TrimContext(prefix, suffix, language, mode, "stop"))
