"""A real VS Code (code-server) with the packaged extension installed, in headless Chromium, driven as
a person would: keystrokes, chords, the command palette; and read back from the page (the editor's
lines, the ghost text, the status bar) and from the server's recorded LSP traffic (tests/editors/lsp_tap).

Each :class:`Workbench` has its own user-data and extensions folders; the server it starts is this
checkout's ``lsp_server`` under the test's Python, behind the tap.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from tests.editors.vscode_env import VSCodeInstall

REPO = Path(__file__).resolve().parents[2]
DRIVER = REPO / "editors" / "vscode" / "e2e" / "driver.cjs"

# The editor's visible lines by 0-based line number, spaces as spaces (Monaco renders U+00A0), ghost
# text left out, joined to the gutter's line numbers by their top offset.
LINES_JS = r"""(() => {
  const editor = document.querySelector('.editor-instance');
  if (!editor) return {};
  const numbers = new Map(Array.from(editor.querySelectorAll('.margin-view-overlays .line-numbers'))
    .map(e => [Math.round(e.parentElement.getBoundingClientRect().top), parseInt(e.textContent) - 1]));
  const lines = {};
  for (const e of editor.querySelectorAll('.view-lines .view-line')) {
    const n = numbers.get(Math.round(e.getBoundingClientRect().top));
    if (n === undefined || isNaN(n)) continue;
    const copy = e.cloneNode(true);
    copy.querySelectorAll('.ghost-text-decoration, .ghost-text-decoration-preview').forEach(g => g.remove());
    lines[n] = copy.textContent.replace(/\u00a0/g, ' ');
  }
  return lines;
})()"""
# Ghost text as shown: the cursor line's inline pieces joined, then each line of the view zone VS Code
# adds below it for a suggestion of several lines.
GHOST_JS = r"""(() => {
  const editor = document.querySelector('.editor-instance');
  if (!editor) return [];
  const text = e => e.textContent.replace(/\u00a0/g, ' ');
  const lines = [];
  for (const line of editor.querySelectorAll('.view-lines .view-line')) {
    const pieces = Array.from(line.querySelectorAll('.ghost-text-decoration'));
    if (pieces.length) lines.push(pieces.map(text).join(''));
  }
  const rows = new Map();  // the further lines' pieces (spans of class ghost-text), by their line element
  for (const piece of editor.querySelectorAll('.ghost-text')) {
    const row = piece.closest('.view-line') || piece.parentElement;
    rows.set(row, (rows.get(row) || '') + text(piece));
  }
  return lines.concat(Array.from(rows.values()));
})()"""
# Left edges (px) of the first ghost-text piece and of the primary cursor, and their tops.
GHOST_AT_CURSOR_JS = """(() => {
  const ghost = document.querySelector('.editor-instance .ghost-text-decoration');
  const cursor = document.querySelector('.editor-instance .cursors-layer .cursor');
  if (!ghost || !cursor) return null;
  const g = ghost.getBoundingClientRect(), c = cursor.getBoundingClientRect();
  return {ghostLeft: g.left, ghostTop: g.top, cursorLeft: c.left, cursorTop: c.top, charWidth: c.width};
})()"""
STATUS_JS = """Array.from(document.querySelectorAll('.statusbar-item')).map(e => e.getAttribute('aria-label') || e.textContent)"""
STRUCK_JS = """Array.from(document.querySelectorAll('.editor-instance .view-lines span'))
  .filter(e => getComputedStyle(e).textDecorationLine.includes('line-through')).map(e => e.textContent)"""
INSERTED_JS = """Array.from(document.querySelectorAll('.editor-instance .view-lines span'))
  .map(e => getComputedStyle(e, '::after').content).filter(c => c && c !== 'none' && c !== 'normal')"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; raise AssertionError naming ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Workbench:
    """code-server on ``folder`` with the extension from ``vsix`` and ``settings`` as user settings; the
    extension starts ``server`` (default: this checkout's ``speclsp serve``) behind the LSP tap. With
    ``trusted`` False the folder opens in Restricted Mode."""

    def __init__(self, install: VSCodeInstall, vsix: Path, home: Path, folder: Path, settings: dict[str, Any],
                 trusted: bool = True, server: list[str] | None = None):
        self.install, self.home, self.folder = install, home, folder
        self.traffic = home / "lsp.jsonl"
        self.user_data, self.extensions = home / "user-data", home / "extensions"
        (self.user_data / "User").mkdir(parents=True)
        # Plain `python -m` (no -P), on purpose: the working folder the extension gives the server comes
        # first on its module path, so the Restricted Mode test can tell which folder that is.
        server = [sys.executable, "-m", "tests.editors.lsp_tap", str(self.traffic), "--",
                  *(server or [sys.executable, "-m", "lsp_server.cli", "serve"])]
        user_settings = {
            "security.workspace.trust.enabled": not trusted,
            "workbench.startupEditor": "none",
            "workbench.tips.enabled": False,
            "extensions.autoCheckUpdates": False,
            "extensions.autoUpdate": False,
            "telemetry.telemetryLevel": "off",
            "chat.disableAIFeatures": True,  # VS Code's own chat panel would take the focus and the space
            "workbench.secondarySideBar.defaultVisibility": "hidden",
            "speclsp.server.command": server,
            **settings,
        }
        (self.user_data / "User" / "settings.json").write_text(json.dumps(user_settings, indent=2))
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            part for part in (str(REPO), os.environ.get("PYTHONPATH", "")) if part))  # no empty entry (= cwd)
        self.env["PATH"] = f"{install.node.parent}{os.pathsep}{self.env['PATH']}"
        self._code_server([f"--install-extension={vsix}"], check=True)
        self.port = free_port()
        self.server_log = open(home / "code-server.log", "wb")  # noqa: SIM115 - closed by close()
        self.process = self.driver = None
        try:
            self._start(folder)
        except BaseException:
            self.close()
            raise

    def _start(self, folder: Path) -> None:
        self.process = subprocess.Popen(
            [str(self.install.node), str(self.install.code_server), "--auth", "none", "--bind-addr", f"127.0.0.1:{self.port}",
             "--disable-telemetry", "--disable-update-check", "--user-data-dir", str(self.user_data),
             "--extensions-dir", str(self.extensions), str(folder)],
            env=self.env, stdout=self.server_log, stderr=subprocess.STDOUT, start_new_session=True)
        self.driver = subprocess.Popen([str(self.install.node), str(DRIVER), str(self.install.app)], env=self.env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
                                       start_new_session=True)
        wait_for(self._listening, 60, "code-server to listen")
        self.call("launch", url=f"http://127.0.0.1:{self.port}/?folder={quote(str(folder))}", chromium=self.install.chromium)
        wait_for(lambda: self.call("evaluate", expression="document.querySelectorAll('.explorer-folders-view "
                                   ".monaco-list-row').length > 0"), 60, "the explorer to list the folder")

    def _code_server(self, args: list[str], check: bool) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.install.node), str(self.install.code_server), "--user-data-dir",
                               str(self.user_data), "--extensions-dir", str(self.extensions), *args],
                              env=self.env, capture_output=True, text=True, timeout=300, check=check)

    def _listening(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"code-server exited {self.process.returncode}: {self.log_tail()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
            return True
        return False

    def log_tail(self, chars: int = 3000) -> str:
        self.server_log.flush()
        return (self.home / "code-server.log").read_text(errors="replace")[-chars:]

    def call(self, op: str, **fields: Any) -> Any:
        """Send one command to the Chromium driver and return its value (AssertionError on failure)."""
        self.driver.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        answer = self.driver.stdout.readline()
        if not answer:
            raise AssertionError(f"the Chromium driver exited ({self.driver.wait()})")
        reply = json.loads(answer)
        if not reply["ok"]:
            raise AssertionError(f"driver {op} failed: {reply['error']}")
        return reply["value"]

    # What a person does.
    def type(self, text: str, delay_ms: int = 40) -> None:
        self.call("type", text=text, delay=delay_ms)

    def press(self, chord: str) -> None:
        self.call("press", key=chord)

    def _open_quick_input(self, chord: str, what: str) -> None:
        """Press ``chord`` and wait until VS Code's quick input box (palette, Quick Open, Go to Line) has focus."""
        self.press(chord)
        wait_for(lambda: self.call("evaluate", expression="!!document.querySelector('.quick-input-widget input:focus')"),
                 20, what)

    def run_command(self, title: str) -> None:
        """Run a command by its title from the command palette (F1)."""
        self._open_quick_input("F1", "the command palette")
        self.type(title, delay_ms=10)
        time.sleep(0.5)
        self.press("Enter")

    def open_file(self, name: str) -> None:
        """Quick Open (Ctrl+P) ``name`` and wait until its editor has focus."""
        self._open_quick_input("Control+p", "quick open")
        self.type(name, delay_ms=10)
        wait_for(lambda: self.call("evaluate", expression=f"Array.from(document.querySelectorAll("
                                   f"'.quick-input-list .monaco-list-row')).some(r => r.textContent.includes({json.dumps(name)}))"),
                 30, f"quick open to list {name}")
        self.press("Enter")
        wait_for(lambda: self.call("evaluate", expression="document.activeElement && "
                                   "document.activeElement.closest('.editor-instance') !== null"), 30, f"{name}'s editor")

    def go_to(self, line: int, column: int) -> None:
        """Put the cursor at 1-based ``line`` and ``column`` with Go to Line (Ctrl+G)."""
        self._open_quick_input("Control+g", "go to line")
        self.type(f"{line}:{column}", delay_ms=10)
        time.sleep(0.3)
        self.press("Enter")
        time.sleep(0.3)

    # What the page shows.
    def lines(self) -> dict[int, str]:
        """The visible lines of the active editor by 0-based line number (ghost text excluded when the
        page keeps it in its own elements, as VS Code does)."""
        return {int(number): text for number, text in self.call("evaluate", expression=LINES_JS).items()}

    def ghost_text(self) -> list[str]:
        return self.call("evaluate", expression=GHOST_JS)

    def ghost_geometry(self) -> dict | None:
        return self.call("evaluate", expression=GHOST_AT_CURSOR_JS)

    def status_items(self) -> list[str]:
        return self.call("evaluate", expression=STATUS_JS)

    def struck_text(self) -> list[str]:
        return self.call("evaluate", expression=STRUCK_JS)

    def inserted_labels(self) -> list[str]:
        return self.call("evaluate", expression=INSERTED_JS)

    def screenshot(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.call("screenshot", path=str(path))
        return path

    # What the server said.
    def messages(self, method: str | None = None) -> list[dict]:
        """Recorded LSP messages, oldest first: each ``{"from": ..., "message": ...}``; with ``method``,
        only that method's requests joined to their responses as ``{"request": ..., "response": ...}``."""
        if not self.traffic.exists():
            return []
        records = []
        for line in self.traffic.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line still being written
                records.append(json.loads(line))
        records = [r for r in records if "message" in r]
        if method is None:
            return records
        responses = {r["message"].get("id"): r["message"] for r in records
                     if r["from"] == "server" and "method" not in r["message"]}
        return [{"request": r["message"], "response": responses.get(r["message"].get("id"))} for r in records
                if r["from"] == "client" and r["message"].get("method") == method]

    def close(self) -> None:
        """Close Chromium and stop code-server (whose extension host stops the language server)."""
        if self.driver is not None:
            with contextlib.suppress(Exception):
                self.call("close")
        for process in (self.driver, self.process):  # each leads a process group: Chromium; the extension
            if process is None:                        # host, the tap and the server
                continue
            for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=wait_s)
                    break
        if self.driver is not None:
            for pipe in (self.driver.stdin, self.driver.stdout):
                with contextlib.suppress(Exception):
                    pipe.close()
        self.server_log.close()
