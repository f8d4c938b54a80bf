"""Prompt tokens reused between keystrokes equal a full tokenisation (lsp_server.prompt_tokens)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from decoding.starter import TARGET_DIR
from lsp_server.prompt_tokens import PromptEncoder


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TARGET_DIR)


def full(tokenizer, text):
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return encoded["input_ids"], [tuple(o) for o in encoded["offset_mapping"]]


def test_typing_and_editing_give_the_tokens_of_a_full_tokenisation(tokenizer):
    """Random edits at the end and in the middle (characters, line breaks, indentation, non-ASCII,
    special-token text completed by the last keystroke): every answer equals tokenising the whole text,
    and most tokens come from the cache."""
    rng = random.Random(0)
    text = Path(json.__file__).read_text()[:6000]
    encoder = PromptEncoder(tokenizer)
    pieces = ["a", " ", "\n", "    ", "(", "):\n", "é", "→", "'", "<|fim_prefix|", ">", "<|endoftext|>", "\t", "x = 1\n"]
    for step in range(300):
        where = len(text) if rng.random() < 0.7 else rng.randrange(len(text) + 1)
        if rng.random() < 0.2 and where > 0:
            text = text[: where - 1] + text[where:]
        else:
            text = text[:where] + rng.choice(pieces) + text[where:]
        assert encoder.encode(("doc", "prefix"), text) == full(tokenizer, text), step
    assert encoder.reused_tokens > 100 * 1000


def test_a_splice_that_does_not_match_the_cache_falls_back_to_a_full_tokenisation(tokenizer):
    """The overlap check can fail: with the cached tokens tampered, a splice would carry the wrong
    tokens, and the encoder tokenises the whole text instead."""
    text = Path(json.__file__).read_text()[:3000]
    encoder = PromptEncoder(tokenizer)
    encoder.encode("k", text)
    cached = encoder._cache["k"]
    tampered = list(cached.ids)
    for i in range(len(tampered) - 40, len(tampered)):
        tampered[i] = (tampered[i] + 1) % len(tokenizer)
    encoder._cache["k"] = replace(cached, ids=tampered)
    before = encoder.reused_tokens
    assert encoder.encode("k", text + "x") == full(tokenizer, text + "x")
    assert encoder.reused_tokens == before
