"""The Neovim plugin (editors/neovim) against the real server on the starter models, in a headless
Neovim driven over its RPC API (pynvim). Neovim from Debian is 0.7.2, so this covers the plugin's
own request/ghost-text path (the 0.12 built-in path cannot run here).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.conftest import STARTER_OPTIONS

pytestmark = pytest.mark.editors

pynvim = pytest.importorskip("pynvim")


SOURCE = '''\
class Greeter:
    """Says hello in several ways; the café's name is "Café Ünïcode"."""

    def __init__(self, name):
        self.name = name

    def hello(self):
        return "hello " + self.name

    def goodbye(self):
        return "goodbye " + self.name

    def café(self):
        return "café " + self.name

    def welcome(self):
        return "welcome " + self.name

    def thanks(self):
'''


def wait_for(nvim, lua: str, timeout: float = 90.0, interval: float = 0.05):
    """Poll a Lua expression until it returns a truthy value; returns it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = nvim.exec_lua(f"return {lua}")
        if value:
            return value
        time.sleep(interval)
    log = nvim.exec_lua("return require('speclsp').log_lines()")
    raise AssertionError(f"timed out waiting for {lua}; server log tail: {log[-5:]}")


def setup_plugin(nvim, tmp_path: Path, **settings) -> Path:
    path = tmp_path / "greeter.py"
    path.write_text(SOURCE, encoding="utf-8")
    nvim.exec_lua(  # `...` inside a table constructor would give every field the first argument
        "local cmd, settings = ...; require('speclsp').setup({ cmd = cmd, debounce_ms = 20, settings = settings })",
        [sys.executable, "-m", "lsp_server.cli", "serve"],
        {"decoding.drafter": "auto", "completion.maxNewTokens": 16, **STARTER_OPTIONS, **settings},
    )
    nvim.command(f"edit {path}")
    wait_for(nvim, "(require('speclsp').server_status() or {}).state == 'ready'")
    log = nvim.exec_lua("return require('speclsp').log_lines()")
    assert any("target=starter " in line for line in log), log[:8]
    assert not any("setting" in line and ("invalid" in line or "must be" in line) for line in log), log[:8]
    return path


def ghost_marks(nvim):
    return nvim.exec_lua(
        "return vim.api.nvim_buf_get_extmarks(0, require('speclsp.ghost').ns, 0, -1, { details = true })")


def show_ghost_at_end(nvim, line: int) -> str:
    """Cursor to the end of 1-based ``line``, append there, and wait for a suggestion."""
    nvim.command(f"normal! {line}G$")
    nvim.input("a")
    return wait_for(nvim, "require('speclsp').suggestion()")


def test_ghost_text_appears_and_accept_inserts_it(nvim, tmp_path):
    setup_plugin(nvim, tmp_path)
    # Line 14 holds non-ASCII text before the cursor, so a wrong offset encoding would misplace the
    # server's range and the plugin would drop the suggestion.
    line_no = 14
    before = nvim.current.buffer[:]
    suggestion = show_ghost_at_end(nvim, line_no)
    marks = ghost_marks(nvim)
    assert len(marks) == 1
    _, row, col, details = marks[0]
    first_line = suggestion.split("\n")[0]
    assert row == line_no - 1 and col == len(before[line_no - 1].encode())
    assert details["virt_text"][0][0] == first_line.replace("\t", "    ")
    nvim.input("<Tab>")
    wait_for(nvim, "not require('speclsp').visible()")
    expected = "\n".join(before[: line_no - 1] + [before[line_no - 1] + suggestion] + before[line_no:])
    wait_for(nvim, f"table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\\n') == {lua_string(expected)}",
             timeout=10)
    assert nvim.exec_lua("return require('speclsp').stats().accepted") == 1
    # The server traced the request, with timings and no code text.
    log = nvim.exec_lua("return require('speclsp').log_lines()")
    assert any("inlineCompletion greeter.py:13:" in line and "total=" in line for line in log)
    status = "\n".join(nvim.exec_lua("return require('speclsp').status_lines()"))
    assert "models: ready" in status and "last completion:" in status


def test_escape_and_cursor_movement_dismiss(nvim, tmp_path):
    setup_plugin(nvim, tmp_path)
    show_ghost_at_end(nvim, 8)
    nvim.input("<Esc>")
    wait_for(nvim, "not require('speclsp').visible()", timeout=10)
    assert ghost_marks(nvim) == []
    before = nvim.current.buffer[:]
    show_ghost_at_end(nvim, 11)
    nvim.input("<Left>")
    wait_for(nvim, "not require('speclsp').visible()", timeout=10)
    assert ghost_marks(nvim) == []
    assert nvim.current.buffer[:] == before  # dismissing never edits


def test_accept_word_keeps_the_rest_shown(nvim, tmp_path):
    setup_plugin(nvim, tmp_path)
    suggestion = show_ghost_at_end(nvim, 17)
    word = nvim.exec_lua("return require('speclsp.ghost').next_word(...)", suggestion)
    nvim.input("<C-Right>")
    if word == suggestion:
        wait_for(nvim, "not require('speclsp').visible()", timeout=10)
    else:
        rest = wait_for(nvim, "require('speclsp').suggestion()", timeout=10)
        assert rest == suggestion[len(word):]
    buffer_text = "\n".join(nvim.current.buffer[:])
    assert ("        return \"welcome \" + self.name" + word) in buffer_text or word.startswith("\n")


def test_typing_supersedes_and_cancels_the_request_in_flight(nvim, tmp_path):
    # Long completions keep the first request in flight while we type over it.
    setup_plugin(nvim, tmp_path, **{"completion.maxNewTokens": 400, "decoding.drafter": "none"})
    nvim.command("normal! 19G$")
    nvim.input("a")
    wait_for(nvim, "require('speclsp').pending()", timeout=30, interval=0.005)
    nvim.input("\n")
    wait_for(nvim, "require('speclsp').stats().cancelled >= 1", timeout=10)
    log_has = ("(function() for _, l in ipairs(require('speclsp').log_lines()) do "
               "if l:find('cancelled by client', 1, true) or l:find('superseded', 1, true) then return true end "
               "end return false end)()")
    wait_for(nvim, log_has, timeout=60)


ROOT_MARKERS = (".git", ".hg", ".svn", ".jj", "pyproject.toml", "setup.py", "setup.cfg", "package.json",
                "Cargo.toml", "go.mod", "pom.xml", "build.gradle", "build.gradle.kts", "composer.json", "Gemfile",
                "mix.exs", "deno.json")  # the plugin's default root_markers


def marked_ancestor(path: Path) -> Path | None:
    """The nearest directory at or above ``path`` that holds a root marker (what the tests below expect
    of a directory they did not build), or None."""
    return next((p for p in (path, *path.parents) if any((p / m).exists() for m in ROOT_MARKERS)), None)


def root_for(nvim, name: str):
    return nvim.exec_lua("return require('speclsp').root_for(...)", name)


def test_root_is_the_nearest_directory_with_a_vcs_or_project_marker(nvim, tmp_path):
    outer, inner = tmp_path / "outer", tmp_path / "outer" / "packages" / "web"
    (outer / ".git").mkdir(parents=True)
    inner.mkdir(parents=True)
    (inner / "package.json").write_text("{}\n")
    (outer / "src" / "deep").mkdir(parents=True)
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    (worktree / ".git").write_text("gitdir: /elsewhere\n")  # a git worktree's .git is a file
    jj = tmp_path / "jj"
    (jj / ".jj").mkdir(parents=True)
    assert root_for(nvim, str(outer / "src" / "deep" / "a.py")) == str(outer)
    assert root_for(nvim, str(inner / "index.js")) == str(inner)  # the nearest marker wins
    assert root_for(nvim, str(outer / "top.py")) == str(outer)
    assert root_for(nvim, str(worktree / "b.py")) == str(worktree)
    assert root_for(nvim, str(jj / "c.rs")) == str(jj)
    assert root_for(nvim, str(tmp_path / "go" / "main.go")) == marked_ancestor(tmp_path)  # None here, as a rule
    (tmp_path / "go").mkdir()
    (tmp_path / "go" / "go.mod").write_text("module x\n")
    assert root_for(nvim, str(tmp_path / "go" / "main.go")) == str(tmp_path / "go")


def test_a_file_in_no_project_starts_the_server_without_a_workspace_folder(nvim, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    if marked_ancestor(scratch) is not None:
        pytest.skip(f"{marked_ancestor(scratch)} holds a root marker: no directory here is outside a project")
    nvim.command(f"cd {scratch}")  # setup() attaches the first, unnamed buffer too: rooted from here
    setup_plugin(nvim, scratch)
    folders = nvim.exec_lua("return require('speclsp').root_for(vim.api.nvim_buf_get_name(0)) or 'none'")
    assert folders == "none"
    info = nvim.exec_lua("local c = vim.lsp.get_active_clients()[1]; "
                         "return { c.workspace_folders == nil, c.request_sync('speclsp/index', {}, 10000, 0).result }")
    assert info[0] is True, "the client sent workspace folders"
    assert info[1]["state"] == "off" and info[1]["roots"] == [] and info[1]["files"] == []


def lua_string(text: str) -> str:
    """A Lua long-bracket string literal for ``text``."""
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    eq = "=" * level
    return f"[{eq}[\n{text}]{eq}]"
