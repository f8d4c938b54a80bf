"""Training data for the starter pair: the running interpreter's standard library.

The corpus is every ``.py`` file under ``sysconfig.get_paths()["stdlib"]`` except tests, site-packages,
IDLE and the held-out packages (``json/`` and ``email/`` by default), which are kept for evaluation.

Examples are built from chunks of files in three shapes:

* plain next-token text;
* fill-in-the-middle in PSM order (Bavarian et al. 2022, "Efficient Training of Language Models to Fill
  in the Middle", section 3): ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>M<|endoftext|>``, with the
  middle either a random character span or one to three whole lines (what an editor asks for);
* a chunk followed by a copy of part of itself, so the model learns to continue what repeats.
"""

from __future__ import annotations

import os
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from decoding.starter import SPECIAL_TOKENS

DEFAULT_HELD_OUT = ("json", "email")
_SKIP_DIRS = {"test", "tests", "idlelib", "site-packages", "__pycache__", "turtledemo", "lib2to3"}


def stdlib_root() -> Path:
    """The standard-library directory of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(held_out: tuple[str, ...] = DEFAULT_HELD_OUT, *, want_held_out: bool = False) -> list[Path]:
    """Sorted ``.py`` files of the standard library, excluding tests.

    Args:
        held_out: top-level package names kept out of training.
        want_held_out: return only the held-out packages' files instead of the training files.
    """
    root = stdlib_root()
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("test"))
        rel = Path(dirpath).relative_to(root)
        top = rel.parts[0] if rel.parts else ""
        if (top in held_out) != want_held_out:
            continue
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("test_"):
                found.append(Path(dirpath) / name)
    return found


def read_texts(paths: list[Path]) -> list[str]:
    """Decoded file texts (UTF-8, undecodable files skipped), line endings normalised to ``\\n``."""
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text(encoding="utf-8").replace("\r\n", "\n"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer with the Qwen2.5-Coder special tokens (ids 0..6)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def chunk_text(text: str, max_chars: int) -> list[str]:
    """Split a file into pieces of at most ``max_chars`` characters at line boundaries."""
    lines = text.splitlines(keepends=True)
    chunks, current = [], ""
    for line in lines:
        if current and len(current) + len(line) > max_chars:
            chunks.append(current)
            current = ""
        current += line[:max_chars]
    if current.strip():
        chunks.append(current)
    return chunks


@dataclass(frozen=True)
class ExampleMix:
    """Probabilities of each example shape; the rest is plain text."""

    fim: float = 0.5  # PSM fill-in-the-middle
    copy: float = 0.15  # chunk followed by a copy of part of itself


class ExampleMaker:
    """Turns text chunks into token-id examples in the training mix."""

    def __init__(self, tokenizer: Tokenizer, mix: ExampleMix, rng: random.Random):
        self.tokenizer = tokenizer
        self.mix = mix
        self.rng = rng
        self.ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids if text else []

    def __call__(self, chunk: str) -> list[int]:
        draw = self.rng.random()
        if draw < self.mix.fim:
            return self.fim(chunk)
        if draw < self.mix.fim + self.mix.copy:
            return self.copy(chunk)
        return self.encode(chunk) + [self.ids["<|endoftext|>"]]

    def fim(self, chunk: str) -> list[int]:
        """PSM order: prefix, suffix, then the middle the model learns to write."""
        if self.rng.random() < 0.5:
            start, end = sorted(self.rng.randrange(len(chunk) + 1) for _ in range(2))
        else:
            lines = chunk.splitlines(keepends=True)
            first = self.rng.randrange(len(lines))
            last = min(len(lines), first + self.rng.randint(1, 3))
            start = sum(len(line) for line in lines[:first])
            # Often the cursor sits inside the first line, as when the user typed part of it.
            start += self.rng.randrange(len(lines[first])) if self.rng.random() < 0.5 else 0
            end = sum(len(line) for line in lines[:last])
        prefix, middle, suffix = chunk[:start], chunk[start:end], chunk[end:]
        return (
            [self.ids["<|fim_prefix|>"]]
            + self.encode(prefix)
            + [self.ids["<|fim_suffix|>"]]
            + self.encode(suffix)
            + [self.ids["<|fim_middle|>"]]
            + self.encode(middle)
            + [self.ids["<|endoftext|>"]]
        )

    def copy(self, chunk: str) -> list[int]:
        """The chunk, then a contiguous line span of it again."""
        lines = chunk.splitlines(keepends=True)
        first = self.rng.randrange(len(lines))
        last = min(len(lines), first + self.rng.randint(3, 40))
        return self.encode(chunk + "".join(lines[first:last])) + [self.ids["<|endoftext|>"]]
