"""Next-edit suggestions on the real Qwen2.5-Coder Instruct pair over stdio (issue 21, "done when"): rename a
parameter on a function's definition line, ask ``speclsp/nextEdit``, apply its edits: every occurrence in
the function is renamed. Skipped without the model packs (see tests/test_real_models.py)."""

from __future__ import annotations

import asyncio
import re
import sys

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from tests.test_lsp_e2e import capabilities, wait_until_ready
from tests.test_next_edit_e2e import applied
from tests.test_real_models import DRAFT, TARGET, real_dirs  # noqa: F401  (the packs fixture)

pytestmark = pytest.mark.real

SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server.cli", "serve"])
DEADLINE_S = 600.0  # a rewrite of a short function on this CPU takes seconds; this only detects a hang
SOURCE = '''def summarize(records, limit):
    """Totals of the first records, by kind."""
    totals = {}
    for record in records[:limit]:
        kind = record["kind"]
        totals[kind] = totals.get(kind, 0) + record["amount"]
    if len(records) > limit:
        totals["rest"] = len(records) - limit
    return totals
'''


def assert_renamed_at_every_use(text: str) -> None:
    """``SOURCE``'s parameter ``limit`` is gone from ``text``, and every line that used it is there with
    ``count`` in the same places. The model may also reword prose (it once wrote "the first 'count'
    records" in the docstring): that is its choice."""
    assert re.findall(r"\blimit\b", text) == [], text
    renamed_lines = [line.replace("limit", "count") for line in SOURCE.splitlines() if "limit" in line]
    assert all(line in text.splitlines() for line in renamed_lines), text


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, real_dirs):  # noqa: F811  (the fixture)
    options = {"model": {"target": TARGET, "draft": DRAFT, "device": "cpu"}}
    lsp_client.initialize_result = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=capabilities(), initialization_options=options))
    await wait_until_ready(lsp_client, timeout=900.0)
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio(loop_scope="module")
async def test_renaming_a_parameter_renames_it_through_the_function(client: LanguageClient):
    uri = "file:///workspace/summary.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=SOURCE)))
    start = SOURCE.index("limit")
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(start=types.Position(line=0, character=start),
                              end=types.Position(line=0, character=start + len("limit"))), text="count")]))
    edited = SOURCE.replace("limit):", "count):", 1)
    params = {"textDocument": {"uri": uri}, "position": {"line": 0, "character": start + len("count")}}
    result = await asyncio.wait_for(client.protocol.send_request_async("speclsp/nextEdit", params), DEADLINE_S)
    assert result is not None and result.version == 2
    renamed = applied(edited, result.edits)
    assert_renamed_at_every_use(renamed)
