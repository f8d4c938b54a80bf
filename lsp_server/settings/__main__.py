"""``python -m lsp_server.settings [--check]``: regenerate what comes from the settings' spec (the VS Code
manifest, the README's list, docs/settings.md), or with ``--check`` list what is out of date (exit 1)."""

from __future__ import annotations

import sys
from pathlib import Path

from lsp_server.settings.manifests import stale_artefacts, write_artefacts

USAGE = "usage: python -m lsp_server.settings [--check]   (run in the repository root)"


def main(argv: list[str]) -> int:
    root = Path.cwd()
    if argv not in ([], ["--check"], ["--vscode"]):  # --vscode: the spelling of the release before
        print(USAGE, file=sys.stderr)
        return 2
    if argv == ["--check"]:
        stale = stale_artefacts(root)
        for name in stale:
            print(f"{name} is out of date: run python -m lsp_server.settings", file=sys.stderr)
        return 1 if stale else 0
    for name in write_artefacts(root):
        print(f"wrote {name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
