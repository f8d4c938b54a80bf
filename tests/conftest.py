"""Shared fixtures: tiny random Qwen2 models built in the test (no download) and a toy tokenizer; the
tier check: every test carries exactly one tier marker (README, Tests); and the one pin of the choices
made from figures measured on the machine (:data:`PINNED_FIGURES`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from decoding.choices.figures import FIGURES_VERSION, PIN_VARIABLE

#: Server settings / CLI flags that pin the bundled starter pair: the defaults load the real pair when
#: it is installed, and the fast tiers must not depend on that.
STARTER_OPTIONS = {"model.target": "starter", "model.draft": "starter-draft"}
STARTER_FLAGS = ("--model", "starter", "--draft-model", "starter-draft")

#: The measured figures every test, and every server or command a test starts, runs with: the pin of
#: decoding/choices/figures.py, so that no machine's cached figures change what a test expects. Every
#: model's pass costs this curve (ms per pass of 1..16 tokens), no weight shape runs int8 faster than
#: the dense product, and float16 weights run slower than float32. So the ``auto`` settings choose alike
#: everywhere: ``quantization`` none (the weights as they are), ``drafter`` n-grams only, ``completionModel`` the target; and the draft-length policy starts
#: from the same verify costs. A test that measures asks for :func:`measured_here`.
PINNED_FIGURES = {"version": FIGURES_VERSION,
                  "pass_ms": {"*": {"1": 10.0, "2": 10.5, "4": 11.0, "8": 12.0, "16": 14.0}},
                  "low_bit_bounds": {"*": {"*": 0}},
                  "fp16_speedup": {"*": {"1": 0.5, "128": 0.5}}}


@pytest.fixture(scope="session", autouse=True)
def pinned_figures(tmp_path_factory: pytest.TempPathFactory) -> Iterable[Path]:
    """Writes :data:`PINNED_FIGURES` and names the file in ``$SPECLSP_MEASURED_FIGURES`` for the whole
    session (subprocesses inherit it); yields the file."""
    path = tmp_path_factory.mktemp("measured") / "pinned.json"
    path.write_text(json.dumps(PINNED_FIGURES))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PIN_VARIABLE, str(path))
        yield path


@pytest.fixture
def measured_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No pin for this test: figures are measured here and kept in an empty cache of its own (the
    directory returned, ``$SPECLSP_CACHE_DIR``)."""
    monkeypatch.delenv(PIN_VARIABLE, raising=False)
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path))
    return tmp_path


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
