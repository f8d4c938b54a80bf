"""The Neovim plugin's next-edit preview (editors/neovim/lua/speclsp/next_edit.lua) in a real headless
Neovim (Debian's 0.7.2 here), against a stub server (tests/editors/stub_lsp.py) that answers
``speclsp/nextEdit`` with canned edits: the preview marks what would change, accept applies it (and the
change reaches the server), dismiss and stale buffers never edit. The same flow against the real
server and models is an end-to-end test of its own.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.editors.rename_case import ANSWER, EDITED, EXPECTED, NEW, OLD, utf16_units
from tests.editors.test_neovim import wait_for

pytestmark = pytest.mark.editors

pynvim = pytest.importorskip("pynvim")

STUB = Path(__file__).resolve().parent / "stub_lsp.py"

class Session:
    """A Neovim with the plugin started on the stub server and ``EDITED`` open."""

    def __init__(self, nvim, tmp_path: Path, answers: list, delay_s: float = 0.0, inline: dict | None = None,
                 ready_lag: int | None = None):
        self.nvim, self.log_path = nvim, tmp_path / "stub.jsonl"
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"answers": answers, "delay_s": delay_s, "inline": inline, "ready_lag": ready_lag}))
        path = tmp_path / "area.py"
        path.write_text(EDITED, encoding="utf-8")
        nvim.exec_lua("require('speclsp').setup({ cmd = ... })",
                      [sys.executable, str(STUB), str(script), str(self.log_path)])
        nvim.command(f"edit {path}")
        wait_for(nvim, "vim.lsp.get_active_clients()[1] ~= nil "
                       "and vim.lsp.buf_is_attached(0, vim.lsp.get_active_clients()[1].id)", timeout=30)
        self.wait_logged(lambda m: m.get("method") == "textDocument/didOpen")
        nvim.command("normal! gg0w")  # cursor on `area`

    def logged(self) -> list[dict]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def wait_logged(self, predicate, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in self.logged() if predicate(m)]
            if found:
                return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"the stub never received the message; it got {[m.get('method') for m in self.logged()]}")

    def lines(self) -> list[str]:
        return self.nvim.current.buffer[:]

    def event(self):
        return self.nvim.exec_lua("return require('speclsp.next_edit').last_event()")

    def marks(self) -> list:
        return self.nvim.exec_lua(
            "return vim.api.nvim_buf_get_extmarks(0, require('speclsp.next_edit').ns, 0, -1, { details = true })")

    def show(self) -> None:
        self.nvim.command("SpeclspNextEdit")
        wait_for(self.nvim, "require('speclsp.next_edit').visible()", timeout=30)


def byte_col(line: str, character_utf16: int) -> int:
    """The byte column of a UTF-16 position on ``line``."""
    units = 0
    for index, char in enumerate(line):
        if units >= character_utf16:
            return len(line[:index].encode())
        units += utf16_units(char)
    return len(line.encode())


def test_preview_marks_the_change_and_accept_applies_every_edit(nvim, tmp_path):
    session = Session(nvim, tmp_path, [ANSWER])
    session.show()
    request = session.wait_logged(lambda m: m.get("method") == "speclsp/nextEdit")
    assert request["params"]["position"] == {"line": 0, "character": 4}
    assert request["params"]["textDocument"]["uri"] == (tmp_path / "area.py").as_uri()
    lines = session.lines()
    assert "\n".join(lines) + "\n" == EDITED  # previewing never edits
    marks = session.marks()
    deletions = sorted((row, col, details["end_row"], details["end_col"])
                       for _, row, col, details in marks if details.get("hl_group") == "DiffDelete")
    expected_deletions = sorted(
        (e["range"]["start"]["line"], byte_col(lines[e["range"]["start"]["line"]], e["range"]["start"]["character"]),
         e["range"]["end"]["line"], byte_col(lines[e["range"]["end"]["line"]], e["range"]["end"]["character"]))
        for e in ANSWER["edits"])
    assert deletions == expected_deletions and len(deletions) == 4
    for row, col, _, end_col in deletions:
        assert lines[row].encode()[col:end_col] == OLD.encode()
    # Below each edited line, a virtual line shows it as it will read, the inserted text marked.
    previews = {row: details["virt_lines"] for _, row, _, details in marks if "virt_lines" in details}
    assert sorted(previews) == [2, 3, 4]
    for row, virt_lines in previews.items():
        assert len(virt_lines) == 1
        assert "".join(text for text, _ in virt_lines[0]) == lines[row].replace(OLD, NEW)
        inserted = [text for text, group in virt_lines[0] if group == "DiffAdd"]
        assert inserted == [NEW] * lines[row].count(OLD)
    nvim.input("<Tab>")
    wait_for(nvim, "require('speclsp.next_edit').last_event() == 'accepted'", timeout=10)
    assert "\n".join(session.lines()) + "\n" == EXPECTED
    assert session.marks() == []
    # The applied edit reached the server through the ordinary document sync.
    session.wait_logged(lambda m: m.get("method") == "textDocument/didChange"
                        and (m.get("document") or {}).get("text") == EXPECTED)


def test_dismiss_clears_the_preview_and_the_accept_key_then_does_nothing(nvim, tmp_path):
    session = Session(nvim, tmp_path, [ANSWER])
    session.show()
    assert session.marks() != []
    nvim.input("<Esc>")
    wait_for(nvim, "not require('speclsp.next_edit').visible()", timeout=10)
    assert session.marks() == [] and session.event() == "dismissed"
    nvim.input("<Tab>")  # no preview: the key does what it does without the plugin
    nvim.command("sleep 100m")
    assert "\n".join(session.lines()) + "\n" == EDITED


def test_a_buffer_changed_after_the_preview_refuses_to_apply(nvim, tmp_path):
    session = Session(nvim, tmp_path, [ANSWER])
    session.show()
    # Change the buffer and accept at once, before any autocommand can drop the preview.
    accepted = nvim.exec_lua("vim.api.nvim_buf_set_lines(0, 5, 6, false, { '    return total  # checked' }); "
                             "return require('speclsp').accept_next_edit()")
    assert accepted is False and session.event() == "stale"
    lines = session.lines()
    assert lines[5] == "    return total  # checked"
    assert lines[:5] == EDITED.split("\n")[:5]  # nothing of the suggestion applied
    assert session.marks() == []
    # A change made by typing drops a shown preview by itself.
    session.show()
    nvim.input("Gox<Esc>")
    wait_for(nvim, "require('speclsp.next_edit').last_event() == 'stale'", timeout=10)
    assert session.marks() == [] and sum(OLD in line for line in session.lines()) == 3


def test_no_suggestion_and_answers_for_an_older_buffer_are_not_shown(nvim, tmp_path):
    session = Session(nvim, tmp_path, [None, ANSWER], delay_s=0.5)
    nvim.command("SpeclspNextEdit")
    wait_for(nvim, "require('speclsp.next_edit').last_event() == 'none'", timeout=30)
    assert session.marks() == []
    # The buffer changes while the server works: its answer is for the old text.
    nvim.command("SpeclspNextEdit")
    assert nvim.exec_lua("return require('speclsp.next_edit').pending()") is True
    nvim.exec_lua("vim.api.nvim_buf_set_lines(0, 5, 6, false, { '    return total' .. ' ' })")
    wait_for(nvim, "require('speclsp.next_edit').last_event() == 'stale'", timeout=30)
    assert session.marks() == [] and not nvim.exec_lua("return require('speclsp.next_edit').visible()")


def test_a_new_request_cancels_the_one_in_flight(nvim, tmp_path):
    session = Session(nvim, tmp_path, [ANSWER], delay_s=0.5)
    nvim.command("SpeclspNextEdit")
    nvim.command("SpeclspNextEdit")
    wait_for(nvim, "require('speclsp.next_edit').visible()", timeout=30)
    requests = [m["id"] for m in session.logged() if m.get("method") == "speclsp/nextEdit"]
    assert len(requests) == 2
    cancel = session.wait_logged(lambda m: m.get("method") == "$/cancelRequest")
    assert cancel["params"]["id"] == requests[0]
    nvim.exec_lua("require('speclsp').accept_next_edit()")
    assert "\n".join(session.lines()) + "\n" == EXPECTED



def test_an_inline_item_replacing_text_right_of_the_cursor_marks_it_and_accept_replaces_it(nvim, tmp_path):
    """A next-edit suggestion on the cursor's line comes as an inline item whose range ends right of the
    cursor: the ghost text shows the new text, the text it replaces is marked, and accepting replaces it."""
    row = 2
    line = EDITED.split("\n")[row]
    start = line.find(OLD)
    character = utf16_units(line[:start])
    item = {"insertText": NEW, "range": {"start": {"line": row, "character": character},
                                         "end": {"line": row, "character": character + len(OLD)}}}
    session = Session(nvim, tmp_path, [None], inline=item)
    nvim.api.win_set_cursor(0, (row + 1, len(line[:start].encode())))
    nvim.input("i")
    wait_for(nvim, "require('speclsp').suggestion()", timeout=30)
    assert nvim.exec_lua("return require('speclsp').suggestion()") == NEW
    marks = nvim.exec_lua(
        "return vim.api.nvim_buf_get_extmarks(0, require('speclsp.ghost').ns, 0, -1, { details = true })")
    replaced = [m for m in marks if m[3].get("hl_group") == "DiffDelete"]
    col = len(line[:start].encode())
    assert [(m[1], m[2], m[3]["end_col"]) for m in replaced] == [(row, col, col + len(OLD))]
    nvim.input("<Tab>")
    wait_for(nvim, "not require('speclsp').visible()", timeout=10)
    assert session.lines()[row] == line[:start] + NEW + line[start + len(OLD):]
    assert session.lines()[:row] == EDITED.split("\n")[:row]


@pytest.mark.parametrize("ready_lag", [0, 1])
def test_a_suggestion_written_ahead_is_previewed_for_the_buffer_as_it_is_only(nvim, tmp_path, ready_lag):
    session = Session(nvim, tmp_path, [ANSWER], ready_lag=ready_lag)
    # an edit away from the suggestion, then back: the buffer reads EDITED again at a newer version
    nvim.command("normal! Gox")
    nvim.command("normal! dd")
    session.wait_logged(lambda m: m.get("method") == "textDocument/didChange"
                        and m["params"]["textDocument"]["version"] >= 3)
    if ready_lag == 0:  # the server's notice for the current version: the plugin asks, and shows the answer
        wait_for(nvim, "require('speclsp.next_edit').visible()", timeout=30)
        assert session.wait_logged(lambda m: m.get("method") == "speclsp/nextEdit")
        assert "\n".join(session.lines()) + "\n" == EDITED  # previewing never edits
    else:  # a notice for a version the buffer has left: nothing asked, nothing shown
        time.sleep(1.0)
        assert not [m for m in session.logged() if m.get("method") == "speclsp/nextEdit"]
        assert not nvim.exec_lua("return require('speclsp.next_edit').visible()")
