"""Training data for the starter pair: the running interpreter's standard library.

The corpus is every ``.py`` file under ``sysconfig.get_paths()["stdlib"]`` except tests, site-packages,
IDLE and the held-out packages (``json/`` and ``email/`` by default), which are kept for evaluation
(:mod:`bench.corpus` lists both sides).

Examples are built from chunks of files in three shapes:

* plain next-token text;
* fill-in-the-middle in PSM order (Bavarian et al. 2022, "Efficient Training of Language Models to Fill
  in the Middle", section 3): ``<|fim_prefix|>P<|fim_suffix|>S<|fim_middle|>M<|endoftext|>``, with the
  middle either a random character span or one to three whole lines (what an editor asks for);
* a chunk followed by a copy of part of itself, so the model learns to continue what repeats;
* a chunk followed by an *edited* copy of part of itself (a name renamed throughout, an argument added,
  a line inserted or removed), so it learns to follow an edit that has begun;
* a short random token sequence and its repeat: content-free copying, which pushes the model to form
  induction heads early (Olsson et al. 2022, "In-context Learning and Induction Heads").

Besides the standard library, the ``.py`` files of the installed packages (``site-packages``: the
project's own dependencies) may join the training data; nothing leaves the machine.
"""

from __future__ import annotations

import keyword
import os
import random
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from bench.corpus import SKIP_DIRS, rename_identifier
from decoding.weights.starter import SPECIAL_TOKENS

PYTHON_WORDS = frozenset(keyword.kwlist) | {"self"}  # never chosen as a name to rename


