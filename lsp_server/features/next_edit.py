"""Next-edit suggestions: request ``speclsp/nextEdit`` and ``textDocument/codeAction`` (+ ``codeAction/resolve``).

The region around the cursor is rewritten with the user's recent edits carried through it
(:meth:`lsp_server.requests.next_edit_service.NextEditService.next_edit`), and the answer is the minimal edits from the
old region to the new, in the negotiated position encoding.

``speclsp/nextEdit`` (a speclsp extension of LSP), params ``{"textDocument": {"uri"}, "position"}``;
result ``null`` (nothing to change, or nothing to suggest) or::

    {"edits": TextEdit[], "range": Range (the region, widened to the lines around it that the answer wrote
     again: lsp_server.next_edit.span), "text": str (the new text of that range),
     "version": int (the document version the edits apply to),
     "stats": {"tokens": int, "passes": int, "tokens_per_pass": float,
               "accepted": {source: int}, "total_ms": float}}

``textDocument/codeAction``: "Apply suggested edit" (kind ``refactor.rewrite``) with a ``WorkspaceEdit``.
An invoked request computes it at once; an automatic one (sent on cursor moves) never runs the model:
it offers the action unresolved, with ``data``, only when the document has recent edits and the client
resolves ``edit`` lazily, and ``codeAction/resolve`` computes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from lsp_server.workspace.positions import codec_for
from lsp_server.next_edit.text_edits import to_text_edits

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer
    from lsp_server.requests.next_edit_service import NextEdit

NEXT_EDIT_METHOD = "speclsp/nextEdit"
ACTION_TITLE = "Apply suggested edit"
ACTION_KIND = types.CodeActionKind.RefactorRewrite


def _field(value: Any, name: str) -> Any:
    """``value[name]`` or ``value.name`` (pygls gives a custom method's params as an object)."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def _params(params: Any) -> tuple[str, types.Position]:
    """(uri, position) of ``speclsp/nextEdit`` params.

    Raises:
        JsonRpcInvalidParams: a missing uri or position, or one of the wrong type.
    """
    document, position = _field(params, "textDocument"), _field(params, "position")
    uri = _field(document, "uri") if document is not None else None
    line = _field(position, "line") if position is not None else None
    character = _field(position, "character") if position is not None else None
    if not isinstance(uri, str) or not all(isinstance(v, int) and not isinstance(v, bool) for v in (line, character)):
        raise JsonRpcInvalidParams(f"{NEXT_EDIT_METHOD} needs {{'textDocument': {{'uri': str}}, 'position': "
                                   "{'line': int, 'character': int}}")
    return uri, types.Position(line=line, character=character)


def text_edits(ls: SpeclspServer, answer: NextEdit) -> tuple[list[types.TextEdit], types.Range]:
    """The answer's edits and its region as LSP objects in the negotiated encoding."""
    codec, lines, rewrite = codec_for(ls.pipeline.position_encoding), answer.document.lines, answer.rewrite
    region = types.Range(start=lines.position_at(rewrite.start, codec), end=lines.position_at(rewrite.end, codec))
    return to_text_edits(answer.rewrite.edits, lines, codec), region


def next_edit_result(ls: SpeclspServer, answer: NextEdit | None) -> dict | None:
    """The JSON result of ``speclsp/nextEdit`` (see the module docstring)."""
    if answer is None or not answer.rewrite.edits:
        return None
    edits, region = text_edits(ls, answer)
    stats = answer.rewrite.generation.stats
    unstructure = ls.protocol._converter.unstructure  # lsprotocol's camelCase JSON
    return {"edits": [unstructure(edit) for edit in edits], "range": unstructure(region), "text": answer.rewrite.text,
            "version": answer.document.version,
            "stats": {"tokens": stats.new_tokens, "passes": stats.target_passes,
                      "tokens_per_pass": round(stats.tokens_per_pass, 3),
                      "accepted": {name: s.accepted for name, s in sorted(stats.sources.items())},
                      "total_ms": round(answer.handler_ms, 1)}}


def _action(ls: SpeclspServer, uri: str, answer: NextEdit | None) -> types.CodeAction | None:
    if answer is None or not answer.rewrite.edits:
        return None
    edits, _ = text_edits(ls, answer)
    return types.CodeAction(title=ACTION_TITLE, kind=ACTION_KIND, edit=types.WorkspaceEdit(changes={uri: edits}))


def _resolves_edit(ls: SpeclspServer) -> bool:
    """Whether the client fills in a code action's ``edit`` with ``codeAction/resolve``."""
    action = getattr(ls.client_capabilities.text_document, "code_action", None)
    support = getattr(action, "resolve_support", None) if action is not None else None
    return support is not None and "edit" in (support.properties or [])


async def next_edit(ls: SpeclspServer, params: Any = None) -> dict | None:
    uri, position = _params(params)
    return next_edit_result(ls, await ls.next_edits.next_edit(uri, position))


async def code_action(ls: SpeclspServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    only = params.context.only
    if only is not None and not any(ACTION_KIND.value.startswith(kind) for kind in only):
        return None
    uri, position = params.text_document.uri, params.range.start
    if params.context.trigger_kind == types.CodeActionTriggerKind.Automatic:  # on every cursor move: no model
        if not ls.next_edits.history.has_edits(uri) or not _resolves_edit(ls):
            return None
        data = {"uri": uri, "position": {"line": position.line, "character": position.character}}
        return [types.CodeAction(title=ACTION_TITLE, kind=ACTION_KIND, data=data)]
    action = _action(ls, uri, await ls.next_edits.next_edit(uri, position))
    return [action] if action is not None else None


async def code_action_resolve(ls: SpeclspServer, action: types.CodeAction) -> types.CodeAction:
    if action.title != ACTION_TITLE or action.data is None or action.edit is not None:
        return action
    uri, position = _params({"textDocument": {"uri": _field(action.data, "uri")},
                             "position": _field(action.data, "position")})
    resolved = _action(ls, uri, await ls.next_edits.next_edit(uri, position))
    # Nothing to change any more: an empty edit (resolve must answer with the action).
    action.edit = resolved.edit if resolved is not None else types.WorkspaceEdit(changes={})
    return action


def register(server: SpeclspServer) -> None:
    server.feature(NEXT_EDIT_METHOD)(next_edit)
    server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                   types.CodeActionOptions(code_action_kinds=[ACTION_KIND], resolve_provider=True))(code_action)
    server.feature(types.CODE_ACTION_RESOLVE)(code_action_resolve)
