"""``speclsp bench edits``: the refactor cases it cuts (bench.edit_cases) and its registration. The
measured run needs the next-edit engine and server parts and real models; it is not a test."""

from __future__ import annotations

import ast
import textwrap

import pytest

from bench.edit_cases import EditCase, Module, Replacement, apply, edit_cases, region_of
from bench.edits import percentile, same_region, summarise

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
    seen = set()
    for seed in range(16):  # each seed picks one of the names bound here and occurring three times or more
        (case,) = edit_cases([path], 50, seed, workloads=("rename",))["rename"]
        name = case.before[case.user_edit.start:case.user_edit.end]
        seen.add(name)
        assert case.user_edit.start == RENAME_SOURCE.index(name)  # the first occurrence: the user's edit
        if name == "factor":
            assert case.expected == RENAME_SOURCE.replace(
                "values, factor):", "values, factor_value):").replace(
                "value * factor", "value * factor_value").replace("str(factor)", "str(factor_value)")
        ast.parse(case.expected)
        ast.parse(case.edited)
        assert case.edited.count(name + "_value") == 1
        assert case.cursor == case.user_edit.start + len(name + "_value")
    assert seen == {"values", "factor", "total", "out"}  # not `item` or `value` (twice each), not `os`


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
    (case,) = edit_cases([path], 50, 0, workloads=("rename",))["rename"]  # `count` is global, `nested` has a scope
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
    (case,) = edit_cases([path], 50, 0, workloads=("add_parameter",))["add_parameter"]
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
    (case,) = edit_cases([path], 50, 0, region_lines=20, workloads=("add_parameter",))["add_parameter"]
    assert len(case.followups) == 2  # the class no longer fits a region: only the recursive calls are in depth's
    assert edit_cases([path], 50, 0, region_lines=0, workloads=("add_parameter",))["add_parameter"] == []


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
        assert both["rename"] == edit_cases(paths, 2, seed, workloads=("rename",))["rename"]
        assert both["add_parameter"] == edit_cases(paths, 2, seed, workloads=("add_parameter",))["add_parameter"]
    with pytest.raises(ValueError, match="unknown workloads"):
        edit_cases(paths, 5, 0, workloads=("rename", "reformat"))


def test_summarise_separates_the_prefill_from_the_speedup():
    def row(latency_ms, prefill_ms, tokens, passes):
        return {"exact": True, "parses": True, "tokens": tokens, "passes": passes, "latency_ms": latency_ms,
                "prefill_ms": prefill_ms, "prompt_tokens": 1000, "identical": True, "parted": None}

    plain = [row(50_000, 10_000, 100, 100), row(30_000, 10_000, 60, 60)]
    spec = [row(15_000, 10_000, 100, 10), row(14_000, 10_000, 60, 8)]
    summary = summarise(spec, plain)
    assert summary["speedup"] == round(80_000 / 29_000, 2)
    assert summary["speedup_after_prefill"] == round(60_000 / 9_000, 2)
    assert summary["tokens_per_pass"] == round(160 / 18, 2) and summary["prefill_ms_p50"] == 10_000


def test_report_helpers():
    assert same_region("a\nb\n", "a\nb") and not same_region("a\nb ", "a\nb")
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