def site_packages_files(max_bytes: int = 300_000) -> list[Path]:
    """Sorted ``.py`` files of the installed packages (purelib and platlib), without tests, vendored
    copies, this project and files over ``max_bytes`` (mostly generated tables)."""
    roots = sorted({Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")})
    found: list[Path] = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(
                d for d in dirnames
                if d not in SKIP_DIRS and not d.startswith("test") and not d.endswith(".dist-info")
                and d not in ("_vendor", "vendored", "decoding", "lsp_server", "training", "bench")
            )
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if name.endswith(".py") and not name.startswith("test_") and path.stat().st_size <= max_bytes:
                    found.append(path)
    return found


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
    edit: float = 0.0  # chunk followed by an edited copy of part of itself
    random_repeat: float = 0.0  # random token sequence, then its repeat
    span_repeat: float = 0.0  # a short span of a chunk's tokens, then the same span again at once

    def __post_init__(self):
        parts = (self.fim, self.copy, self.edit, self.random_repeat, self.span_repeat)
        if min(parts) < 0 or sum(parts) > 1:
            raise ValueError(f"mix probabilities must be >= 0 and sum to at most 1, got {self}")


class ExampleMaker:
    """Turns text chunks into token-id examples in the training mix."""

    def __init__(self, tokenizer: Tokenizer, mix: ExampleMix, rng: random.Random, source_weight: float = 1.0):
        """``source_weight``: loss weight of the text that a copy, edited copy or repeat reproduces
        (0 trains only on reproducing it, which is what teaches copying; 1 is plain language modelling)."""
        self.tokenizer = tokenizer
        self.mix = mix
        self.rng = rng
        self.source_weight = source_weight
        self.ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids if text else []

    def __call__(self, chunk: str) -> list[int]:
        return self.weighted(chunk)[0]

    def weighted(self, chunk: str) -> tuple[list[int], list[float]]:
        """One example from ``chunk`` and the loss weight of each of its tokens."""
        draw = self.rng.random()
        if draw < self.mix.fim:
            return self._plain(self.fim(chunk))
        draw -= self.mix.fim
        if draw < self.mix.copy:
            return self.copy(chunk)
        draw -= self.mix.copy
        if draw < self.mix.edit:
            return self.edit(chunk)
        draw -= self.mix.edit
        if draw < self.mix.random_repeat:
            return self.random_repeat()
        draw -= self.mix.random_repeat
        if draw < self.mix.span_repeat:
            return self.span_repeat(chunk)
        return self._plain(self.encode(chunk) + [self.ids["<|endoftext|>"]])

    @staticmethod
    def _plain(ids: list[int]) -> tuple[list[int], list[float]]:
        return ids, [1.0] * len(ids)

    def _reproduced(self, source: list[int], reproduction: list[int]) -> tuple[list[int], list[float]]:
        """``source`` then its (edited) reproduction and the end of text; the source weighs ``source_weight``.

        The end of text weighs 0: where a reproduction stops is our random choice (a span cut at some
        line), so nothing in the text predicts it; training on it would teach a model that a copy may
        end at any line break.
        """
        ids = source + reproduction + [self.ids["<|endoftext|>"]]
        return ids, [self.source_weight] * len(source) + [1.0] * len(reproduction) + [0.0]

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

    def copy(self, chunk: str) -> tuple[list[int], list[float]]:
        """The chunk, then a contiguous line span of it again."""
        lines = chunk.splitlines(keepends=True)
        first = self.rng.randrange(len(lines))
        last = min(len(lines), first + self.rng.randint(3, 40))
        return self._reproduced(self.encode(chunk), self.encode("".join(lines[first:last])))

    def edit(self, chunk: str) -> tuple[list[int], list[float]]:
        """The chunk, then an edited copy of a contiguous line span of it."""
        lines = chunk.splitlines(keepends=True)
        first = self.rng.randrange(len(lines))
        span = lines[first : first + self.rng.randint(4, 40)]
        kind = self.rng.random()
        if kind < 0.5:
            edited = self._renamed(span)
        elif kind < 0.65:
            edited = self._argument_added(span)
        elif kind < 0.85 and len(span) > 1:
            at = self.rng.randrange(1, len(span))
            donor = self.rng.choice(lines)
            indent = span[at][: len(span[at]) - len(span[at].lstrip())]
            edited = span[:at] + [indent + donor.lstrip() if donor.strip() else "\n"] + span[at:]
        elif len(span) > 2:
            at = self.rng.randrange(1, len(span) - 1)
            edited = span[:at] + span[at + 1 :]
        else:
            edited = span
        return self._reproduced(self.encode(chunk), self.encode("".join(edited)))

    def _renamed(self, span: list[str]) -> list[str]:
        text = "".join(span)
        found = [m.group() for m in re.finditer(r"\b[A-Za-z_][A-Za-z0-9_]*\b", text) if m.group() not in PYTHON_WORDS]
        if not found:
            return span
        names = sorted(set(found))
        repeated = [n for n in names if found.count(n) >= 2]  # a rename "throughout" needs several uses
        name = self.rng.choice(repeated or names)
        style = self.rng.randrange(4)
        other = self.rng.choice(names)
        new_name = (f"{name}_{other}", f"{other}_{name}", f"{name}{self.rng.randint(2, 9)}", f"new_{name}")[style]
        return rename_identifier(text, name, new_name).splitlines(keepends=True)

    def _argument_added(self, span: list[str]) -> list[str]:
        """A ``def`` or call in the span gets one more argument."""
        for index, line in enumerate(span):
            match = re.search(r"\)(\s*(->[^:]*)?:?\s*)$", line)
            if match and "(" in line:
                head = line[: match.start()]
                comma = "" if head.rstrip().endswith("(") else ", "
                arg = self.rng.choice(("timeout=None", "strict=False", "context", "*, verbose=False", "extra"))
                return span[:index] + [head + comma + arg + line[match.start():]] + span[index + 1 :]
        return self._renamed(span)

    def span_repeat(self, chunk: str) -> tuple[list[int], list[float]]:
        """8-48 consecutive tokens of the chunk, then the same tokens again: the shortest distance a
        copy can have, the easiest case in which to learn copying."""
        ids = self.encode(chunk)
        length = min(len(ids), self.rng.randint(8, 48))
        start = self.rng.randrange(len(ids) - length + 1)
        span = ids[start : start + length]
        return self._reproduced(span, span)

    def random_repeat(self) -> tuple[list[int], list[float]]:
        """A random run of 16-128 ordinary token ids, then the same run once or twice more.

        Half the runs draw from a small random alphabet (4-32 ids), so that short contexts recur within
        the run and only a longer one (up to about ten tokens) says where the repeat is: a model learns
        to match that much context, which copying code needs (on the held-out copy prompts, following
        the last 3 tokens' earlier match reproduces 32 greedy tokens 0.56 of the way, the last 8 0.96).
        """
        vocab = self.tokenizer.get_vocab_size()
        length = self.rng.randint(16, 128)
        if self.rng.random() < 0.5:
            alphabet = self.rng.sample(range(len(SPECIAL_TOKENS), vocab), self.rng.randint(4, 32))
            run = [self.rng.choice(alphabet) for _ in range(length)]
        else:
            run = [self.rng.randrange(len(SPECIAL_TOKENS), vocab) for _ in range(length)]
        return self._reproduced(run, run * self.rng.randint(1, 2))

