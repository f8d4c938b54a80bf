"""Every relative link in the repository's Markdown resolves: the file exists, and a ``#fragment`` names a
heading of that file (GitHub's slug) or an ``<a id>`` in it. Code comments and docstrings that point at
``docs/*.md#fragment`` are checked the same way. The docs move (issue 50: ``docs/performance.md`` by
topic, its dated runs under ``docs/bench/``, ``docs/decisions.md``), and a link left behind fails here."""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
_SKIP_DIRS = {".git", ".venv", "node_modules", "build", "dist", ".pytest_cache"}
_LINK = re.compile(r"\]\(([^()\s]+)\)")
_CODE_REF = re.compile(r"(?<![\"'/\w])(docs/[\w./-]+\.md)(?:#([\w-]+))?")  # not a quoted path: test data
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The fragments a link may name in ``path``: each heading's slug (with GitHub's -1, -2 for repeats)
    and each ``<a id="...">``."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    found: set[str] = set(re.findall(r'<a\s+(?:id|name)="([^"]+)"', text))
    seen: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            slug = github_slug(match.group(1))
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return frozenset(found)


def markdown_files() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.md") if not _SKIP_DIRS & set(p.relative_to(ROOT).parts))


def broken_link(source: Path, target: str) -> str | None:
    """Why ``target`` (a link written in ``source``) does not resolve, or ``None`` when it does."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, vscode: ...
        return None
    path_part, _, fragment = target.partition("#")
    path = (source.parent / path_part).resolve() if path_part else source
    if not path.exists():
        return f"{path_part}: no such file"
    if fragment and path.suffix == ".md" and fragment not in anchors(path):
        return f"#{fragment}: no such heading or anchor in {path.relative_to(ROOT)}"
    return None


def test_the_slug_follows_github():
    assert github_slug("The n-gram lock, a 32-token cap, and llama.cpp's newer library (2-core Intel Xeon, "
                       "2026-12-06)") == ("the-n-gram-lock-a-32-token-cap-and-llamacpps-newer-library-2-core-"
                                          "intel-xeon-2026-12-06")
    assert github_slug("Weights: `quantization: auto`") == "weights-quantization-auto"


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "page.md"
    page.write_text('# A heading\n\n<a id="kept"></a>\n')
    assert broken_link(page, "#a-heading") is None and broken_link(page, "page.md#kept") is None
    assert broken_link(page, "#gone") is not None
    assert broken_link(page, "other.md") is not None


def test_every_relative_link_in_the_markdown_resolves():
    problems, checked = [], 0
    for source in markdown_files():
        text = _INLINE_CODE.sub("", _FENCE.sub("", source.read_text(encoding="utf-8")))
        for target in _LINK.findall(text):
            checked += 1
            why = broken_link(source, target)
            if why:
                problems.append(f"{source.relative_to(ROOT)}: {target}: {why}")
    assert checked > 100  # the docs were read: README, docs/, docs/bench/ runs
    assert not problems, "\n".join(problems)


def test_every_docs_page_and_anchor_named_in_code_resolves():
    problems, checked = [], 0
    for folder in ("decoding", "lsp_server", "bench", "training", "tests"):
        for source in sorted((ROOT / folder).rglob("*.py")):
            for path, fragment in _CODE_REF.findall(source.read_text(encoding="utf-8")):
                checked += 1
                target = f"{path}#{fragment}" if fragment else path
                why = broken_link(ROOT / "README.md", target)
                if why:
                    problems.append(f"{source.relative_to(ROOT)}: {target}: {why}")
    assert checked > 10  # the code names docs (docs/decisions.md rows among them)
    assert not problems, "\n".join(problems)
