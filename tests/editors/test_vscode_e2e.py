"""The packaged extension in a real VS Code (code-server 4.139, VS Code 1.139) driven through headless
Chromium as a person types, against this checkout's server on the starter pair, or the stub server for
next edits (the real pair: tests/editors/test_vscode_e2e_real.py). What is shown is checked against what
the server answered (its LSP traffic, recorded by tests/editors/lsp_tap). Needs the install of
``python -m tests.editors.vscode_env --install`` and Chromium; skipped without them unless
SPECLSP_REQUIRE_EDITORS=1. A failing test saves a screenshot of each workbench in its tmp folder and
prints the path.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import STARTER_OPTIONS
from tests.editors.rename_case import ANSWER, EDITED, EXPECTED, NEW, OLD
from tests.editors.vscode_workbench import Workbench, wait_for

pytestmark = pytest.mark.editors

STUB = Path(__file__).resolve().parent / "stub_lsp.py"
SOURCE = '''\
"""Version strings: parse, compare and bump them."""


def split_version(text):
    parts = text.strip().split(".")
    return [int(part) for part in parts]


def join_version(parts):
    return ".".join(str(part) for part in parts)


def bump_minor(text):
    parts = split_version(text)
    parts[1] += 1
    parts[2] = 0
    return join_version(parts)
'''
HEADER = "def bump_major(text):"
BODY_LINE = SOURCE.count("\n") + 3  # 0-based line of the new function's first body line
STARTER_SETTINGS = {f"speclsp.{key}": value for key, value in STARTER_OPTIONS.items()}


@pytest.fixture()
def open_workbench(request, vscode_install, vsix, tmp_path):
    """Opens workbenches on ``tmp_path/project`` (its files given per call); closes them at teardown,
    after a screenshot of each when the test failed."""
    opened: list[Workbench] = []

    def open_one(files: dict[str, str], settings: dict | None = None, **options) -> Workbench:
        folder = tmp_path / "project"
        for name, text in files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
        bench = Workbench(vscode_install, vsix, tmp_path / f"home{len(opened)}", folder,
                          {**STARTER_SETTINGS, **(settings or {})}, **options)
        opened.append(bench)
        return bench

    yield open_one
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for index, bench in enumerate(opened):
        if failed:
            with contextlib.suppress(Exception):
                print("screenshot of the failed test:", bench.screenshot(tmp_path / f"failure{index}.png"))
                print("code-server log tail:", bench.log_tail(1500))
        bench.close()


def wait_ready(bench: Workbench, timeout: float = 300) -> str:
    """The status bar item once it says the models are ready."""
    return wait_for(lambda: next((item for item in bench.status_items() if "models ready" in item), None), timeout,
                    "the status bar to say the models are ready")


def start_function(bench: Workbench) -> None:
    """Open versions.py, go to its end and type a new function's header and Enter, as a person would
    (Monaco closes the bracket on '(' and types over it on ')', and indents after Enter)."""
    bench.open_file("versions.py")
    wait_ready(bench)
    bench.press("Control+End")
    bench.type("\n\n" + HEADER)
    bench.press("Enter")


def answered_items(bench: Workbench) -> list[tuple[dict, dict]]:
    """(request, first item) of every textDocument/inlineCompletion the server answered with an item."""
    found = []
    for exchange in bench.messages("textDocument/inlineCompletion"):
        result = (exchange["response"] or {}).get("result")
        items = result.get("items", []) if isinstance(result, dict) else (result or [])
        if items:
            found.append((exchange["request"], items[0]))
    return found


def remainder(line: str, request: dict, item: dict) -> str:
    """What VS Code should show for ``item`` on ``line`` (the document's line at the request): its
    insertText past the text between the item's range start and the cursor. Offsets are UTF-16 units,
    used here as code points: ``line`` must hold no astral character (see :func:`utf16_index`)."""
    start, position = item["range"]["start"], request["params"]["position"]
    assert start["line"] == position["line"], (item, position)
    typed = line[start["character"]:position["character"]]
    assert item["insertText"].startswith(typed), (typed, item)
    return item["insertText"][len(typed):]


def shown_ghost(bench: Workbench) -> str:
    return "\n".join(bench.ghost_text())


def test_ghost_text_is_the_servers_answer_drawn_at_the_cursor_and_tab_accepts_it(open_workbench):
    bench = open_workbench({"versions.py": SOURCE})
    start_function(bench)
    shown = wait_for(lambda: shown_ghost(bench), 120, "ghost text after the header")
    line = bench.lines()[BODY_LINE]
    assert line == "    ", line  # Monaco's indent after Enter; the suggestion is not in the text yet
    request, item = answered_items(bench)[-1]
    assert request["params"]["position"] == {"line": BODY_LINE, "character": 4}
    assert shown == remainder(line, request, item)
    geometry = bench.ghost_geometry()
    assert geometry is not None
    assert abs(geometry["ghostLeft"] - geometry["cursorLeft"]) <= 2, geometry  # at the cursor's column
    assert abs(geometry["ghostTop"] - geometry["cursorTop"]) <= 2, geometry  # on the cursor's line
    bench.press("Tab")  # (a new suggestion may follow at once: the check is the text Tab inserted)
    wait_for(lambda: bench.lines().get(BODY_LINE) == line + shown.split("\n")[0], 10, "Tab to insert the suggestion")
    bench.press("Control+s")
    path = bench.folder / "versions.py"
    expected = SOURCE + "\n\n" + HEADER + "\n    " + shown
    wait_for(lambda: path.read_text() == expected, 20, f"the save of {expected!r}")


def test_typing_what_the_ghost_text_says_keeps_the_rest_and_escape_dismisses_it(open_workbench):
    bench = open_workbench({"versions.py": SOURCE})
    start_function(bench)
    shown = wait_for(lambda: shown_ghost(bench), 120, "ghost text after the header")
    bench.type(shown[0])
    wait_for(lambda: bench.lines()[BODY_LINE] == "    " + shown[0], 5, "the typed character")
    # VS Code keeps the suggestion as the text grows into it (no new answer is needed to show the rest).
    wait_for(lambda: shown_ghost(bench) == shown[1:], 5, f"the rest of the suggestion, {shown[1:]!r}")
    bench.press("Escape")
    wait_for(lambda: not bench.ghost_text(), 5, "Escape to dismiss the ghost text")
    time.sleep(1.0)
    assert bench.ghost_text() == []  # and it stays dismissed until the next keystroke


def test_a_suggestion_the_typed_text_no_longer_fits_is_not_shown(open_workbench):
    bench = open_workbench({"versions.py": SOURCE})
    start_function(bench)
    shown = wait_for(lambda: shown_ghost(bench), 120, "ghost text after the header")
    answered = len(answered_items(bench))
    mismatch = "Q" if shown[0] != "Q" else "Z"
    bench.type(mismatch)
    wait_for(lambda: bench.lines()[BODY_LINE] == "    " + mismatch, 5, "the typed character")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # whatever is shown now must be an answer for the new text
        ghost = shown_ghost(bench)
        if ghost:
            assert ghost not in (shown, shown[1:]), ghost
            request, item = answered_items(bench)[-1]
            assert len(answered_items(bench)) > answered
            assert request["params"]["position"] == {"line": BODY_LINE, "character": 5}
            assert ghost == remainder("    " + mismatch, request, item)
        time.sleep(0.1)


def test_the_extension_runs_in_restricted_mode_without_the_workspaces_command_or_modules(open_workbench, tmp_path):
    marker = tmp_path / "workspace-code-ran"
    workspace_settings = {"speclsp.server.command": ["/bin/sh", "-c", f"touch {marker}"],
                          "speclsp.model.target": "/nonexistent/model",
                          "speclsp.completion.maxNewTokens": 3}
    # Modules that `python -m` would load from its working folder before the real ones.
    planted = f"open({str(marker)!r}, 'w').close()\n"
    files = {"versions.py": SOURCE, ".vscode/settings.json": json.dumps(workspace_settings),
             "lsp_server/__init__.py": planted, "tests/__init__.py": planted, "tests/editors/__init__.py": planted,
             "tests/editors/lsp_tap.py": planted}
    bench = open_workbench(files, trusted=False)
    wait_for(lambda: any("Restricted Mode" in item for item in bench.status_items()), 60, "Restricted Mode")
    status = wait_ready(bench)
    assert "target=starter" in status  # the user's model setting, not the workspace's
    assert not marker.exists()
    initialize = next(m["message"] for m in bench.messages() if m["message"].get("method") == "initialize")
    options = initialize["params"]["initializationOptions"]
    assert options["completion"]["maxNewTokens"] == 3  # a setting that runs nothing still comes from the workspace
    assert options["model"]["target"] == "starter"


def stub_server(tmp_path: Path, ready_lag: int | None = None) -> list[str]:
    """The stub server's command, answering every next-edit request with the rename (and, with
    ``ready_lag``, announcing a suggestion written ahead after each change: see stub_lsp.py)."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"answers": [ANSWER], "delay_s": 0, "ready_lag": ready_lag}))
    return [sys.executable, str(STUB), str(script), str(tmp_path / "stub.jsonl")]


