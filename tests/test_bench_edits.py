"""``speclsp bench edits``: the refactor cases it cuts (bench.edit_cases) and its registration. The
measured run needs the next-edit engine and server parts and real models; it is not a test."""

from __future__ import annotations

import ast
import textwrap

import pytest

from bench.edit_cases import EditCase, Module, Replacement, apply, edit_cases, region_of, split_of
from bench.edit_scoring import equivalent, outside_reach, reach_lines, reversal
from bench.edits import _score, percentile, summarise

pytestmark = pytest.mark.unit

RENAME_SOURCE = textwrap.dedent('''\
    import os


    def scale(values, factor):
        """Scale values by factor; "factor" in text stays."""
        total = 0
        out = [value * factor for value in values]
        for item in out:
            total += item
        os.environ.update(factor=str(factor))
        return out, total, values.factor
''')


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_rename_cases_rename_the_bindings_never_strings_attributes_or_keyword_names(tmp_path):
    path = write(tmp_path, "scale.py", RENAME_SOURCE)
    seen = {"rename_parameter": set(), "rename_local": set()}
    for seed in range(16):  # each seed picks one parameter and one local bound here and occurring three times or more
        cases = edit_cases([path], 50, seed, workloads=("rename",))
        assert set(cases) == set(seen)
        for workload, (case,) in cases.items():
            name = case.before[case.user_edit.start:case.user_edit.end]
            seen[workload].add(name)
            assert case.user_edit.start == RENAME_SOURCE.index(name)  # the first occurrence: the user's edit
            if name == "factor":
                assert case.expected == RENAME_SOURCE.replace(
                    "values, factor):", "values, factor_value):").replace(
                    "value * factor", "value * factor_value").replace("str(factor)", "str(factor_value)")
            ast.parse(case.expected)
            ast.parse(case.edited)
            assert case.edited.count(name + "_value") == 1
            assert case.cursor == case.user_edit.start + len(name + "_value")
    # not `item` or `value` (twice each), not `os`
    assert seen == {"rename_parameter": {"values", "factor"}, "rename_local": {"total", "out"}}


def test_fix_typo_misspells_a_name_at_every_use_and_the_user_fixes_the_first(tmp_path):
    path = write(tmp_path, "scale.py", RENAME_SOURCE)
    names = set()
    for seed in range(12):
        (case,) = edit_cases([path], 50, seed, workloads=("fix_typo",))["fix_typo"]
        name = case.user_edit.text
        typo = case.before[case.user_edit.start:case.user_edit.end]
        names.add(name)
        assert typo != name and sorted(typo) == sorted(name) and len(name) >= 5
        assert case.expected == RENAME_SOURCE  # every use fixed: the file as it was written
        assert case.edited.count(typo) == len(case.followups) == 2  # three uses each, the first fixed
    assert names <= {"values", "factor", "total"} and len(names) >= 2  # `out` is too short for a typo


def test_rename_leaves_out_functions_with_nested_scopes_or_global_names(tmp_path):
    path = write(tmp_path, "skip.py", textwrap.dedent('''\
        def nested(arg):
            arg = arg + 1
            def inner():
                return arg
            return inner, arg


        def declared(base):
            global count
            count = base
            count = count + base
            return count
    '''))
    cases = edit_cases([path], 50, 0, workloads=("rename",))  # `count` is global, `nested` has a scope
    assert cases["rename_local"] == []
    (case,) = cases["rename_parameter"]
    assert case.before[case.user_edit.start:case.user_edit.end] == "base" and len(case.followups) == 2


ADD_PARAMETER_SOURCE = textwrap.dedent('''\
    class Tree:
        def depth(self, node):
            if node is None:
                return 0
            left = self.depth(node.left)
            right = self.depth(node.right)
            return 1 + max(left, right)

        def size(self):
            return self.depth(self.root) + self.depth(key=1)
''')


