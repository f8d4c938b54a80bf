"""The extension in a real VS Code with the real Qwen2.5-Coder pair (tier ``real``; minutes on a CPU):
ghost text written by the models is what the server answered and Tab takes it; a parameter renamed on
its definition line, *speclsp: Suggest Next Edit*, the preview, Tab, and the saved file has the rename
carried through. With ``SPECLSP_SCREENSHOT_DIR`` set, the screenshots of the ghost text and of the
next-edit preview are written there (the README's come from this test).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.editors.test_vscode_e2e import (BODY_LINE, HEADER, SOURCE, answered_items, open_workbench,  # noqa: F401
                                           remainder, shown_ghost,
                                           start_function, wait_ready)
from tests.editors.vscode_workbench import wait_for
from tests.test_next_edit_real import SOURCE as RENAME_SOURCE
from tests.test_next_edit_real import assert_renamed_at_every_use
from tests.test_real_models import DRAFT, TARGET, real_dirs  # noqa: F401  (the packs fixture)

pytestmark = pytest.mark.real


def keep_screenshot(path: Path, name: str) -> None:
    target = os.environ.get("SPECLSP_SCREENSHOT_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(target) / name)


def test_real_models_ghost_text_and_a_next_edit_in_vscode(open_workbench, tmp_path, real_dirs):  # noqa: F811
    bench = open_workbench({"versions.py": SOURCE, "summary.py": RENAME_SOURCE},
                           {"speclsp.model.target": TARGET, "speclsp.model.draft": DRAFT, "speclsp.model.device": "cpu",
                            "speclsp.completion.model": "target"})  # the 1.5B writes (auto: the 0.5B on a CPU)
    start_function(bench)
    status = wait_ready(bench, timeout=900)
    assert f"target={TARGET}" in status and f"draft={DRAFT}" in status
    shown = wait_for(lambda: shown_ghost(bench), 300, "ghost text from the real models")
    request, item = answered_items(bench)[-1]
    assert request["params"]["position"] == {"line": BODY_LINE, "character": 4}
    assert shown == remainder("    ", request, item)
    keep_screenshot(bench.screenshot(tmp_path / "ghost.png"), "vscode-ghost-text.png")
    bench.press("Tab")
    wait_for(lambda: bench.lines().get(BODY_LINE) == "    " + shown.split("\n")[0], 10, "Tab to insert the suggestion")
    bench.press("Control+s")
    path = bench.folder / "versions.py"
    expected = SOURCE + "\n\n" + HEADER + "\n    " + shown
    wait_for(lambda: path.read_text() == expected, 20, f"the save of {expected!r}")

    bench.open_file("summary.py")
    bench.go_to(1, 24)  # the start of `limit` in "def summarize(records, limit):"
    bench.press("Control+Shift+ArrowRight")
    bench.type("count")
    wait_for(lambda: bench.lines().get(0) == "def summarize(records, count):", 10, "the rename on the definition line")
    bench.run_command("speclsp: Suggest Next Edit")
    struck = wait_for(lambda: bench.struck_text(), 600, "the next-edit preview")
    assert "limit" in "".join(struck), struck
    keep_screenshot(bench.screenshot(tmp_path / "next-edit.png"), "vscode-next-edit.png")
    bench.press("Tab")
    wait_for(lambda: not bench.struck_text(), 10, "the preview to go after Tab")
    wait_for(lambda: "limit" not in "".join(bench.lines().values()), 10, "Tab to apply the edits")
    bench.press("Control+s")
    summary = bench.folder / "summary.py"
    wait_for(lambda: "limit" not in summary.read_text(), 20, "the save")
    assert_renamed_at_every_use(summary.read_text())
