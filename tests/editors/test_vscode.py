"""The VS Code extension (editors/vscode): its settings mirror the server's, and it compiles, passes
its own unit tests (node's test runner) and packages to a .vsix. In a real VS Code: test_vscode_e2e.py."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from lsp_server.settings import parse_settings
from tests.editors.conftest import require_program

EXTENSION = Path(__file__).resolve().parents[2] / "editors" / "vscode"
CLIENT_ONLY = {"speclsp.server.command", "speclsp.server.pythonPath", "speclsp.trace.server"}


def contributed() -> dict:
    package = json.loads((EXTENSION / "package.json").read_text())
    return package["contributes"]["configuration"]["properties"]


@pytest.mark.unit
def test_contributed_enums_are_valid_server_values():
    for key, spec in contributed().items():
        if key in CLIENT_ONLY or "enum" not in spec:
            continue
        for value in spec["enum"]:
            _, warnings = parse_settings({key.removeprefix("speclsp."): value})
            assert warnings == [], (key, value, warnings)


def run(cmd: list[str], timeout: int = 600) -> str:
    done = subprocess.run(cmd, cwd=EXTENSION, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.editors
def test_extension_compiles_passes_unit_tests_and_packages(tmp_path):
    npm = require_program("npm")
    run([npm, "ci", "--no-audit", "--no-fund"])
    output = run([npm, "test"])
    assert "# fail 0" in output and "# pass " in output
    in_tree = EXTENSION / "speclsp.vsix"  # where the package script alone writes it
    before = in_tree.stat().st_mtime_ns if in_tree.exists() else None
    vsix = tmp_path / "speclsp.vsix"
    run([npm, "run", "package", "--", "--out", str(vsix)])  # the last --out wins over the script's
    assert (in_tree.stat().st_mtime_ns if in_tree.exists() else None) == before, "packaged into the source tree"
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        manifest = json.loads(archive.read("extension/package.json"))
    assert {"extension/out/extension.js", "extension/out/config.js", "extension/out/nextEdit.js",
            "extension/out/nextEditView.js",
            "extension/node_modules/vscode-languageclient/package.json"} <= names
    assert not any(name.startswith("extension/src/") for name in names)
    assert manifest["main"] == "./out/extension.js"