def test_add_parameter_passes_the_new_parameter_through_matching_calls_only(tmp_path):
    path = write(tmp_path, "tree.py", ADD_PARAMETER_SOURCE)
    (definition,) = edit_cases([path], 50, 0, workloads=("add_parameter",))["add_parameter"]
    case = definition
    assert case.edited.splitlines()[1] == "    def depth(self, node, context):"
    assert case.expected == ADD_PARAMETER_SOURCE.replace("def depth(self, node)", "def depth(self, node, context)").replace(
        "self.depth(node.left)", "self.depth(node.left, context)").replace(
        "self.depth(node.right)", "self.depth(node.right, context)").replace(
        "self.depth(self.root)", "self.depth(self.root, context)")  # the keyword call is left alone
    ast.parse(case.expected)


def test_add_parameter_follows_calls_in_the_region_only(tmp_path):
    source = ADD_PARAMETER_SOURCE.replace("    def size(self):", "\n" * 30 + "    def size(self):")
    assert source != ADD_PARAMETER_SOURCE
    path = write(tmp_path, "far.py", source)
    cases = edit_cases([path], 50, 0, region_lines=20, workloads=("add_parameter",))["add_parameter"]
    (case,) = [c for c in cases if c.source.endswith(":2")]  # the definition's side
    assert len(case.followups) == 2  # the class no longer fits a region: only the recursive calls are in depth's
    assert [c for c in edit_cases([path], 50, 0, region_lines=0, workloads=("add_parameter",))["add_parameter"]
            if c.source.endswith(":2")] == []


def test_add_parameter_from_the_calls_side_has_the_signature_change_as_a_prior_edit(tmp_path):
    source = ("def scale(values, factor):\n    return [v * factor for v in values]\n" + "\n" * 30 +
              "def main(a, b):\n    x = scale(a, 2)\n    y = scale(b, 3)\n    z = scale(a, b, 4)\n    return x, y, z\n")
    path = write(tmp_path, "far.py", source)
    (case,) = edit_cases([path], 50, 0, workloads=("add_parameter",))["add_parameter"]
    assert case.prior and case.edited.startswith("def scale(values, factor, context):")
    assert "x = scale(a, 2, context)" in case.edited and "y = scale(b, 3)\n" in case.edited
    assert case.cursor == case.edited.index("2, context)") + len("2, context")
    # the call with another argument count is left alone
    assert case.expected == case.edited.replace("scale(b, 3)", "scale(b, 3, context)")
    start = case.edited.index("def main")
    assert case.expected_region(start, len(case.edited)) == (case.expected[start:], 1)
    assert case.before_user.startswith("def scale(values, factor, context):") and "x = scale(a, 2)" in case.before_user
    text, made = case.before, case.edits_in_turn  # each edit's offsets are into the text as it was then
    for edit in made:
        text = text[:edit.start] + edit.text + text[edit.end:]
    assert text == case.edited and made[-1] == case.user_in_before_user and made[0] == case.prior[0]


def test_add_parameter_goes_before_the_defaults_and_calls_may_pass_keywords(tmp_path):
    source = textwrap.dedent('''\
        def load(path, mode="r", *, strict=False):
            if strict:
                return load(path.parent, strict=True)
            return load(path, "w"), load(path)
    ''')
    path = write(tmp_path, "load.py", source)
    cases = edit_cases([path], 50, 0, workloads=("add_parameter",))["add_parameter"]
    (case,) = [c for c in cases if c.source.endswith(":1")]
    assert case.edited.startswith("def load(path, context, mode=")
    # load(path, "w") passes a defaulted parameter by position: it is left alone
    assert case.expected == source.replace("(path, mode", "(path, context, mode").replace(
        "load(path.parent, strict", "load(path.parent, context, strict").replace(", load(path)\n", ", load(path, context)\n")


