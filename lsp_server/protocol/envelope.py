"""JSON-RPC 2.0 envelope checks and the LSP 3.17 lifecycle gate, applied to each message before pygls
sees it. Pure: a message (parsed JSON) in, :class:`Rejection` s out; the transport answers them.

Checks (JSON-RPC 2.0, "Request object" and "Batch"; LSP 3.17, "Base Protocol" and "Lifecycle"):

* the body is UTF-8 JSON, else ParseError (-32700, id null);
* a batch (JSON array): LSP has none, so each request in it gets InvalidRequest (-32600) with its
  id, and an empty batch one InvalidRequest with id null;
* a message is an object with ``"jsonrpc": "2.0"``; a request's id is a string or an integer (not a
  boolean, fraction, null, object or array); ``method`` is a string; ``params``, when present, is an
  object or an array (``null`` is read as absent: pygls' client sends it for ``shutdown``); an LSP notification method (``textDocument/didOpen``...) is not sent with an id.
  A broken request is answered InvalidRequest with its id, or id null when the id itself is what is
  broken; JSON-RPC never answers notifications, so broken ones are only logged;
* lifecycle (:class:`Lifecycle`): before ``initialize``, requests get ServerNotInitialized (-32002) and
  notifications other than ``exit`` are dropped; a second ``initialize`` and every request after
  ``shutdown`` get InvalidRequest, and notifications after ``shutdown`` other than ``exit`` are dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from types import SimpleNamespace

import attrs
from lsprotocol import types

#: A message the protocol already answered while structuring it (a request whose params do not fit):
#: the transport's loop hands it to nobody.
ANSWERED = SimpleNamespace(jsonrpc="answered")

MsgId = int | str

#: LSP notification methods (either direction): these are never requests.
NOTIFICATION_METHODS = frozenset(
    method for method, (message_type, *_) in types.METHOD_TO_TYPES.items()
    if message_type is not None and "id" not in attrs.fields_dict(message_type))


@dataclass(frozen=True)
class Rejection:
    """A message refused before dispatch. ``answer``: send a JSON-RPC error response with ``msg_id``
    (``None`` is sent as id null), else only log ``message``."""

    code: int
    message: str
    msg_id: MsgId | None = None
    answer: bool = True


def valid_id(value: object) -> bool:
    """Whether ``value`` can be an LSP request id: a string or an integer (``bool`` is not one)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def parse_body(body: bytes) -> object | Rejection:
    """The JSON value of a body, or a ParseError :class:`Rejection` (id null)."""
    try:
        return json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Rejection(types.ErrorCodes.ParseError, f"Parse error: the body is not UTF-8 ({exc.reason} "
                                                      f"at byte {exc.start})")
    except RecursionError:
        return Rejection(types.ErrorCodes.ParseError, "Parse error: the JSON is nested too deeply")
    except ValueError as exc:
        return Rejection(types.ErrorCodes.ParseError, f"Parse error: {exc}")


def _invalid(message: str, msg_id: object = None, answer: bool = True) -> Rejection:
    return Rejection(types.ErrorCodes.InvalidRequest, f"Invalid request: {message}",
                     msg_id if valid_id(msg_id) else None, answer)


def check_batch(batch: list) -> list[Rejection]:
    """Rejections for a JSON array sent as a message: LSP does not support batches."""
    if not batch:
        return [_invalid("an empty batch (LSP does not support batches)")]
    rejections = []
    for element in batch:
        is_request = isinstance(element, dict) and "method" in element and "id" in element
        is_notification = isinstance(element, dict) and "method" in element and not is_request
        reason = "LSP does not support batches: send each message on its own"
        if is_request:
            rejections.append(_invalid(reason, element["id"]))
        else:  # a notification, a response or not a message at all: nothing to answer
            what = "a notification" if is_notification else "an element"
            rejections.append(_invalid(f"{what} in a batch was dropped: {reason}", answer=False))
    return rejections


def check_message(data: object) -> list[Rejection]:
    """What is wrong with one parsed message (empty when nothing is). Responses from the client
    (an id and ``result`` or ``error``, no method) are checked only for their version and id."""
    if isinstance(data, list):
        return check_batch(data)
    if not isinstance(data, dict):
        return [_invalid(f"a message is a JSON object, got {type(data).__name__}")]
    msg_id, has_id = data.get("id"), "id" in data
    if "method" not in data:
        if has_id and ("result" in data or "error" in data):
            if data.get("jsonrpc") != "2.0" or not (valid_id(msg_id) or msg_id is None):
                return [_invalid(f"a response with jsonrpc {data.get('jsonrpc')!r} and id {msg_id!r} was "
                                 "dropped", answer=False)]
            return []
        return [_invalid("a message needs a method (request or notification) or a result or error (response)",
                         msg_id)]
    method = data["method"]
    answer = has_id  # JSON-RPC does not answer notifications, even broken ones
    if has_id and not valid_id(msg_id):
        return [_invalid(f"the id must be a string or an integer, got {json.dumps(msg_id)[:40]}")]
    problem = None
    if data.get("jsonrpc") != "2.0":
        problem = f'"jsonrpc" must be "2.0", got {json.dumps(data.get("jsonrpc"))[:40]}'
    elif not isinstance(method, str):
        problem = f"the method must be a string, got {json.dumps(method)[:40]}"
    elif data.get("params") is not None and not isinstance(data["params"], dict | list):
        problem = f"params must be an object or an array, got {type(data['params']).__name__}"
    elif has_id and method in NOTIFICATION_METHODS:
        problem = f"{method} is a notification: send it without an id"
    return [_invalid(problem, msg_id, answer)] if problem else []


class Phase(StrEnum):
    """Where the server is in the LSP lifecycle."""

    WAITING = "waiting for initialize"
    RUNNING = "running"
    SHUTDOWN = "shut down"


class Lifecycle:
    """The LSP lifecycle gate: which well-formed messages may be dispatched now.

    ``exit`` is never gated: the transport handles it in every phase.
    """

    def __init__(self) -> None:
        self.phase = Phase.WAITING

    def admit(self, method: str, msg_id: MsgId | None, is_request: bool) -> Rejection | None:
        """``None`` to dispatch the message, or why not (answered for requests, logged otherwise)."""
        if self.phase is Phase.WAITING and method != types.INITIALIZE:
            if is_request:
                return Rejection(types.ErrorCodes.ServerNotInitialized,
                                 f"Server not initialized: send initialize before {method}", msg_id)
            return _invalid(f"{method} before initialize was dropped", answer=False)
        if self.phase is Phase.WAITING and not is_request:
            return _invalid("initialize is a request: send it with an id", answer=False)
        if self.phase is Phase.RUNNING and method == types.INITIALIZE:
            return _invalid("the server is already initialized (a second initialize changes nothing)", msg_id,
                            answer=is_request)
        if self.phase is Phase.SHUTDOWN:
            return _invalid(f"{method} after shutdown: only exit is accepted now", msg_id, answer=is_request)
        return None

    def dispatched(self, method: str) -> None:
        """Note that ``method`` was accepted (its parameters were valid) and handed to its handler."""
        if method == types.INITIALIZE:
            self.phase = Phase.RUNNING
        elif method == types.SHUTDOWN:
            self.phase = Phase.SHUTDOWN
