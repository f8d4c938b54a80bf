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


@pytest.fixture(scope="session")
def vscode_install():
    """The real VS Code of tests/editors/vscode_env (skip, or fail under SPECLSP_REQUIRE_EDITORS=1, without it)."""
    from tests.editors.vscode_env import VSCodeInstall, find_install

    found = find_install()
    if not isinstance(found, VSCodeInstall):
        if os.environ.get("SPECLSP_REQUIRE_EDITORS") == "1":
            pytest.fail(f"VS Code is required (SPECLSP_REQUIRE_EDITORS=1): {found}")
        pytest.skip(found)
    return found


@pytest.fixture(scope="session")
def vsix(tmp_path_factory) -> Path:
    """The extension packaged from editors/vscode (npm ci, compile, vsce package) into a tmp folder."""
    import subprocess

    npm = require_program("npm")
    extension = Path(__file__).resolve().parents[2] / "editors" / "vscode"
    out = tmp_path_factory.mktemp("vsix") / "speclsp.vsix"
    for cmd in ([npm, "ci", "--no-audit", "--no-fund"], [npm, "run", "compile"],
                [npm, "run", "package", "--", "--out", str(out)]):
        done = subprocess.run(cmd, cwd=extension, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return out


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (``item.rep_call``), for fixtures that act on failure."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