def show_stub_preview(open_workbench, tmp_path: Path) -> tuple[Workbench, list[str]]:
    """area.py open on the stub server, the cursor on the renamed parameter's line, *Suggest Next Edit*
    run: the workbench and the preview's struck-through text once it is drawn."""
    bench = open_workbench({"area.py": EDITED}, server=stub_server(tmp_path))
    bench.open_file("area.py")
    wait_for(lambda: bench.messages("textDocument/didOpen"), 30, "the document to reach the server")
    bench.go_to(1, 5)
    bench.run_command("speclsp: Suggest Next Edit")
    return bench, wait_for(lambda: bench.struck_text(), 30, "the preview's struck-through text")


def test_next_edit_preview_strikes_the_old_text_shows_the_new_and_tab_applies_it(open_workbench, tmp_path):
    bench, struck = show_stub_preview(open_workbench, tmp_path)
    assert struck == [OLD] * len(ANSWER["edits"])
    assert bench.inserted_labels() == [json.dumps(NEW)] * len(ANSWER["edits"])  # CSS content: a quoted string
    assert "\n".join(bench.lines()[n] for n in range(EDITED.count("\n"))) + "\n" == EDITED  # preview only
    bench.press("Tab")
    wait_for(lambda: not bench.struck_text(), 10, "the preview to go after Tab")
    bench.press("Control+s")
    path = bench.folder / "area.py"
    wait_for(lambda: path.read_text() == EXPECTED, 20, "the save of the renamed function")


