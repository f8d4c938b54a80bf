"""``textDocument/completion``: the same completion as one item, for clients without inline completion."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lsprotocol import types

if TYPE_CHECKING:
    from lsp_server.server import SpeclspServer


async def completion(ls: SpeclspServer, params: types.CompletionParams) -> types.CompletionList:
    answer = await ls.completions.complete("completion", params.text_document.uri, params.position)
    if answer is None:
        return types.CompletionList(is_incomplete=True, items=[])
    first_line = answer.insert_text.splitlines()[0] if answer.insert_text else ""
    item = types.CompletionItem(
        label=first_line.strip() or answer.insert_text.strip(),
        kind=types.CompletionItemKind.Text,
        detail="speclsp",
        text_edit=types.TextEdit(range=answer.range, new_text=answer.insert_text),
        filter_text=answer.insert_text,
        sort_text="0",
        insert_text_format=types.InsertTextFormat.PlainText,
    )
    # Incomplete: typing more changes the answer, so the client asks again.
    return types.CompletionList(is_incomplete=True, items=[item])


def register(server: SpeclspServer) -> None:
    server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(resolve_provider=False))(completion)
