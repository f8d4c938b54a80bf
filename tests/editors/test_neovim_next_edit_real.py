"""Issue 21's "done when" in a real Neovim (Debian's 0.7.2) with the real server and the real
Qwen2.5-Coder pair: rename a parameter on its definition line, request the next edit, see the preview,
accept it, and every occurrence in the function is renamed. Skipped without the model packs (see
tests/test_real_models.py); tier ``real``: minutes on this CPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.editors.test_neovim import wait_for
from tests.test_next_edit_real import SOURCE, assert_renamed_at_every_use
from tests.test_real_models import DRAFT, TARGET, real_dirs  # noqa: F401  (the packs fixture)

pytestmark = pytest.mark.real

pytest.importorskip("pynvim")


def test_rename_a_parameter_preview_and_accept_renames_it_through_the_function(nvim, tmp_path: Path,
                                                                              real_dirs):  # noqa: F811
    path = tmp_path / "summary.py"
    path.write_text(SOURCE, encoding="utf-8")
    nvim.exec_lua("local cmd, settings = ...; require('speclsp').setup({ cmd = cmd, settings = settings })",
                  [sys.executable, "-m", "lsp_server.cli", "serve"],
                  {"model": {"target": TARGET, "draft": DRAFT, "device": "cpu"}})
    nvim.command(f"edit {path}")
    wait_for(nvim, "(require('speclsp').server_status() or {}).state == 'ready'", timeout=900)
    nvim.command("normal! gg0")
    nvim.command("call search('limit', 'c', 1)")
    nvim.input("ciwcount<Esc>")  # the user's edit, typed
    wait_for(nvim, "vim.api.nvim_buf_get_lines(0, 0, 1, false)[1] == 'def summarize(records, count):'", timeout=10)
    nvim.command("SpeclspNextEdit")
    wait_for(nvim, "require('speclsp.next_edit').visible() or require('speclsp.next_edit').last_event() ~= 'requested'",
             timeout=600)
    assert nvim.exec_lua("return require('speclsp.next_edit').last_event()") == "shown"
    marks = nvim.exec_lua(
        "return vim.api.nvim_buf_get_extmarks(0, require('speclsp.next_edit').ns, 0, -1, { details = true })")
    assert any(details.get("hl_group") == "DiffDelete" for *_, details in marks)
    assert any("virt_lines" in details for *_, details in marks)
    nvim.input("<Tab>")
    wait_for(nvim, "require('speclsp.next_edit').last_event() == 'accepted'", timeout=10)
    text = "\n".join(nvim.current.buffer[:]) + "\n"
    assert_renamed_at_every_use(text)
