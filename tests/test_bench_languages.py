"""The cut benches in other languages: the 2026 corpora's manifest and fetch, the tree-sitter "still
parses" check per language, and the prompt gate's rule that a change losing in any language is refused."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tarfile

import pytest

from bench.corpus import corpus_files, corpus_names, language_of, stdlib_root
from bench.corpus_fetch import (
    CorpusError,
    EXTENSION_LANGUAGES,
    fetch,
    load_manifest,
    manifest_files,
    package_dir,
    provenance,
)
from bench.cut_sites import describe, is_cut_line, parses
from lsp_server.workspace.documents import Document
from bench.prompt_gate import summarize

pytestmark = pytest.mark.unit

SOURCES = {"package/src/index.ts": "export function twice(x: number): number {\n  return 2 * x;\n}\n",
           "package/src/util.ts": "export const one = 1;\n",
           "package/dist/index.js": "exports.twice = (x) => 2 * x;\n"}


def _tarball(tmp_path):
    """A gzipped tarball of ``SOURCES`` in ``tmp_path`` and its npm-style sha512 integrity."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in SOURCES.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    path = tmp_path / "pkg-1.0.0.tgz"
    path.write_bytes(buffer.getvalue())
    return path, "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def _manifest(tmp_path, url: str, integrity: str):
    entry = {"registry": "npm", "package": "@scope/pkg", "version": "1.0.0", "license": "MIT",
             "first_release": "2026-01-02", "tarball": url, "integrity": integrity,
             "files": ["package/src/index.ts", "package/src/util.ts"]}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps({"corpora": {"2026-ts": {"language": "typescript", "packages": [entry]}}}))
    return path


def test_fetch_checks_the_hash_and_extracts_only_the_named_files(tmp_path):
    tarball, integrity = _tarball(tmp_path)
    manifest = _manifest(tmp_path, tarball.as_uri(), integrity)
    corpus_dir = tmp_path / "corpora"
    with pytest.raises(CorpusError, match="run the bench once with --fetch"):
        manifest_files("2026-ts", corpus_dir, manifest)  # not fetched: no network without --fetch
    paths = fetch("2026-ts", corpus_dir, manifest)
    assert [p.name for p in paths] == ["index.ts", "util.ts"]
    assert paths[0].read_text() == SOURCES["package/src/index.ts"]
    target = package_dir(corpus_dir, "2026-ts", load_manifest(manifest)["2026-ts"]["packages"][0])
    assert target.name == "@scope+pkg@1.0.0" and not (target / "package" / "dist").exists()
    assert manifest_files("2026-ts", corpus_dir, manifest) == paths
    assert provenance(paths[0], corpus_dir) == {"package": "@scope/pkg", "version": "1.0.0",
                                                "file": "package/src/index.ts"}
    tarball.unlink()  # fetched once: a second fetch reads nothing
    assert fetch("2026-ts", corpus_dir, manifest) == paths
    document = Document(paths[0].as_uri(), "", 0, "typescript")  # a record names package, version and file
    assert describe(document, corpus_dir) == {"language": "typescript", "package": "@scope/pkg", "version": "1.0.0",
                                              "file": "package/src/index.ts"}
    stdlib = Document((stdlib_root() / "json" / "decoder.py").as_uri(), "", 0, "python")
    assert describe(stdlib, corpus_dir) | {"version": ""} == {"language": "python", "package": "python",
                                                              "version": "", "file": "json/decoder.py"}


def test_a_tarball_whose_hash_differs_is_refused_and_nothing_is_extracted(tmp_path):
    tarball, _ = _tarball(tmp_path)
    wrong = "sha512-" + base64.b64encode(hashlib.sha512(b"another tarball").digest()).decode()
    manifest = _manifest(tmp_path, tarball.as_uri(), wrong)
    with pytest.raises(CorpusError, match="hash mismatch"):
        fetch("2026-ts", tmp_path / "corpora", manifest)
    assert not (tmp_path / "corpora").exists()


def test_offline_the_fetch_says_what_it_needs(tmp_path):
    manifest = _manifest(tmp_path, "http://127.0.0.1:9/pkg-1.0.0.tgz", "sha512-AAAA")  # port 9: refused
    with pytest.raises(CorpusError, match="cannot download .*needs the npm registry or PyPI"):
        fetch("2026-ts", tmp_path / "corpora", manifest)
    with pytest.raises(CorpusError, match="no corpus '2026-go'"):
        fetch("2026-go", tmp_path / "corpora", manifest)


