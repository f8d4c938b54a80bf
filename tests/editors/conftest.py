"""Editor-client tests need external programs (nvim, npm). They are skipped when a program is
missing, unless SPECLSP_REQUIRE_EDITORS=1 (set by .ci/run), which turns a missing program into a failure."""

import contextlib
import os
import shutil
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "editors" / "neovim"


def require_program(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("SPECLSP_REQUIRE_EDITORS") == "1":
            pytest.fail(f"{name} is required (SPECLSP_REQUIRE_EDITORS=1) but not on PATH")
        pytest.skip(f"{name} not on PATH")
    return path


@pytest.fixture()
def nvim():
    """A headless Neovim (``-u NONE``) with the plugin on its runtimepath, driven over RPC (pynvim)."""
    pynvim = pytest.importorskip("pynvim")
    binary = require_program("nvim")
    editor = pynvim.attach("child", argv=[binary, "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n"])
    try:
        editor.command("set nocompatible noswapfile expandtab shiftwidth=4 tabstop=4")
        editor.command(f"set runtimepath^={PLUGIN}")
        yield editor
    finally:
        with contextlib.suppress(Exception):  # tearing down a possibly dead editor
            editor.exec_lua("for _, c in ipairs(vim.lsp.get_active_clients()) do c.stop(true) end")
        editor.close()
