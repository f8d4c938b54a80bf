"""What the remote backends share: the model's tokenizer, one streamed request turned into a
:class:`~decoding.generate.Generation`, failures turned into :class:`~lsp_server.backends.base.BackendError`,
and the backoff that keeps a failing engine from being hammered.

A remote generation's figures, in the same per-request trace line as a local one
(:class:`RemoteGeneration`): ``first_token`` (ms from sending the request to the first text) and
``stream`` (the rest) as its stages, the tokens generated, the prompt tokens the engine computed and
reused (llama.cpp's ``timings``: ``prompt_n``, ``cache_n``; else ``usage``), and the engine's own
speculative acceptance as draft source ``engine`` when it reports it (llama.cpp's ``draft_n`` and
``draft_n_accepted``; vLLM and SGLang report none per request).

Backoff: after a failure the backend refuses requests at once (the same error, so no new message) for
1 s, then 2, 4... up to 60 s after consecutive failures; the first success resets it.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from decoding.weights.capabilities import read_capabilities
from decoding.errors import ModelLoadError
from decoding.types import FinishReason, Generation, GenerationConfig
from decoding.weights.model_names import AUTO, model_location, pack_available
from decoding.weights.model_packs import PACKS
from decoding.stats import GenerationStats, SourceStats
from decoding.weights.tokenizer_loading import load_tokenizer
from lsp_server.backends.base import BackendError, LoadedModels, RemoteConfig
from lsp_server.backends.http_stream import (
    Endpoint,
    HttpStatusError,
    MalformedResponse,
    StreamCancelled,
    StreamEnded,
    StreamTimeout,
    post_events,
)

log = logging.getLogger(__name__)

BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 60.0
ENGINE_SOURCE = "engine"  # the draft source name of the remote engine's own speculation


@dataclass
class RemoteGeneration(Generation):
    """A generation by a remote engine: :class:`Generation` plus where it ran and the engine's own timings."""

    backend: str = ""  # the backend setting's value
    engine_ms: dict[str, float] = field(default_factory=dict)  # the engine's own: prompt, predicted (ms)


@dataclass
class Chunk:
    """One parsed event of a stream."""

    text: str = ""
    finish: str | None = None  # the engine's finish reason, when this event ends the generation
    tokens: int | None = None  # tokens generated in all, when the engine says
    prompt_tokens: int | None = None  # prompt tokens computed
    cached_tokens: int | None = None  # prompt tokens reused from the engine's cache
    drafted: int | None = None  # the engine's draft tokens and how many it accepted
    accepted: int | None = None
    engine_ms: dict[str, float] = field(default_factory=dict)


class Backoff:
    """Exponential backoff after consecutive failures (see the module docstring)."""

    def __init__(self, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S,
                 clock: Callable[[], float] = time.monotonic):
        self.first_s, self.max_s, self.clock = first_s, max_s, clock
        self.failures = 0
        self.until = 0.0
        self.last: BackendError | None = None

    def check(self) -> None:
        """Raises: BackendError: the last failure again, while its backoff lasts."""
        if self.last is not None and self.clock() < self.until:
            raise BackendError(self.last.kind, self.last.message, self.until - self.clock())

    def failed(self, kind: str, message: str) -> BackendError:
        """Record a failure; returns the error to raise (with the time until the next try)."""
        delay = min(self.max_s, self.first_s * 2 ** self.failures)
        self.failures += 1
        self.until = self.clock() + delay
        self.last = BackendError(kind, message, delay)
        return self.last

    def succeeded(self) -> bool:
        """Record a success; whether it ended a run of failures."""
        recovered = self.failures > 0
        self.failures, self.until, self.last = 0, 0.0, None
        return recovered