def test_keyword_cases_rename_the_keyword_in_later_calls_of_the_same_callee(tmp_path):
    source = textwrap.dedent('''\
        def main(parser):
            parser.add_argument("a", nargs="?", help="first")
            parser.add_argument("b", nargs=2)
            other(nargs=3)
            parser.add_argument("c", help="nargs=")
    ''')
    path = write(tmp_path, "cli.py", source)
    cases = edit_cases([path], 50, 0, workloads=("keyword",))["keyword"]
    by_keyword = {c.before[c.user_edit.start:c.user_edit.end]: c for c in cases}
    assert set(by_keyword) == {"nargs", "help"}
    assert by_keyword["nargs"].expected == source.replace('"a", nargs=', '"a", nargs_value=').replace(
        '"b", nargs=', '"b", nargs_value=')  # other(nargs=3) and the string are left alone
    assert by_keyword["help"].expected == source.replace("help=", "help_value=")


def test_expected_region_applies_the_followups_inside_the_region_in_edited_coordinates():
    before = "val = 1\nuse(val)\nuse(val)\n"
    case = EditCase("rename", "t.py:1", before, Replacement(0, 3, "value"),
                    (Replacement(12, 15, "value"), Replacement(21, 24, "value")))
    edited = case.edited
    assert edited == "value = 1\nuse(val)\nuse(val)\n" and case.cursor == 5
    assert case.expected == "value = 1\nuse(value)\nuse(value)\n"
    assert case.expected_region(0, len(edited)) == (case.expected, 2)
    assert case.expected_region(10, 19) == ("use(value)\n", 1)  # the second line only
    assert case.expected_region(0, 10) == ("value = 1\n", 0)
    assert case.expected_region(0, 15) is None  # ends inside the first follow-up
    assert case.expected_region(16, len(edited)) is None  # starts inside it


def test_apply_refuses_overlapping_replacements_and_cases_are_deterministic(tmp_path):
    assert apply("abcdef", [Replacement(4, 6, "X"), Replacement(0, 1, "")]) == "bcdX"
    with pytest.raises(ValueError, match="overlap"):
        apply("abcdef", [Replacement(0, 3, "X"), Replacement(2, 4, "Y")])
    paths = [write(tmp_path, "scale.py", RENAME_SOURCE), write(tmp_path, "tree.py", ADD_PARAMETER_SOURCE),
             write(tmp_path, "broken.py", "def f(:\n")]
    assert edit_cases(paths, 5, 3) == edit_cases(paths, 5, 3)


def test_a_workloads_cases_do_not_depend_on_the_other_workloads_asked_for(tmp_path):
    paths = [write(tmp_path, f"m{n}.py", RENAME_SOURCE.replace("scale", f"scale{n}") +
                   ADD_PARAMETER_SOURCE.replace("Tree", f"Tree{n}")) for n in range(6)]
    for seed in range(4):
        both = edit_cases(paths, 2, seed, workloads=("rename", "add_parameter"))
        assert both["rename_local"] == edit_cases(paths, 2, seed, workloads=("rename_local",))["rename_local"]
        assert both["add_parameter"] == edit_cases(paths, 2, seed, workloads=("add_parameter",))["add_parameter"]
    with pytest.raises(ValueError, match="unknown workloads"):
        edit_cases(paths, 5, 0, workloads=("rename", "reformat"))
    with pytest.raises(ValueError, match="unknown split"):
        edit_cases(paths, 5, 0, split="train")


def test_the_dev_and_test_splits_share_no_file_and_hold_every_case(tmp_path):
    paths = [write(tmp_path, f"m{n}.py", RENAME_SOURCE.replace("scale", f"scale{n}")) for n in range(12)]
    dev = edit_cases(paths, 100, 0, workloads=("rename_local",), split="dev")["rename_local"]
    test = edit_cases(paths, 100, 0, workloads=("rename_local",), split="test")["rename_local"]
    every = edit_cases(paths, 100, 0, workloads=("rename_local",))["rename_local"]
    dev_files = {c.source.rsplit(":", 1)[0] for c in dev}
    test_files = {c.source.rsplit(":", 1)[0] for c in test}
    assert dev and test and not dev_files & test_files
    assert sorted(c.source for c in dev + test) == sorted(c.source for c in every)
    assert all(split_of(c.source) == "dev" for c in dev)


