"""``textDocument/inlineCompletion`` (LSP 3.18): ghost text at the cursor.

Answers one item that always carries a ``range`` (an empty range at the cursor, in the negotiated
position encoding, docs/cases.md L5), or an empty list when there is nothing to offer. The range is
empty, except for a next-edit suggestion on the cursor's line, whose range runs from the cursor over
the text it replaces (:meth:`lsp_server.requests.completion_service.CompletionService.complete`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


async def inline_completion(ls: SpeclspServer, params: types.InlineCompletionParams) -> types.InlineCompletionList:
    context = params.context
    automatic = context is not None and context.trigger_kind == types.InlineCompletionTriggerKind.Automatic
    answer = await ls.completions.complete("inlineCompletion", params.text_document.uri, params.position, automatic)
    if answer is None:
        return types.InlineCompletionList(items=[])
    return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=answer.insert_text,
                                                                        range=answer.range)])


def register(server: SpeclspServer) -> None:
    # Registering with options makes pygls advertise inlineCompletionProvider in initialize.
    server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(inline_completion)
