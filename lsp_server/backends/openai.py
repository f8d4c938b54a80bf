"""The OpenAI-compatible completions backend: ``POST /v1/completions`` with ``stream: true``.

Served by vLLM, SGLang, llama.cpp's server, Ollama and TGI. The prompt is ours, rendered in the model's
own FIM format (:mod:`lsp_server.completion.prompt`), and sent as its token ids (a list of ints, which the OpenAI
API allows and vLLM, SGLang and llama.cpp accept): the engine then sees exactly the tokens we budgeted.
An engine that refuses a token prompt (HTTP 400 or 422) gets it as text from then on: the ids decoded
with their special tokens written out, which the engine parses back into them.

The request carries ``max_tokens``, the sampling settings, the model's stop strings (its special
tokens, and a line break for a single-line completion; the text is also cut at them here) and, when
set, ``model``. Each event's ``choices[0].text`` is the next text; ``finish_reason`` ends it; ``usage``
(when sent) and llama.cpp's ``timings`` give the token counts and the engine's own draft acceptance.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from decoding.types import Generation, GenerationConfig
from lsp_server.backends.base import OPENAI, BackendError
from lsp_server.backends.http_stream import MalformedResponse
from lsp_server.backends.remote import Chunk, RemoteBackend

COMPLETIONS_PATH = "/v1/completions"


def api_path(prefix: str, path: str) -> str:
    """``path`` (``/v1/...``) under an endpoint's path ``prefix``, which may already end in ``/v1``."""
    return prefix + (path[len("/v1"):] if prefix.endswith("/v1") and path.startswith("/v1/") else path)


def parse_timings(chunk: Chunk, event: dict) -> Chunk:
    """Add llama.cpp's ``timings`` (and ``tokens_predicted``) of a final event to ``chunk``."""
    timings = event.get("timings")
    if isinstance(timings, dict):
        for name, key in (("prompt_tokens", "prompt_n"), ("cached_tokens", "cache_n"), ("tokens", "predicted_n"),
                          ("drafted", "draft_n"), ("accepted", "draft_n_accepted")):
            if _int(timings.get(key)) is not None:
                setattr(chunk, name, timings[key])
        chunk.engine_ms = {k: float(timings[v]) for k, v in (("prompt", "prompt_ms"), ("predicted", "predicted_ms"))
                           if isinstance(timings.get(v), (int, float))}
    return chunk


def engine_error(event: dict) -> None:
    """Raises: BackendError: the event is an error the engine sent inside the stream."""
    error = event.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        raise BackendError("engine error", f"the remote engine failed the request: {str(message)[:300]}")


def parse_completion_event(event: dict) -> Chunk:
    """One ``/v1/completions`` stream event.

    Raises:
        MalformedResponse: not a completions chunk. BackendError: an error event.
    """
    checked_event(event)
    choices = event.get("choices")
    if not isinstance(choices, list):
        raise MalformedResponse(f"an event has no choices: {str(event)[:80]}")
    chunk = Chunk()
    if choices:
        choice = choices[0]
        text = choice.get("text") if isinstance(choice, dict) else None
        if not isinstance(text, (str, type(None))):
            raise MalformedResponse(f"a choice's text is not a string: {str(choice)[:80]}")
        chunk.text, chunk.finish = text or "", choice.get("finish_reason")
    usage = event.get("usage")
    if isinstance(usage, dict):
        chunk.tokens, chunk.prompt_tokens = _int(usage.get("completion_tokens")), _int(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            chunk.cached_tokens = _int(details.get("cached_tokens"))
    return parse_timings(chunk, event)


def optional_sampling_fields(config: GenerationConfig) -> dict:
    """``top_p``, ``top_k`` and ``seed`` of a request body, each only where it restricts sampling."""
    sampling, fields = config.sampling, {}
    if sampling.top_p < 1.0:
        fields["top_p"] = sampling.top_p
    if sampling.top_k > 0:
        fields["top_k"] = sampling.top_k
    if config.seed is not None:
        fields["seed"] = config.seed
    return fields


def checked_event(event) -> dict:
    """``event`` when it is a JSON object and no error event.

    Raises:
        MalformedResponse: not an object. BackendError: the engine's error event.
    """
    if not isinstance(event, dict):
        raise MalformedResponse(f"an event is not a JSON object: {str(event)[:80]}")
    engine_error(event)
    return event


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class OpenAICompletionsBackend(RemoteBackend):
    """``/v1/completions`` of an OpenAI-compatible engine; see the module docstring."""

    name = OPENAI

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.token_prompts = True  # until the engine refuses one

    def completion_body(self, prompt_ids: list[int], config: GenerationConfig) -> dict:
        """The request body for a prompt's ids."""
        sampling = config.sampling
        body = {"prompt": prompt_ids if self.token_prompts else self.tokenizer.decode(prompt_ids),
                "max_tokens": config.max_new_tokens, "temperature": sampling.temperature, "stream": True,
                "stop": list(config.stop_strings), **optional_sampling_fields(config)}
        if self.config.model:
            body["model"] = self.config.model
        return body

    def complete_ids(self, prompt_ids: list[int], config: GenerationConfig,
                     should_stop: Callable[[], bool]) -> Generation:
        """Generate after ``prompt_ids``; a refused token prompt is sent again as text (once)."""
        path = api_path(self.endpoint.prefix, COMPLETIONS_PATH)

        def request() -> tuple[str, dict]:
            return path, self.completion_body(prompt_ids, config)

        try:
            return self.run(request, parse_completion_event, config, should_stop, len(prompt_ids))
        except BackendError as exc:
            if not (self.token_prompts and exc.kind in ("http 400", "http 422")):
                raise
        self.token_prompts = False
        self.backoff.succeeded()  # the refusal was ours to fix, not the engine's failure
        return self.run(request, parse_completion_event, config, should_stop, len(prompt_ids))

    def generate(self, prompt, config: GenerationConfig, drafter: str, should_stop: Callable[[], bool],
                 cache_key: Hashable = None) -> Generation:
        return self.complete_ids(prompt.prompt_ids, config, should_stop)

    def rewrite(self, prompt, config: GenerationConfig, drafter: str, should_stop: Callable[[], bool],
                cache_key: Hashable = None) -> Generation:
        return self.complete_ids(prompt.prompt_ids, config, should_stop)

