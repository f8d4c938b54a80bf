"""The generation backend seam: what the completer needs from whatever generates its text.

The features and the context builder (:mod:`lsp_server.completer`, :mod:`lsp_server.prompt`) speak to a
:class:`GenerationBackend` only; they do not know whether the local engine (:mod:`lsp_server.backends.local`)
or a remote serving engine over HTTP (:mod:`lsp_server.backends.openai`) serves them. A backend gives:

* ``tokenizer`` and ``capabilities``: the model's own tokenizer (prompt budgeting in tokens, rendering
  the prompt in the model's FIM format) and what the model knows (FIM and repository tokens, stop ids);
* ``completion_stop_ids``: the ids that end a completion (a special token never belongs in code);
* :meth:`GenerationBackend.generate` / :meth:`GenerationBackend.rewrite`: a prompt in, a
  :class:`decoding.generate.Generation` out (text, token count, finish reason, stage timings);
* ``engine``: the local engine whose n-gram store and KV caches the draft sources keep up to date
  (:mod:`lsp_server.draft_sources`); ``None`` for a remote backend, which drafts on its own.

Failures of a remote engine are :class:`BackendError` (typed by ``kind``); the service maps them to one
message per kind and an empty answer. The local engine never raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from decoding.capabilities import ModelCapabilities
from decoding.generate import Generation, GenerationConfig

if TYPE_CHECKING:
    from decoding.engine import Engine
    from lsp_server.prompt import Prompt
    from lsp_server.rewrite_prompt import RewritePrompt


LOCAL, OPENAI, LLAMACPP_INFILL = "local", "openai", "llamacpp-infill"
BACKENDS = (LOCAL, OPENAI, LLAMACPP_INFILL)


@dataclass(frozen=True)
class RemoteConfig:
    """Where a remote engine listens and how to talk to it."""

    endpoint: str  # base URL, e.g. http://gpu-box:8000 (the /v1 part may be included)
    model: str = ""  # the served model's name ("model" of the request); "": not sent
    api_key_env: str = ""  # the environment variable holding the API key ("": none); the key is never stored
    timeout_s: float = 10.0  # connecting, and waiting for the next bytes of an answer (seconds)


@dataclass(frozen=True)
class LoadedModels:
    """What a backend serves, described on the model thread for the event loop (which never touches it)."""

    target: str
    draft: str  # "none" without a draft model; "engine" when a remote engine drafts on its own
    device: str  # "cuda:0", "cpu"... or the remote endpoint
    dtype: str
    notice: str | None  # for the user, e.g. the real models are missing and the starter pair runs


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
    engine: Engine | None  # the local engine (n-gram sources, KV caches); None for a remote backend

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