def load_model_tokenizer(model: str, on_stage: Callable[[str], None] | None = None):
    """(tokenizer, capabilities) of the model the remote engine serves, from the ``model.target`` setting
    (see :mod:`lsp_server.backends.loading`); no weights are loaded.

    Raises:
        ModelLoadError: no tokenizer can be found for ``model``.
    """
    name = model
    if name == AUTO:
        name = next((pack for pack in PACKS if pack_available(pack)), None)
        if name is None:
            raise ModelLoadError("a remote backend needs the served model's tokenizer to build its prompts: set "
                                 "speclsp.model.target to a model directory (or hub id) with that tokenizer, or install "
                                 "the Qwen2.5-Coder packs")
    if on_stage:
        on_stage(f"loading the tokenizer of {name}")
    location, local_only = model_location(name, on_stage)
    try:
        tokenizer = load_tokenizer(location, local_only, without_torch=True)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not load the tokenizer of {name!r} from {location}: {exc}") from exc
    eos_ids = {tokenizer.eos_token_id} - {None}
    config = Path(location) / "generation_config.json"
    if local_only and config.is_file():
        declared = json.loads(config.read_text()).get("eos_token_id")
        eos_ids.update(declared if isinstance(declared, list) else [declared] if isinstance(declared, int) else [])
    return tokenizer, read_capabilities(tokenizer, eos_ids, location if local_only else None)


