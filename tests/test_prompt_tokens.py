"""Prompt tokens reused between keystrokes equal a full tokenisation (lsp_server.completion.prompt_tokens)."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from decoding.weights.starter import TARGET_DIR
from lsp_server.completion.prompt_tokens import PromptEncoder, SourceKey

pytestmark = pytest.mark.unit


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


def test_windows_of_a_seeded_document_equal_full_tokenisations(tokenizer):
    """A document tokenised once (seed) serves windows that start anywhere in it (inside a word, a
    line break, non-ASCII text), with or without characters typed after it: each answer equals
    tokenising the window alone, and most tokens come from the document's."""
    import json.decoder
    import json.encoder

    rng = random.Random(1)
    document = Path(json.decoder.__file__).read_text() + "\n# é → ü 🙂\n" + Path(json.encoder.__file__).read_text()
    encoder = PromptEncoder(tokenizer)
    encoder.seed(SourceKey("d"), document)
    total = 0
    for trial in range(200):
        start = rng.randrange(len(document))
        text = document[start:start + rng.randrange(1, 4000)]
        if rng.random() < 0.5:
            text += rng.choice(["a", "\n", "    ", "é", "(x):\n"])
        ids, offsets = encoder.encode(("window", trial), text, (SourceKey("d"), start))
        assert (ids, offsets) == full(tokenizer, text), (trial, start)
        total += len(ids)
    assert encoder.reused_tokens > 0.8 * total


def test_a_seeded_document_that_does_not_match_at_the_window_start_is_not_used(tokenizer):
    """The check where a window's own tokens join the document's can fail: tampered document tokens
    there are not used, the window is tokenised in full."""
    document = Path(json.__file__).read_text()[:6000]
    encoder = PromptEncoder(tokenizer)
    encoder.seed(SourceKey("d"), document)
    cached = encoder._cache[SourceKey("d")]
    start = 2000
    first = next(i for i, (a, _) in enumerate(cached.offsets) if a >= start)
    tampered = list(cached.ids)
    for i in range(first, first + 12):
        tampered[i] = (tampered[i] + 1) % len(tokenizer)
    encoder._cache[SourceKey("d")] = replace(cached, ids=tampered)
    text = document[start:5000]
    assert encoder.encode("w", text, (SourceKey("d"), start)) == full(tokenizer, text)
    assert encoder.reused_tokens == 0


def test_parts_of_a_seeded_document_keep_its_offsets_until_asked(tokenizer):
    """ids() of a part takes the document's tokens without shifting their offsets; a later encode()
    of the same key, after an edit, still equals a full tokenisation."""
    document = Path(json.__file__).read_text()
    encoder = PromptEncoder(tokenizer)
    encoder.seed(SourceKey("d"), document)
    start = 1500
    part = document[start:]
    assert encoder.ids("below", part, (SourceKey("d"), start)) == full(tokenizer, part)[0]
    assert encoder._cache["below"].base == start
    edited = part[:3000] + "é\n" + part[3000:]
    assert encoder.encode("below", edited) == full(tokenizer, edited)
    assert encoder._cache["below"].base == 0


def test_a_window_that_moved_far_starts_from_the_document_and_closing_forgets(tokenizer):
    """When the cached window shares little with the new one (the cursor jumped), the seeded
    document's tokens serve instead; forget() drops a document's texts."""
    document = Path(json.__file__).read_text()
    encoder = PromptEncoder(tokenizer)
    encoder.seed(SourceKey("d"), document)
    encoder.encode(("d", "prefix"), document[:3000])
    before = encoder.reused_tokens
    text = document[5000:9000]
    assert encoder.encode(SourceKey("d", "prefix"), text, (SourceKey("d"), 5000)) == full(tokenizer, text)
    assert encoder.reused_tokens - before > 0.8 * len(full(tokenizer, text)[0])
    encoder.encode("other", "x = 1")
    encoder.forget("d")
    assert not encoder.holds(SourceKey("d")) and not encoder.holds(SourceKey("d", "prefix")) and encoder.holds("other")