def test_next_edit_escape_dismisses_and_leaves_the_file_unchanged(open_workbench, tmp_path):
    bench, _ = show_stub_preview(open_workbench, tmp_path)
    bench.press("Escape")
    wait_for(lambda: not bench.struck_text() and not bench.inserted_labels(), 10, "Escape to drop the preview")
    bench.press("Tab")  # the accept key no longer applies anything: Tab indents as usual
    lines = bench.lines()
    assert [lines[n] for n in range(1, EDITED.count("\n"))] == EDITED.splitlines()[1:]
    assert (bench.folder / "area.py").read_text() == EDITED  # nothing saved, nothing applied


def test_a_suggestion_written_ahead_is_previewed_without_asking_and_tab_applies_it(open_workbench, tmp_path):
    bench = open_workbench({"area.py": EDITED}, server=stub_server(tmp_path, ready_lag=0))
    bench.open_file("area.py")
    wait_for(lambda: bench.messages("textDocument/didOpen"), 30, "the document to reach the server")
    bench.go_to(1, 5)
    bench.type("x")
    bench.press("Backspace")  # the file reads as it was; the server announces a suggestion for this version
    struck = wait_for(lambda: bench.struck_text(), 30, "the preview of the suggestion written ahead")
    assert struck == [OLD] * len(ANSWER["edits"]) and len(bench.messages("speclsp/nextEdit")) >= 1
    bench.press("Tab")
    wait_for(lambda: not bench.struck_text(), 10, "the preview to go after Tab")
    bench.press("Control+s")
    wait_for(lambda: (bench.folder / "area.py").read_text() == EXPECTED, 20, "the save of the renamed function")


