"""The real tier for the llama.cpp peer: the built ``llama-server`` serving the real Qwen2.5-Coder 0.5B GGUF.

Needs the build (``speclsp bench peers --build``; CI runs it before the tests) and the model packs.
Without either these tests are skipped, unless ``SPECLSP_REQUIRE_REAL_MODELS=1`` (CI sets it), which
makes them fail instead.
"""

from __future__ import annotations

import os
import urllib.error

import pytest

from bench import llama_cpp
from decoding.model_names import pack_available
from decoding.model_packs import INSTALL_COMMAND, PACKS

pytestmark = pytest.mark.real

DRAFT = "qwen2.5-coder-0.5b"
PROMPT = "def fibonacci(n):\n    "


def _unavailable(message: str) -> None:
    if os.environ.get("SPECLSP_REQUIRE_REAL_MODELS") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """llama-server on the 0.5B GGUF, started once for this module."""
    if llama_cpp.server_binary() is None:
        _unavailable(f"llama.cpp {llama_cpp.VERSION} is not built (speclsp bench peers --build)")
    if not llama_cpp.gguf_cache_path(PACKS[DRAFT]).is_file() and not pack_available(DRAFT):
        _unavailable(f"model pack {DRAFT} not installed ({INSTALL_COMMAND})")
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    with llama_cpp.LlamaServer(llama_cpp.gguf_path(DRAFT), log_path=log_path) as running:
        yield running


def test_a_greedy_completion_returns_text_and_the_server_timings(server):
    result = llama_cpp.complete(server, PROMPT, 12, ignore_eos=True, timeout_s=120)
    assert result.num_tokens == 12 and result.text.strip()
    assert result.predicted_ms > 0 and result.predicted_per_second > 0 and result.prompt_ms > 0
    assert result.draft_n is None  # plain decoding drafts nothing
    again = llama_cpp.complete(server, PROMPT, 12, ignore_eos=True, timeout_s=120)
    assert again.text == result.text  # greedy: the same prompt gives the same tokens


def test_a_killed_server_refuses_requests_and_serves_again_after_restart(server):
    before = llama_cpp.complete(server, PROMPT, 6, ignore_eos=True, timeout_s=120)
    url = server.url
    server.kill()
    assert not server.healthy()
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        llama_cpp.complete(server, PROMPT, 6, timeout_s=30)
    server.restart()
    assert server.url == url
    assert llama_cpp.complete(server, PROMPT, 6, ignore_eos=True, timeout_s=120).text == before.text
