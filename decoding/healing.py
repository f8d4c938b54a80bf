"""Token healing: the output must begin with given text, and the target's distribution is conditioned on it.

A prompt cut at the cursor usually ends inside a token the file itself would tokenise differently
(``pri`` of ``print``, or 8 spaces of indentation where the file has 7 + `` self``): the model meets a
token boundary it never saw in training. Token healing (Microsoft guidance, "token healing", 2023;
Dagan et al. 2024, "Getting the most out of your tokenizer") backs the prompt off by its last token and
requires the output to start with that token's text: at each output position whose text so far has not
covered the required text yet, only tokens that continue it are allowed (a token whose bytes start
with the rest of the required bytes, or that are a prefix of them).

The constraint is a mask on the target's logits applied before greedy choice or sampling, in the plain
reference and in every verify pass alike (:mod:`decoding.generate`): the distribution every path follows
is the target's renormalised over the allowed tokens, so speculative output stays exactly the
constrained plain output (a draft token outside the mask has target probability 0 and is rejected).

Bytes, not characters: a byte-level BPE token may hold part of a UTF-8 character.

A required text that ends in blanks (spaces or tabs: the indentation an editor left after Enter, the
space after ``=``) is *closed*: the output may not add blanks right after it. The user set that
indentation; a model that could grow it writes its line one level too deep: before this rule, healed
completions at the start of a line parsed less often than unhealed ones (docs/decisions.md#token-healing).
"""

from __future__ import annotations

import bisect
import weakref
from functools import lru_cache

import torch

_BLANKS = (b" ", b"\t")
_TABLES: weakref.WeakKeyDictionary[object, dict[int, TokenBytes]] = weakref.WeakKeyDictionary()


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (Radford et al. 2019, ``bytes_to_unicode``)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes, extra = printable[:], 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {chr(code): byte for byte, code in zip(printable, codes)}


def _byte_level(tokenizer) -> bool:
    """Whether ``tokenizer`` is a fast byte-level BPE (GPT-2, Qwen): its vocabulary spells bytes."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend is not None and type(backend.decoder).__name__ == "ByteLevel"


class TokenBytes:
    """The bytes of every token id of a vocabulary, and which tokens may continue a required text.

    Args:
        tokenizer: a transformers tokenizer (byte-level BPE: read from its vocabulary; otherwise each
            id decoded alone) or any object with ``decode(ids)``.
        vocab_size: V, the logits' width (ids the tokenizer does not know get no bytes: never allowed).
        special_ids: ids never allowed while the constraint holds (end-of-sequence, FIM markers).
    """

    def __init__(self, tokenizer, vocab_size: int, special_ids=()):
        self.vocab_size = vocab_size
        special = set(special_ids) | set(getattr(tokenizer, "all_special_ids", None) or ())
        if hasattr(tokenizer, "get_added_vocab"):  # added tokens match literally, never as healed text
            special |= set(tokenizer.get_added_vocab().values())
        self.token_bytes: list[bytes] = [b""] * vocab_size
        if _byte_level(tokenizer):
            decoder = _byte_decoder()
            for token, index in tokenizer.get_vocab().items():
                if index < vocab_size and index not in special and all(c in decoder for c in token):
                    self.token_bytes[index] = bytes(decoder[c] for c in token)
        else:
            for index in range(vocab_size):
                if index not in special:
                    self.token_bytes[index] = tokenizer.decode([index]).encode("utf-8")
        self._by_bytes: dict[bytes, list[int]] = {}
        for index, data in enumerate(self.token_bytes):
            if data:
                self._by_bytes.setdefault(data, []).append(index)
        self._sorted = sorted(self._by_bytes)
        self._allowed: dict[tuple[bytes, bool], torch.Tensor] = {}
        self.blank_start = torch.tensor([i for i, data in enumerate(self.token_bytes) if data[:1] in _BLANKS],
                                        dtype=torch.long)  # ids whose text starts with a space or tab

    @classmethod
    def of(cls, tokenizer, vocab_size: int, special_ids=()) -> TokenBytes:
        """The table of ``tokenizer`` at ``vocab_size``, built once per tokenizer object."""
        try:
            tables = _TABLES.setdefault(tokenizer, {})
        except TypeError:  # not weak-referenceable: build each time
            return cls(tokenizer, vocab_size, special_ids)
        if vocab_size not in tables:
            tables[vocab_size] = cls(tokenizer, vocab_size, special_ids)
        return tables[vocab_size]

    def allowed(self, remaining: bytes, closed: bool = False) -> torch.Tensor:
        """``(n,)`` int64 ids of the tokens that continue ``remaining`` (non-empty): those whose bytes
        start with it, and those whose bytes are a non-empty prefix of it. ``closed``: not those that
        go on with a blank right after it."""
        found = self._allowed.get((remaining, closed))
        if found is None:
            ids: list[int] = []
            start = bisect.bisect_left(self._sorted, remaining)
            for data in self._sorted[start:]:
                if not data.startswith(remaining):
                    break
                if not (closed and data[len(remaining):len(remaining) + 1] in _BLANKS):
                    ids += self._by_bytes[data]
            for length in range(1, len(remaining)):
                ids += self._by_bytes.get(remaining[:length], [])
            found = self._allowed[(remaining, closed)] = torch.tensor(sorted(ids), dtype=torch.long)
        return found


class Healing:
    """The constraint of one generation: its output must start with ``required`` (UTF-8 bytes).

    Args:
        table: the vocabulary's :class:`TokenBytes`.
        required: the text the output must begin with ("": no constraint).
    """

    def __init__(self, table: TokenBytes, required: str):
        self.table, self.required = table, required.encode("utf-8")
        self.closed = self.required[-1:] in _BLANKS  # no blank may follow it

    def remaining(self, output_ids: list[int]) -> bytes | None:
        """The required bytes not yet covered after ``output_ids`` (new tokens so far); ``b""`` when
        they are covered exactly and the text is closed (the next token may not start with a blank);
        ``None`` when nothing constrains the next token (covered, or the tokens left the required text:
        a rejected draft's path, whose row is never used)."""
        covered = b"".join(self.table.token_bytes[t] if t < self.table.vocab_size else b"" for t in output_ids)
        if len(covered) == len(self.required) and self.closed and covered == self.required:
            return b""
        if len(covered) >= len(self.required) or not self.required.startswith(covered):
            return None
        return self.required[len(covered):]

    def mask(self, logits: torch.Tensor, paths: list[list[int]]) -> torch.Tensor:
        """Logits with the disallowed tokens at ``-inf``.

        Args:
            logits: ``(R, V)`` float logits, one row per position.
            paths: R lists: the output tokens before each row's position (what was committed, then the
                draft up to that row).
        Returns:
            ``logits`` itself when no row is constrained, else a masked copy.
        """
        rows = [(row, self.remaining(path)) for row, path in enumerate(paths)]
        rows = [(row, rest) for row, rest in rows if rest is not None]
        if not rows:
            return logits
        masked = logits.clone()
        for row, rest in rows:
            if not rest:  # covered exactly, closed: anything but a blank next
                masked[row, self.table.blank_start.to(logits.device)] = float("-inf")
                continue
            allowed = self.table.allowed(rest, self.closed).to(logits.device)
            keep = masked[row, allowed]
            masked[row] = float("-inf")
            masked[row, allowed] = keep
        return masked

    def active(self, num_output_tokens: int) -> bool:
        """Whether a position after ``num_output_tokens`` new tokens may still be constrained (an upper
        bound: a token covers at least one byte)."""
        return num_output_tokens <= len(self.required)