def test_the_pinned_manifest_names_package_version_hash_and_files_of_one_language_per_corpus(tmp_path):
    corpora = load_manifest()
    assert {"2026-ts", "2026-js", "2026-rust"} <= set(corpora)
    for name, spec in corpora.items():
        for entry in spec["packages"]:
            assert entry["version"] and entry["license"].startswith(("MIT", "Apache", "BSD"))
            assert entry["first_release"].startswith("2026-")
            assert re.fullmatch(r"sha(256|512)-[A-Za-z0-9+/]+=*", entry["integrity"])
            assert entry["tarball"].startswith("https://") and entry["files"]
            assert {EXTENSION_LANGUAGES[p[p.rfind("."):]] for p in entry["files"]} == {spec["language"]}
        with pytest.raises(ValueError, match="--fetch"):  # the corpora read no network unless asked
            corpus_files(name, tmp_path)
    assert corpus_names("2026, 2026-ts,2026") == ["2026", "2026-ts"]
    assert language_of(tmp_path / "a.rs") == "rust" and language_of(tmp_path / "a.py") == "python"


#: language -> (a file that parses, the text before the cursor's insertion point, a broken insertion)
PROGRAMS = {
    "python": ("def f(x):\n    return x + 1\n", "def f(x):\n    ", "y = (x +\n    "),
    "typescript": ("function f(x: number): number {\n  return x + 1;\n}\n", "function f(x: number): number {\n  ",
                   "const y = g(x;\n  "),
    "javascript": ("function f(x) {\n  return x + 1;\n}\n", "function f(x) {\n  ", "if (x) {\n  "),
    "rust": ("fn f(x: i32) -> i32 {\n    x + 1\n}\n", "fn f(x: i32) -> i32 {\n    ", "let y = [x, ;\n    "),
    "c": ("int f(int x) {\n  return x + 1;\n}\n", "int f(int x) {\n  ", "int y = (x + ;\n  "),
}


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_a_broken_insertion_is_detected_in_every_language(language):
    text, head, broken = PROGRAMS[language]
    assert parses(text, language)
    assert parses(head + text[len(head):], language)
    assert not parses(head + broken + text[len(head):], language), f"{language}: {broken!r} went unnoticed"


def test_no_grammar_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="no tree-sitter grammar"):
        parses("x", "cobol")


def test_cut_lines_per_language():
    assert is_cut_line("    x = 1") and not is_cut_line("\tx = 1") and not is_cut_line("    # note")
    assert is_cut_line("\tconst x = 1;", "typescript") and is_cut_line("  return x;", "javascript")
    for line in ("  // note", "   * doc", "  }", "  } else {", "    /// doc", "  `tpl`"):
        assert not is_cut_line(line, "rust"), line
    assert not is_cut_line("x = 1") and not is_cut_line("fn f() {", "rust")


def test_the_gate_refuses_a_change_that_loses_in_one_language():
    same = {"first_line_exact": True, "parses": True}
    worse = {"first_line_exact": False, "parses": True}
    python = [{"kind": "line_start", "language": "python", "a": same, "b": same} for _ in range(60)]
    typescript = [{"kind": "mid_line", "language": "typescript", "a": same, "b": worse if i % 3 == 0 else same}
                  for i in range(60)]
    verdict = summarize(python + typescript, "a", "b")
    assert verdict["languages"]["python"]["gate_passes"]  # it does not lose in Python ...
    assert not verdict["languages"]["typescript"]["gate_passes"]  # ... but does in TypeScript
    assert verdict["losing_languages"] == ["typescript"] and verdict["gate_passes"] is False
    assert summarize(python + [{**r, "b": same} for r in typescript], "a", "b")["gate_passes"]


def test_a_resumed_gate_takes_earlier_rows_by_place_across_corpora(tmp_path):
    import argparse

    from bench.prompt_gate import _place, resumed_rows

    settings = {"corpus": "2026,2026-ts", "seed": 0, "variants": "a,b", "cuts": 12, "rows": True}
    old = {"kind": "mid_line", "file": "handler.ts", "line": 3, "column": 4}  # rows before 2026-12-07: a name
    earlier = tmp_path / "gate.json"
    earlier.write_text(json.dumps({"settings": settings, "rows": [old]}))
    args = argparse.Namespace(**{**settings, "cuts": 24, "resume": earlier, "fetch": True, "corpus_dir": tmp_path})
    assert resumed_rows(args) == [old]
    assert _place({**old, "file": "package/src/matrix/monitor/handler.ts", "language": "typescript"}) == _place(old)
    with pytest.raises(SystemExit, match="same settings"):
        resumed_rows(argparse.Namespace(**{**vars(args), "seed": 1}))
