"""The server's protocol object and its side files, in process: what reaches the client when a request
is malformed or a handler fails, and a trace file that is not a regular file (issue 19 follow-ups)."""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest
from pygls.exceptions import JsonRpcInternalError

from lsp_server.protocol.parent_watch import watch_parent
from lsp_server.protocol.envelope import ANSWERED
from lsp_server.features import create_server
from lsp_server.tracing import Tracer
from tests.fake_session import CapturedWriter

pytestmark = pytest.mark.unit


@pytest.fixture()
def protocol():
    server = create_server()
    writer = CapturedWriter()
    server.protocol.set_writer(writer)
    server.protocol.captured = writer
    return server.protocol


@pytest.mark.parametrize("line", ["1", 1.5, True, None])
def test_a_position_number_of_another_type_is_invalid_params_not_guessed(protocol, line):
    request = {"jsonrpc": "2.0", "id": 7, "method": "textDocument/inlineCompletion",
               "params": {"textDocument": {"uri": "file:///a.py"}, "position": {"line": line, "character": 0},
                          "context": {"triggerKind": 1}}}
    assert protocol.structure_message(request) is ANSWERED
    (answer,) = protocol.captured.messages
    assert answer["id"] == 7 and answer["error"]["code"] == -32602


def test_initialize_with_full_client_capabilities_structures(protocol):
    """Booleans are ints to Python: the strict integer hook must not catch them."""
    from lsprotocol import types
    from lsprotocol.converters import get_converter

    capabilities = get_converter().unstructure(types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(apply_edit=True, workspace_edit=types.WorkspaceEditClientCapabilities(
            document_changes=True, normalizes_line_endings=False))))
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"processId": None, "rootUri": None, "capabilities": capabilities}}
    message = protocol.structure_message(request)
    assert message.params.capabilities.workspace.workspace_edit.document_changes is True
    bad = {**request, "params": {**request["params"], "capabilities": {"workspace": {"applyEdit": "false"}}}}
    assert protocol.structure_message(bad) is ANSWERED  # "false" is not a boolean (cattrs would make it true)


def test_a_valid_position_still_structures(protocol):
    request = {"jsonrpc": "2.0", "id": 8, "method": "textDocument/inlineCompletion",
               "params": {"textDocument": {"uri": "file:///a.py"}, "position": {"line": 3, "character": 0},
                          "context": {"triggerKind": 1}}}
    message = protocol.structure_message(request)
    assert message.params.position.line == 3 and protocol.captured.messages == []


def test_an_internal_error_reaches_the_client_without_python_text(protocol):
    try:
        raise ValueError("top_p must be in (0, 1], got nan")
    except ValueError:
        error = JsonRpcInternalError.of(sys.exc_info()).to_response_error()
    assert "top_p" in error.message and "traceback" in error.data  # what pygls would have sent
    protocol._send_response(9, error=error)
    (answer,) = protocol.captured.messages
    assert answer["id"] == 9 and answer["error"]["code"] == -32603
    assert "top_p" not in json.dumps(answer) and "traceback" not in json.dumps(answer)
    assert "log" in answer["error"]["message"]


def test_a_trace_file_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(Tracer().set_trace_file(str(fifo))), daemon=True)
    thread.start()
    thread.join(30)  # a blocking open() would never return: no reader on the FIFO
    assert outcome and "cannot write the trace file" in outcome[0]
    regular = tmp_path / "trace.jsonl"
    assert Tracer().set_trace_file(str(regular)) is None and regular.exists()


@pytest.mark.parametrize("process_id", [2**70, 2**31, -1, 0, "123", True, None])
def test_a_process_id_that_no_process_can_have_is_not_watched(process_id):
    assert watch_parent(process_id, lambda: None) is None
