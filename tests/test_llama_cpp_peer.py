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
from decoding.weights.model_names import pack_available
from decoding.weights.model_packs import INSTALL_COMMAND, PACKS

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


def test_bench_decode_rows_give_llama_cpp_our_token_ids_and_read_its_tokens_back(server):
    """The llama.cpp rows of bench decode (bench.decode_peers) on the 0.5B as both target and draft: the
    prompt goes as token ids, the answer comes back as token ids, and with the target as its own draft
    every drafted token is accepted and the output is plain's."""
    from bench.decode_peers import LlamaPeers
    from decoding.weights.loading import load_tokenizer
    from decoding.weights.model_names import model_location

    tokenizer = load_tokenizer(model_location(DRAFT)[0], local_only=True)
    prompt = tokenizer.encode("def fibonacci(n):\n    if n < 2:\n        return n\n", add_special_tokens=False)
    with LlamaPeers(["llama_plain", "llama_draft"], DRAFT, DRAFT) as peers:
        plain, seconds, passes, drafted, accepted = peers.run("llama_plain", prompt, 16)
        assert len(plain) == 16 and seconds > 0 and passes == 16 and drafted == accepted == 0
        assert tokenizer.decode(plain).strip()
        speculative, _, passes, drafted, accepted = peers.run("llama_draft", prompt, 16)
        assert speculative == plain
        assert drafted > 0 and accepted == drafted and passes == 16 - accepted
    with pytest.raises(ValueError, match="model packs"):
        LlamaPeers(["llama_plain"], "starter", None)