class RemoteBackend:
    """A remote engine behind the seam; subclasses say which request to send and how to read its events."""

    name = "remote"
    keeps_sources = False  # the remote engine drafts from its own state and keeps its own caches
    constrains_output = False  # no token healing or deadline: the prompt goes as it is

    def __init__(self, config: RemoteConfig, tokenizer, capabilities, tls: ssl.SSLContext | None = None):
        self.config = config
        self.endpoint = Endpoint.parse(config.endpoint)
        self.tokenizer = tokenizer
        self.capabilities = capabilities
        self.completion_stop_ids = capabilities.stop_ids
        self.backoff = Backoff()
        self.tls = tls

    def describe(self) -> LoadedModels:
        return LoadedModels(self.config.model or getattr(self.tokenizer, "name_or_path", "remote"), "engine",
                            self.config.endpoint, "remote", None)

    def claim_thread(self) -> None:
        """Nothing to claim: the backend holds no thread-bound state (the worker still runs it in order)."""

    # No local draft sources or caches (see lsp_server.backends.base): these do nothing.
    def sync_sources(self, wanted, retain=frozenset(), drop=frozenset(), searched=frozenset()) -> None:
        pass

    def has_source(self, key: Hashable) -> bool:
        return False

    def forget_source(self, key: Hashable) -> None:
        pass

    def forget_cache(self, cache_key: Hashable) -> None:
        pass

    def prompt_cost(self, prompt_ids: list[int], cache_key: Hashable) -> tuple[int, float] | None:
        return None

    def prefill(self, prompt_ids: list[int], cache_key: Hashable, should_stop: Callable[[], bool],
                spare: bool = False, preempt: Callable[[], bool] | None = None) -> int:
        return 0

    def _headers(self) -> dict[str, str]:
        """Request headers; the API key read from its environment variable at each request.

        Raises:
            BackendError: the named variable is not set (kind ``unauthorized``).
        """
        name = self.config.api_key_env
        if not name:
            return {}
        key = os.environ.get(name, "")
        if not key:
            raise BackendError("unauthorized", f"the environment variable {name} (speclsp.remote.apiKeyEnv) is not set; "
                                               "the remote engine needs its API key there")
        return {"Authorization": f"Bearer {key}"}

    def _stream(self, path: str, payload: dict, should_stop: Callable[[], bool]) -> Iterator[str]:
        return post_events(self.endpoint, path, payload, self._headers(), self.config.timeout_s, should_stop, self.tls)

    def run(self, request: Callable[[], tuple[str, dict]], parse: Callable[[dict], Chunk], config: GenerationConfig,
            should_stop: Callable[[], bool], prompt_tokens: int) -> RemoteGeneration:
        """Send ``request()`` (path, JSON body), read its events with ``parse``, cut at the stop strings.

        Raises:
            BackendError: the engine failed (mapped by :meth:`failure`), or is in backoff.
        """
        self.backoff.check()
        try:
            generation = self._read(request, parse, config, should_stop, prompt_tokens)
        except BackendError as exc:
            raise self.backoff.failed(exc.kind, exc.message) from None
        except (StreamTimeout, HttpStatusError, MalformedResponse, OSError, ValueError) as exc:
            kind, message = self.failure(exc)
            raise self.backoff.failed(kind, message) from exc
        if self.backoff.succeeded():
            log.info("the remote engine at %s answers again", self.config.endpoint)
        return generation

    def _read(self, request, parse, config: GenerationConfig, should_stop, prompt_tokens: int) -> RemoteGeneration:
        stats = GenerationStats(prompt_tokens=prompt_tokens)
        path, payload = request()
        started = time.perf_counter()
        first: float | None = None
        text, finish, chunks, last = "", FinishReason.LENGTH, 0, Chunk()
        try:
            with closing(self._stream(path, payload, should_stop)) as events:
                for data in events:
                    if data.strip() == "[DONE]":
                        break
                    last = parse(json.loads(data))
                    if last.text:
                        first = first or time.perf_counter()
                        text, chunks = text + last.text, chunks + 1
                    cut = _first_stop(text, config.stop_strings)
                    if cut is not None:  # ours to end: closing the stream stops the engine
                        text, finish = text[:cut], FinishReason.STOP
                        break
                    if last.finish is not None:
                        finish = FinishReason.LENGTH if last.finish in ("length", "limit") else FinishReason.STOP
                        break
        except StreamCancelled:
            finish = FinishReason.CANCELLED
        ended = time.perf_counter()
        first = first or ended
        stats.new_tokens = last.tokens if last.tokens is not None else chunks
        stats.prefill_computed = last.prompt_tokens if last.prompt_tokens is not None else 0
        stats.prefill_reused = last.cached_tokens or 0
        stats.ms = {"first_token": 1000 * (first - started), "stream": 1000 * (ended - first),
                    "total": 1000 * (ended - started)}
        if last.drafted:
            stats.sources[ENGINE_SOURCE] = SourceStats(rounds=0, drafted=last.drafted, accepted=last.accepted or 0)
        return RemoteGeneration([], text, finish, stats, backend=self.name, engine_ms=last.engine_ms)

    def failure(self, exc: Exception) -> tuple[str, str]:
        """(kind, message for the user) of a failed request; see :class:`BackendError`."""
        where = f"the remote engine at {self.config.endpoint}"
        if isinstance(exc, StreamTimeout):
            return "timeout", f"{where} did not answer in time ({exc}; speclsp.remote.timeoutSeconds)"
        if isinstance(exc, ssl.SSLError):
            return "tls", f"TLS with {where} failed: {exc.reason or exc}"
        if isinstance(exc, HttpStatusError):
            return _http_failure(exc, where, self.config)
        if isinstance(exc, StreamEnded):
            return "connection lost", f"the connection to {where} ended in the middle of an answer: did it stop?"
        if isinstance(exc, (MalformedResponse, ValueError)):
            return "malformed stream", f"{where} sent an answer speclsp cannot read: {exc}"
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        if isinstance(exc, (ConnectionRefusedError, socket.gaierror)):
            return "unreachable", f"cannot reach {where}: {detail}; is it running?"
        return "connection", f"the connection to {where} failed: {detail}"

    def generate(self, prompt, config: GenerationConfig, drafter: str, should_stop: Callable[[], bool],
                 cache_key: Hashable = None) -> Generation:
        raise NotImplementedError

    def rewrite(self, prompt, config: GenerationConfig, drafter: str, should_stop: Callable[[], bool],
                cache_key: Hashable = None) -> Generation:
        raise NotImplementedError


def _http_failure(exc: HttpStatusError, where: str, config: RemoteConfig) -> tuple[str, str]:
    detail = _error_text(exc.body)
    if exc.status in (401, 403):
        key = f"the API key in ${config.api_key_env}" if config.api_key_env else "an API key (speclsp.remote.apiKeyEnv)"
        return "unauthorized", f"{where} refused the request (HTTP {exc.status}); check {key}: {detail}"
    if exc.status == 404 and "model" in detail.lower():
        return "model not found", (f"{where} does not serve model {config.model!r} (speclsp.remote.model): "
                                   f"{detail}")
    if exc.status == 404:
        return "not found", f"{where} has no such API (HTTP 404; check speclsp.remote.endpoint and speclsp.remote.backend): {detail}"
    return f"http {exc.status}", f"{where} answered HTTP {exc.status}: {detail}"


def _error_text(body: str) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message": ...}}``), else the body's start."""
    try:
        error = json.loads(body).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message[:300]
    except (ValueError, AttributeError):
        pass
    return body.strip()[:300] or "(no details)"


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the first stop string starts in ``text`` (``None``: none there)."""
    found = [at for stop in stops if (at := text.find(stop)) != -1]
    return min(found) if found else None
