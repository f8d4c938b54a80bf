"""llama.cpp's ``POST /infill``: the engine renders the FIM prompt itself from the parts we send.

``input_prefix`` and ``input_suffix`` are the prompt's prefix and suffix as we cut them to the token
budgets (:mod:`lsp_server.completion.prompt`), ``input_extra`` the other files' snippets we chose
(``{"filename", "text"}``; llama.cpp writes them in the repository format the GGUF's FIM tokens
imply). The better fit where llama.cpp serves a model whose FIM format we do not render, and it lets
llama.cpp reuse its prompt cache by the parts. Events are llama.cpp's own: ``content``, ``stop``,
``stop_type`` (``eos``, ``word``, ``limit``), and on the last one ``timings`` and ``tokens_predicted``.

Next-edit rewrites are no infill: they go through ``/v1/completions`` as in the ``openai`` backend.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from decoding.types import Generation, GenerationConfig
from lsp_server.backends.base import LLAMACPP_INFILL
from lsp_server.backends.http_stream import MalformedResponse
from lsp_server.backends.openai import (
    OpenAICompletionsBackend,
    checked_event,
    optional_sampling_fields,
    parse_timings,
)
from lsp_server.backends.remote import Chunk

INFILL_PATH = "/infill"


def parse_infill_event(event: dict) -> Chunk:
    """One event of llama.cpp's native stream.

    Raises:
        MalformedResponse: not a llama.cpp event. BackendError: an error event.
    """
    checked_event(event)
    content = event.get("content")
    if not isinstance(content, str):
        raise MalformedResponse(f"an event has no content: {str(event)[:80]}")
    chunk = Chunk(text=content)
    if event.get("stop"):
        chunk.finish = "length" if event.get("stop_type") == "limit" else "stop"
        chunk.tokens = event.get("tokens_predicted") if isinstance(event.get("tokens_predicted"), int) else None
    return parse_timings(chunk, event)


class LlamaCppInfillBackend(OpenAICompletionsBackend):
    """llama.cpp's ``/infill`` for completions, ``/v1/completions`` for rewrites."""

    name = LLAMACPP_INFILL

    def infill_body(self, prompt, config: GenerationConfig) -> dict:
        sampling = config.sampling
        body = {"input_prefix": prompt.prefix, "input_suffix": prompt.suffix,
                "input_extra": [{"filename": label, "text": text} for label, text in prompt.extra],
                "prompt": "", "n_predict": config.max_new_tokens, "temperature": sampling.temperature,
                "stream": True, "stop": list(config.stop_strings), "cache_prompt": True,
                **optional_sampling_fields(config)}
        return body

    def generate(self, prompt, config: GenerationConfig, drafter: str, should_stop: Callable[[], bool],
                 cache_key: Hashable = None) -> Generation:
        prefix = self.endpoint.prefix
        path = (prefix.removesuffix("/v1")) + INFILL_PATH  # /infill is not under /v1

        def request() -> tuple[str, dict]:
            return path, self.infill_body(prompt, config)

        return self.run(request, parse_infill_event, config, should_stop, len(prompt.prompt_ids))
