"""Shared fixtures: tiny random Qwen2 models built in the test (no download) and a toy tokenizer."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

#: Server settings / CLI flags that pin the bundled starter pair: the defaults load the real pair when
#: it is installed, and the fast tiers must not depend on that.
STARTER_OPTIONS = {"model": "starter", "draftModel": "starter-draft"}
STARTER_FLAGS = ("--model", "starter", "--draft-model", "starter-draft")


def tiny_model(seed: int, vocab_size: int = 48, hidden: int = 32, layers: int = 2, init_std: float = 0.02):
    """A random-init Qwen2 causal LM small enough to run thousands of times in a test."""
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, initializer_range=init_std, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return Qwen2ForCausalLM(config).eval()


class ToyTokenizer:
    """Decodes token id i as one letter (``chr(ord('a') + i % 26)``); enough for stop strings."""

    eos_token_id = None

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(ord("a") + int(i) % 26) for i in ids)


@pytest.fixture(scope="session")
def target_model():
    return tiny_model(seed=0)


@pytest.fixture(scope="session")
def random_draft_model():
    return tiny_model(seed=1, hidden=16, layers=1)


@pytest.fixture
def toy_tokenizer():
    return ToyTokenizer()
