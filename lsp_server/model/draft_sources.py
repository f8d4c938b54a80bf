"""Draft sources: which texts the engine's n-gram store may draft from, and the prompt tokens and
anchors kept between requests (the server's memory, as lsp-ai calls its equivalent backend).

For one request the n-gram store holds:

* the other open buffers (each at most ``MAX_SOURCE_CHARS``);
* the repository files most similar to the cursor's surroundings; they stay in the store after
  they leave that choice, within the store's token budget, because the file watcher reports their
  changes (:meth:`DraftSources.file_changed`);
* the document's last generation (``#output``: the prompt's last tokens and what the model wrote after
  them, a finished or a cancelled generation alike). A key that follows what the model wrote brings a
  request whose prompt ends where the previous one did: the drafter proposes the rest of the previous
  output and one verify pass accepts what still stands, instead of writing it again token by token
  (nothing the model computed is thrown away, and the output is still exactly the target's);
* when the prompt holds only part of the document, the parts above and below its window. They do not
  change while the user types inside the window (its start moves in steps), so the store keeps them
  from keystroke to keystroke; they are searched, not indexed (indexing a large file takes hundreds
  of milliseconds), and tokenised through the prompt encoder, which reuses the document's tokens.
  With ``defer_cold_parts`` (the server), a large part seen for the first time is tokenised after the
  answer (:meth:`DraftSources.warm_up`) instead of on the request's path.

Every method takes the generation backend (:mod:`lsp_server.backends`) and runs on the model thread
(its owner is the model session, :mod:`lsp_server.model.session`): this object is the only code that changes
the backend's sources and caches (the local engine checks the thread). A remote backend keeps no sources
(``keeps_sources`` false): its engine drafts on its own, so only the prompt tokens are kept for it.

Source keys carry the document's short name (``names``), which is what statistics and logs show.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from lsp_server.backends.base import GenerationBackend
from lsp_server.backends.base import Prompt
from lsp_server.completion.anchor import AnchorBook
from lsp_server.workspace.documents import Document
from lsp_server.completion.prompt_tokens import PromptEncoder, SourceKey
from lsp_server.completion.related_files import MAX_SOURCE_CHARS, Candidate
from lsp_server.workspace.names import file_name
from lsp_server.request import CompletionRequest

COLD_PART_CHARS = 8_000  # a document part longer than this is first tokenised after the answer (deferring)
OUTPUT_CONTEXT_TOKENS = 32  # prompt tokens kept before a generation's output in its #output source
_PARTS = ("above", "below")  # the document outside the prompt window


class DraftSources:
    """The n-gram sources and prompt tokens of one server (or one command-line run). Model thread only.

    Args:
        defer_cold_parts: tokenise a large document part seen for the first time in :meth:`warm_up`
            (after the answer) rather than during the request; it is no draft source until then.
        names: a document URI's short name (:class:`lsp_server.workspace.names.DisplayNames`); default:
            its file name.
    """

    def __init__(self, defer_cold_parts: bool = False, names: Callable[[str], str] | None = None):
        self.defer_cold_parts = defer_cold_parts
        self.names = names or file_name
        self._encoder: PromptEncoder | None = None
        self._pending: list[tuple[SourceKey, str, tuple[SourceKey, int]]] = []  # (key, text, origin)
        self.anchors = AnchorBook()  # the typed-tail prompts' anchors (lsp_server.completion.anchor)
        self._outputs: dict[str, tuple[int, list[int]]] = {}  # uri -> (serial, prompt tail + generated ids)
        self._serial = 0
        #: documents answered from a prompt cut for time since their last whole prompt (lsp_server.model.cold_prompt)
        self.answered_cut: set[str] = set()

    def key(self, uri: str, part: str = "document") -> SourceKey:
        """The source key of ``uri`` (or one of its parts), labelled with its short name."""
        return SourceKey(uri, part, self.names(uri))

    def encoder(self, backend: GenerationBackend) -> PromptEncoder:
        """The prompt encoder for the backend's tokenizer (a new one when the models were replaced)."""
        if self._encoder is None or self._encoder.tokenizer is not backend.tokenizer:
            self._encoder = PromptEncoder(backend.tokenizer)
            self._pending.clear()
        return self._encoder

    def document_opened(self, backend: GenerationBackend, document: Document) -> None:
        """Tokenise a newly opened document ahead of its first request, whose prompt windows then
        start from these tokens instead of tokenising up to 10 KB on its path."""
        if len(document.text) <= MAX_SOURCE_CHARS:
            self.encoder(backend).seed(self.key(document.uri), document.model_text)

    def document_closed(self, backend: GenerationBackend, uri: str) -> None:
        """Forget a closed document: its tokens, its n-gram sources (it never proposes its old text
        again) and its KV caches."""
        self.encoder(backend).forget(uri)
        self.anchors.forget(uri)
        self.answered_cut.discard(uri)
        self._outputs.pop(uri, None)
        self._pending = [item for item in self._pending if item[0].uri != uri]
        self.forget_in(backend, uri)

    def forget_in(self, backend: GenerationBackend, uri: str) -> None:
        """Drop ``uri``'s n-gram sources and KV caches in ``backend`` (a closed document; for a second
        backend beside the one whose tokens this object keeps)."""
        for part in ("document", "output", *_PARTS):
            backend.forget_source(SourceKey(uri, part))
        backend.forget_cache(uri)

    def file_changed(self, backend: GenerationBackend, uri: str) -> None:
        """A file on disk changed (the index watcher): drop the n-gram source of its old text."""
        backend.forget_source(SourceKey(uri))

    def sync(self, backend: GenerationBackend, request: CompletionRequest, prompt: Prompt,
             other_documents: list[Document], related: list[Candidate]) -> None:
        """Make the engine's n-gram store hold this request's sources (see the module docstring).

        Args:
            other_documents: the other open buffers, most recently touched first.
            related: the repository files and buffers chosen for the cursor
                (:func:`lsp_server.completion.related_files.related_files`).
        """
        if not backend.keeps_sources:  # a remote engine drafts from its own state
            return
        document = request.document
        sources: dict[SourceKey, tuple[object, object]] = {}  # key -> (version, text or its tokens' getter)
        for other in other_documents:
            if other.uri != document.uri and len(other.text) <= MAX_SOURCE_CHARS:
                sources[self.key(other.uri)] = (other.version, other.model_text)
        open_keys = {self.key(document.uri), *(self.key(d.uri) for d in other_documents)}
        repo_files = set()  # kept in the store after they leave the pool: the file watcher reports changes
        for candidate in related:
            key = self.key(candidate.uri)
            if key not in sources and len(candidate.text) <= MAX_SOURCE_CHARS:
                sources[key] = (candidate.version, candidate.text)
                if key not in open_keys:
                    repo_files.add(key)
        output = self._outputs.get(document.uri)
        if output is not None:
            serial, ids = output
            sources[self.key(document.uri, "output")] = (serial, lambda: ids)
        parts = self._document_parts(backend, request, prompt, sources)
        backend.sync_sources(sources, retain=repo_files, drop=open_keys, searched=parts)

    def remember_output(self, uri: str, prompt_ids: list[int], generated_ids: list[int]) -> None:
        """Keep a generation of ``uri`` (its prompt's ids and the ids it wrote, also when it was cancelled)
        as the document's ``#output`` draft source for its next requests; nothing when it wrote nothing."""
        if generated_ids:
            self._serial += 1
            self._outputs[uri] = (self._serial, [*prompt_ids[-OUTPUT_CONTEXT_TOKENS:], *generated_ids])

    def _document_parts(self, backend: GenerationBackend, request: CompletionRequest, prompt: Prompt,
                        sources: dict) -> set[SourceKey]:
        """Add the document's parts outside the prompt window to ``sources``; returns their keys."""
        document = request.document
        if not prompt.truncated or len(document.text) > MAX_SOURCE_CHARS:
            return set()
        full_prefix, full_suffix = document.model_split(request.offset)
        above = full_prefix[: len(full_prefix) - len(prompt.prefix)]
        below = full_suffix[len(prompt.suffix):]
        encoder, whole = self.encoder(backend), self.key(document.uri)
        parts = set()
        for part, text, at in (("above", above, 0), ("below", below, -len(below))):  # found from the ends
            if not text:
                continue
            key, origin = self.key(document.uri, part), (whole, at)
            cold = not encoder.holds(key) and not encoder.holds(whole) and not backend.has_source(key)
            if self.defer_cold_parts and cold and len(text) > COLD_PART_CHARS:
                self._pending.append((key, text, origin))
                continue
            sources[key] = ((len(text), hash(text)), functools.partial(encoder.ids, key, text, origin))
            parts.add(key)
        return parts

    def warm_up(self, backend: GenerationBackend) -> None:
        """Tokenise the parts deferred by the last requests (call after answering)."""
        encoder = self.encoder(backend)
        pending, self._pending = self._pending, []
        for key, text, origin in pending:
            encoder.ids(key, text, origin)
