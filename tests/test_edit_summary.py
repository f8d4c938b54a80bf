"""The sentence naming the latest edit in the chat rewrite prompt (lsp_server/next_edit/edit_summary.py): renames,
keyword renames, a new parameter, a new call argument; None for anything else."""

from __future__ import annotations

import pytest

from lsp_server.next_edit.edit_summary import edit_summary, renamed_word

pytestmark = pytest.mark.unit


def diff(old: str, new: str) -> str:
    return f"--- a/a.py\n+++ b/a.py\n@@ -1,1 +1,1 @@\n-{old}\n+{new}"


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("def area(radius, scale):", "def area(r, scale):", "`radius` was renamed to `r`"),
    ("    total = 0", "    total_value = 0", "`total` was renamed to `total_value`"),
    ('    parser.add_argument("a", nargs="?")', '    parser.add_argument("a", nargs_value="?")',
     "The keyword argument `nargs=` of `add_argument(...)` is now `nargs_value=`"),
    ("def scale(values, factor):", "def scale(values, factor, context):",
     "The function `scale` takes a new parameter `context`: pass `context` in every call of `scale`"),
    ("    def depth(self, node, key=None):", "    def depth(self, node, context, key=None):",
     "The function `depth` takes a new parameter `context`"),
    ("    x = scale(a, 2)", "    x = scale(a, 2, context)", "The call of `scale` now passes `context`"),
    ("    left = self.depth(node.left)", "    left = self.depth(node.left, context)", "The call of `depth` now passes"),
])
def test_a_recognised_edit_is_named(old, new, expected):
    assert edit_summary([diff(old, new)]).startswith(expected)


@pytest.mark.parametrize(("old", "new"), [
    ("x = 1", "x = 2"),  # a value, not a name
    ("def f(a, b):", "def f(b, a):"),  # two names changed
    ("return a + b", "return a - b"),
    ("def f(a):", "def f(a):\n    pass"),
    ("f(a)", "f(a, b + 1)"),  # an argument that is not a plain name
])
def test_anything_else_gets_no_sentence(old, new):
    assert edit_summary([diff(old, new)]) is None


def test_only_the_latest_edit_counts_and_no_edit_gives_none():
    assert edit_summary([]) is None and renamed_word([]) is None
    assert edit_summary([diff("def f(a):", "def f(b):"), diff("x = 1", "x = 2")]) is None
    assert edit_summary([diff("x = 1", "x = 2"), diff("def f(a):", "def f(b):")]).startswith("`a` was renamed to `b`")