def test_summarise_separates_the_prefill_from_the_speedup():
    def row(latency_ms, prefill_ms, tokens, passes, exact=True):
        return {"exact": exact, "exact_text": exact, "parses": True, "unchanged": False, "reversal": False,
                "withheld": not exact, "outside": 0 if exact else 2, "tokens": tokens, "passes": passes, "latency_ms": latency_ms,
                "prefill_ms": prefill_ms, "prompt_tokens": 1000, "identical": True, "parted": None}

    plain = [row(50_000, 10_000, 100, 100), row(30_000, 10_000, 60, 60)]
    spec = [row(15_000, 10_000, 100, 10), row(14_000, 10_000, 60, 8, exact=False)]
    summary = summarise(spec, plain)
    assert summary["speedup"] == round(80_000 / 29_000, 2)
    assert summary["speedup_after_prefill"] == round(60_000 / 9_000, 2)
    assert summary["tokens_per_pass"] == round(160 / 18, 2) and summary["prefill_ms_p50"] == 10_000
    assert summary["exact"] == 0.5 and summary["outside"] == 0.5 and summary["reversal"] == 0
    assert summary["withheld"] == 0.5
    no_reference = summarise(spec, None)
    assert "speedup" not in no_reference and no_reference["identical_to_plain"] is None


def test_report_helpers():
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0 and percentile([5.0, 1.0, 3.0], 95) == 5.0


def test_bench_edits_is_registered_without_the_next_edit_modules_loaded():
    from bench import edits
    from lsp_server.cli import build_parser

    args = build_parser().parse_args(["bench", "edits", "--quick", "--workloads", "rename"])
    assert args.run is edits.run and args.quick and args.corpus == "2026" and args.mode == "auto"


def test_region_of_is_the_outermost_definition_that_fits_else_lines_around_the_edit():
    source = "import os\n\n" + ADD_PARAMETER_SOURCE + "\n" + "x = 1\n" * 40
    module = Module(source, "t.py")
    tree_start = source.split("\n").index("class Tree:") + 1
    assert region_of(module, tree_start + 4, 20) == (tree_start, tree_start + 9)  # the whole class fits
    assert region_of(module, tree_start + 4, 8) == (tree_start + 1, tree_start + 6)  # only the method does
    assert region_of(module, 30, 20) == (25, 44)  # outside any definition: a quarter above, the rest below
    assert region_of(module, 2, 20) == (1, 20)


def test_keyword_calls_in_another_function_do_not_follow(tmp_path):
    body = "".join(f"    step{i}()\n" for i in range(15))
    source = f"def one(p):\n    p.add(name=1)\n{body}    p.add(name=2)\n\n\ndef two(p):\n    p.add(name=3)\n    return p\n"
    path = write(tmp_path, "two.py", source)
    (case,) = edit_cases([path], 50, 0, workloads=("keyword",))["keyword"]
    assert case.expected == source.replace("name=1", "name_value=1").replace("name=2", "name_value=2")



SCORED = textwrap.dedent('''\
    import math


    def area(radius, scale):
        # the circle's area
        full = math.pi * radius * radius
        return full * scale, radius
''')


def _rename_case() -> EditCase:
    first = SCORED.index("radius")
    rest = [i for i in range(first + 1, len(SCORED)) if SCORED.startswith("radius", i)]
    return EditCase("rename_parameter", "s.py:4", SCORED, Replacement(first, first + 6, "r"),
                    tuple(Replacement(i, i + 6, "r") for i in rest))