def test_the_status_bar_opens_the_server_log_with_a_line_per_request(open_workbench):
    bench = open_workbench({"versions.py": SOURCE})
    start_function(bench)
    wait_for(lambda: shown_ghost(bench), 120, "ghost text after the header")
    bench.call("evaluate", expression="Array.from(document.querySelectorAll('.statusbar-item'))"
               ".find(e => (e.getAttribute('aria-label') || '').includes('speclsp')).querySelector('a, .statusbar-item-label').click()")
    panel = "(document.querySelector('.part.panel') || {innerText: ''}).innerText.replace(/\\u00a0/g, ' ')"
    text = wait_for(lambda: (t := bench.call("evaluate", expression=panel)) and "inlineCompletion" in t and t, 20,
                    "the speclsp output channel with the requests")
    flat = text.replace("\n", "")  # the panel wraps long lines anywhere
    assert re.search(rf"\[info\] \[speclsp\] req=\d+ inlineCompletion versions\.py:{BODY_LINE}:4 ok \|.*total=", flat), text
    # The server's stderr reaches this channel as errors: the request's line comes once, as [info], not
    # also through stderr (where the server logged it at INFO before).
    entries = re.split(r"(?=\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[)", flat)
    assert not [entry for entry in entries if "[error]" in entry and "req=" in entry], text
    assert "bump_major" not in text  # no code text in the log at the default trace level


# A document with CRLF line ends, where the cursor line holds an astral character (🙂: 2 UTF-16 code
# units, 1 code point, 4 UTF-8 bytes) before the cursor.
CRLF_SOURCE = SOURCE.replace("\n", "\r\n")


def utf16_index(text: str, units: int) -> int:
    """The code-point index of UTF-16 offset ``units`` in ``text``."""
    count = 0
    for index, char in enumerate(text):
        if count >= units:
            return index
        count += 2 if ord(char) > 0xFFFF else 1
    return len(text)


def test_ghost_text_after_an_astral_character_in_a_crlf_file_is_at_the_cursor_and_keeps_crlf(open_workbench):
    bench = open_workbench({"versions.py": CRLF_SOURCE})
    start_function(bench)
    typed = 'label = "🙂" + text'  # Monaco closes the quote on the first '"' and types over it on the second
    bench.type(typed)
    line = "    " + typed
    wait_for(lambda: bench.lines().get(BODY_LINE) == line, 10, "the typed line")

    def answered_here():
        found = [(r, i) for r, i in answered_items(bench)
                 if r["params"]["position"] == {"line": BODY_LINE, "character": len(line.encode("utf-16-le")) // 2}]
        return found and shown_ghost(bench) and found[-1]

    request, item = wait_for(answered_here, 120, "ghost text after the emoji")
    shown = shown_ghost(bench)
    start = utf16_index(line, item["range"]["start"]["character"])
    typed_part = line[start:]
    assert item["insertText"].startswith(typed_part), (item, typed_part)
    assert shown == item["insertText"][len(typed_part):]
    geometry = bench.ghost_geometry()
    assert geometry is not None and abs(geometry["ghostLeft"] - geometry["cursorLeft"]) <= 2, geometry
    bench.press("Tab")  # (a new suggestion may follow at once: the check is the text Tab inserted)
    wait_for(lambda: bench.lines().get(BODY_LINE) == line + shown.split("\n")[0], 10, "Tab to insert the suggestion")
    bench.press("Control+s")
    path = bench.folder / "versions.py"
    expected = CRLF_SOURCE + "\r\n\r\n" + HEADER + "\r\n" + line + shown.replace("\n", "\r\n")
    wait_for(lambda: path.read_bytes().decode() == expected, 20, f"the save of {expected!r}")
