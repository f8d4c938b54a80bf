"""The generation backend seam: what the completer needs from whatever generates its text.

The features and the context builder (:mod:`lsp_server.model.completer`, :mod:`lsp_server.completion.prompt`) speak to a
:class:`GenerationBackend` only; they do not know whether the local engine (:mod:`lsp_server.backends.local`)
or a remote serving engine over HTTP (:mod:`lsp_server.backends.openai`) serves them. A backend gives:

* ``tokenizer`` and ``capabilities``: the model's own tokenizer (prompt budgeting in tokens, rendering
  the prompt in the model's FIM format) and what the model knows (FIM and repository tokens, stop ids);
* ``completion_stop_ids``: the ids that end a completion (a special token never belongs in code);
* :meth:`GenerationBackend.generate` / :meth:`GenerationBackend.rewrite`: a prompt in, a
  :class:`decoding.generate.Generation` out (text, token count, finish reason, stage timings);
* the draft sources and caches the model session keeps up to date (:mod:`lsp_server.model.draft_sources`):
  :meth:`GenerationBackend.sync_sources`, :meth:`~GenerationBackend.forget_source`,
  :meth:`~GenerationBackend.forget_cache` and :meth:`~GenerationBackend.prefill`; ``keeps_sources`` says
  whether they do anything (a remote engine drafts from its own state and keeps its own caches: for it
  they are no-ops, and :meth:`~GenerationBackend.prefill` computes nothing).

Failures of a remote engine are :class:`BackendError` (typed by ``kind``); the request pipeline
(:mod:`lsp_server.requests.pipeline`) maps them to one message per kind and an empty answer. The local engine never raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Set
from dataclasses import dataclass, field
from typing import Protocol

from decoding.weights.capabilities import ModelCapabilities
from decoding.types import EngineConfig, Generation, GenerationConfig


LOCAL, OPENAI, LLAMACPP_INFILL = "local", "openai", "llamacpp-infill"
BACKENDS = (LOCAL, OPENAI, LLAMACPP_INFILL)
ROLE_COMPLETION, ROLE_NEXT_EDIT = "completion", "nextEdit"  # what a backend serves (lsp_server.model.session)
ROLES = (ROLE_COMPLETION, ROLE_NEXT_EDIT)
#: ``completion.model``: which local model writes inline completions (:func:`lsp_server.backends.loading.load_backend`).
COMPLETION_MODELS = ("auto", "target", "draft")


@dataclass(frozen=True)
class RemoteConfig:
    """Where a remote engine listens and how to talk to it."""

    endpoint: str  # base URL, e.g. http://gpu-box:8000 (the /v1 part may be included)
    model: str = ""  # the served model's name ("model" of the request); "": not sent
    api_key_env: str = ""  # the environment variable holding the API key ("": none); the key is never stored
    timeout_s: float = 10.0  # connecting, and waiting for the next bytes of an answer (seconds)


@dataclass(frozen=True)
class BackendConfig:
    """What the model thread loads; a change reloads it (:meth:`lsp_server.settings.Settings.backend_config`)."""

    kind: str = LOCAL  # one of BACKENDS
    engine: EngineConfig = field(default_factory=EngineConfig)  # the local models; for a remote backend, ``model`` names the tokenizer
    remote: RemoteConfig | None = None  # for a remote backend
    completion_model: str = "target"  # local: auto, target or draft (see the module docstring)
    next_edit_model: str = ""  # local: a model of next edits' own, loaded beside the pair ("": the pair's)


@dataclass(frozen=True)
class Prompt:
    """A prompt for one completion request and what post-processing needs to know."""

    prompt_ids: list[int]
    prefix: str  # model text (\n line breaks) before the cursor, as kept in the prompt
    suffix: str  # model text after the cursor, as kept in the prompt
    cursor_offset: int  # code points into the document text
    line_suffix: str  # text right of the cursor on its line
    eol: str  # the document's line ending
    fim: bool  # whether the prompt is fill-in-the-middle
    truncated: bool  # the budget left part of the document out of the prompt
    snippets: tuple[str, ...] = ()  # labels of the other files' snippets in the prompt
    extra: tuple[tuple[str, str], ...] = ()  # (label, text) of those snippets (for an engine that renders them)
    healed: str = ""  # token healing: the prefix's last token, left out of prompt_ids; the output must start with it
    tail_ids: tuple[int, ...] = ()  # the typed-tail layout: the ids after <|fim_middle|>
    tail_text: str = ""  # their text


@dataclass(frozen=True)
class RewritePrompt:
    """A rewrite prompt and its region."""

    prompt_ids: list[int]
    draft_ids: list[int]  # the region's tokens, then the end marker's
    region_start: int  # code points into the document text: the start of the region's first line
    region_end: int  # the end of its last line, before the line break
    region_text: str  # the document text of the region (its own line endings)
    end_marker: str  # what the model writes after the region; a stop string ("" where a stop token ends it)
    chat: bool  # a chat-template format
    prompt_format: str = "chat"  # one of lsp_server.next_edit.formats.FORMATS
    trailing_break: bool = False  # the answer ends with a line break of the format's, not the region's
    latest_diff: str = ""  # the user's latest edit as a unified diff (model text; "" when none)


@dataclass(frozen=True)
class LoadedModels:
    """What a backend serves, described on the model thread for the event loop (which never touches it)."""

    target: str
    draft: str  # "none" without a draft model; "engine" when a remote engine drafts on its own
    device: str  # "cuda:0", "cpu"... or the remote endpoint
    dtype: str
    notice: str | None  # for the user, e.g. the real models are missing and the starter pair runs
    next_edit: str = ""  # where another backend writes next edits: its models and why ("": this one)


class BackendError(Exception):
    """A remote engine failed one request: unreachable, too slow, an HTTP error, a malformed answer.

    Args:
        kind: the failure's kind, one message per kind is shown to the user (e.g. ``unreachable``,
            ``timeout``, ``http 500``, ``model not found``, ``malformed stream``, ``unauthorized``).
        message: for the user: what failed and what to do; never the API key.
        retry_in_s: seconds until the backend tries the engine again (its backoff); requests before
            then fail at once with the same kind.
    """

    def __init__(self, kind: str, message: str, retry_in_s: float = 0.0):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_in_s = retry_in_s


class GenerationBackend(Protocol):
    """What generates completions and rewrites; see the module docstring. Model thread only."""

    name: str  # "local", "openai", "llamacpp-infill": the setting's value, for logs and traces
    tokenizer: object  # a transformers tokenizer (fast): prompt budgets and the model's own format
    capabilities: ModelCapabilities
    completion_stop_ids: frozenset[int]
    keeps_sources: bool  # True: n-gram sources and KV caches live here (local); False: all no-ops (remote)
    #: True: honours ``GenerationConfig.required_prefix`` (token healing) and ``deadline`` (local); False:
    #: the prompt is not healed for it (a remote engine's API has no such constraint)
    constrains_output: bool

    def generate(self, prompt: Prompt, config: GenerationConfig, drafter: str,
                 should_stop: Callable[[], bool], cache_key: Hashable = None) -> Generation:
        """Continue ``prompt`` (its ``prompt_ids``, or its prefix and suffix for an infill endpoint).

        Args:
            drafter: the local engine's draft mode (``settings.drafter``); a remote engine drafts on its own.
            should_stop: polled while generating; once true, the generation ends with ``cancelled``
                (a remote stream is closed at once).
            cache_key: whose prompt caches to reuse (a document URI); a remote engine keeps its own.
        Raises:
            BackendError: a remote engine failed (never from the local engine).
        """

    def rewrite(self, prompt: RewritePrompt, config: GenerationConfig, drafter: str,
                should_stop: Callable[[], bool], cache_key: Hashable = None) -> Generation:
        """Write the rewritten region of a next-edit prompt; as :meth:`generate`."""

    def describe(self) -> LoadedModels:
        """What this backend serves, for the status and the logs."""

    def claim_thread(self) -> None:
        """Make the calling thread (the model thread) the only one allowed to use the backend."""

    def sync_sources(self, wanted: dict[Hashable, tuple[object, object]], retain: Set[Hashable] = frozenset(),
                     drop: Set[Hashable] = frozenset(), searched: Set[Hashable] = frozenset()) -> None:
        """Make the n-gram store hold ``wanted`` (``{key: (version, text or a getter of its token ids)}``);
        see :meth:`decoding.engine.Engine.sync_sources`. A no-op without local sources."""

    def has_source(self, key: Hashable) -> bool:
        """Whether the n-gram store holds ``key`` (always ``False`` without local sources)."""

    def forget_source(self, key: Hashable) -> None:
        """Drop the n-gram source ``key``: it never proposes its old text again."""

    def forget_cache(self, cache_key: Hashable) -> None:
        """Drop the KV caches kept under ``cache_key`` (a document closed)."""

    def prompt_cost(self, prompt_ids: list[int], cache_key: Hashable) -> tuple[int, float] | None:
        """``(tokens of prompt_ids the caches of cache_key lack, estimated ms to compute one of them)``, or
        ``None`` where this backend cannot tell (a remote engine keeps its own cache)."""

    def prefill(self, prompt_ids: list[int], cache_key: Hashable, should_stop: Callable[[], bool],
                spare: bool = False, preempt: Callable[[], bool] | None = None) -> int:
        """Compute ``prompt_ids`` into the KV cache of ``cache_key`` ahead of a request whose prompt starts
        with them, in a rewrite's pieces polled with ``should_stop`` and ``preempt`` (also polled between
        the model's layers, dropping the piece in flight); returns the prompt tokens computed (0 for a
        remote engine, which keeps its own cache). ``spare``: into the key's spare cache, beside the prompt
        in use (:meth:`decoding.engine.Engine.prefill`), in small pieces."""