def test_equivalent_counts_the_new_argument_by_keyword_or_position_but_not_a_lost_comment():
    expected = "def f(a, context):\n    return g(a, context)  # keep\n"
    assert equivalent("def f(a, context):\n    return g(a, context=context)  # keep\n", expected)
    assert equivalent("def f(a, context):\n    return g(a,\n             context)  # keep\n", expected)
    assert not equivalent("def f(a, context):\n    return g(a, context)\n", expected)  # the comment is gone
    assert not equivalent("def f(a, context):\n    return g(context, a)  # keep\n", expected)
    assert not equivalent("def f(a, context):\n    return g(a, context=other)  # keep\n", expected)
    assert not equivalent("def f(a, context:\n", expected)


def test_reversal_and_outside_reach_of_a_suggestion():
    case = _rename_case()
    start = case.edited.index("def area")
    end = len(case.edited.rstrip("\n"))
    region = case.edited[start:end]
    right = case.expected[start:len(case.expected.rstrip("\n"))]
    assert reach_lines(case, start, end) == {0, 2, 3}  # the def line and the two lines using radius
    assert outside_reach(case, start, end, right) == 0 and not reversal(case, start, end, right)
    assert outside_reach(case, start, end, region) == 0  # unchanged: nothing outside either
    # the context's import written into the region, and the comment reworded: two lines outside the reach
    copied = "import math\n" + right.replace("# the circle's area", "# area")
    assert outside_reach(case, start, end, copied) == 2
    # the user's rename undone (the edit renamed back), the rest left: a reversal
    undone = region.replace("def area(r, scale)", "def area(radius, scale)")
    assert reversal(case, start, end, undone) and not reversal(case, start, end, region)


def test_a_suggestion_is_scored_over_the_span_it_replaces_the_region_widened():
    from types import SimpleNamespace

    from lsp_server.workspace.syntax import parser_for

    case = _rename_case()
    start = case.edited.index("    full")  # the region: the body's last two lines
    end = len(case.edited.rstrip("\n"))
    expected = case.expected[start:len(case.expected.rstrip("\n"))]
    prompt = SimpleNamespace(region_start=start, region_end=end)
    comment = case.edited.index("    # the")
    parser = parser_for("python")

    def score(span_start, text):
        return _score(case, SimpleNamespace(prompt=prompt, start=span_start, end=end, text=text, withheld=False), expected, parser)

    # the answer began with the line above the region, as it is: scored over the widened span, exact
    widened = score(comment, "    # the circle's area\n" + expected + "\n")
    assert widened["exact"] and widened["exact_text"] and widened["outside"] == 0 and not widened["unchanged"]
    # the same answer applied over the region alone writes that line twice: not exact, one line outside
    doubled = score(start, "    # the circle's area\n" + expected)
    assert not doubled["exact"] and not doubled["exact_text"] and doubled["outside"] == 1
    assert score(start, case.edited[start:end])["unchanged"]
    # widened over the line above the region without carrying the rename there: exact for the region
    region_only = score(comment, "    # the circle's area\n" + expected)
    assert region_only["exact"] and region_only["outside"] == 0


def test_a_suggestion_carried_past_its_region_is_exact_when_right_over_its_span():
    from types import SimpleNamespace

    from lsp_server.workspace.syntax import parser_for

    case = _rename_case()
    start = case.edited.index("    full")  # the region: the line "full = ..." alone
    end = case.edited.index("\n", start)
    last = len(case.edited.rstrip("\n"))  # the span, widened over the return line
    expected = case.expected_region(start, end)[0]
    prompt = SimpleNamespace(region_start=start, region_end=end)

    def score(text):
        return _score(case, SimpleNamespace(prompt=prompt, start=start, end=last, text=text, withheld=False), expected,
                      parser_for("python"))

    carried = score(expected + "\n    return full * scale, r")
    copied = score(expected + "\n    return full * scale, radius")
    wrong = score(expected + "\n    return full * scale, rr")
    assert carried["exact"] and copied["exact"] and not wrong["exact"]
    assert carried["outside"] == copied["outside"] == 0
