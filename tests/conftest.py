"""Shared fixtures: tiny random Qwen2 models built in the test (no download) and a toy tokenizer;
and the tier check: every test carries exactly one tier marker (README, Tests)."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

#: Server settings / CLI flags that pin the bundled starter pair: the defaults load the real pair when
#: it is installed, and the fast tiers must not depend on that.
STARTER_OPTIONS = {"model.target": "starter", "model.draft": "starter-draft"}
STARTER_FLAGS = ("--model", "starter", "--draft-model", "starter-draft")

#: The test tiers, as registered in pyproject.toml ([tool.pytest.ini_options] markers).
TIERS = ("unit", "model", "e2e", "editors", "stats", "adversarial", "real")


def tier_errors(items: Iterable[pytest.Item]) -> list[str]:
    """One message per test that carries no tier marker or more than one (module ``pytestmark``,
    class and function marks all count); empty when every test has exactly one."""
    errors = []
    for item in items:
        tiers = sorted({mark.name for mark in item.iter_markers() if mark.name in TIERS})
        if len(tiers) != 1:
            errors.append(f"{item.nodeid}: tier markers {tiers}, needs exactly one of {', '.join(TIERS)}")
    return errors


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects: a new test cannot escape the tiers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    errors = tier_errors(items)
    if errors:
        raise pytest.UsageError("every test needs exactly one tier marker (README, Tests):\n" + "\n".join(errors))


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
