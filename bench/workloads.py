"""Prompts cut from held-out code (:mod:`bench.corpus`), for ``speclsp bench decode`` and
``speclsp eval models``.

* :func:`fim_prompts`: fill-in-the-middle at the end of a line, the next line missing, built by the
  server's own prompt builder (:func:`lsp_server.completion.prompt.build_prompt`), so a FIM figure measures the
  prompts that are served;
* :func:`edit_prompts`: a function, then a comment asking for it again with one identifier renamed;
* :func:`body_prompts`: fill-in-the-middle with a whole function body missing, the cursor at the end
  of its ``def`` line: a multi-line answer;
* :func:`entropy_prompts`: a chunk's tokens shuffled, text where drafts rarely match.

:func:`workloads` cuts them from a corpus (:func:`bench.corpus.corpus_files`; ``2026`` by default: code
written after the models were trained).
"""

from __future__ import annotations

import bisect
import random
import re

from lsprotocol import types

from bench.corpus import corpus_files, read_texts, rename_identifier
from lsp_server.completion.prompt import build_prompt
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for
from lsp_server.request import resolve_request
from lsp_server.settings import Settings

_DEF = re.compile(r"^def [A-Za-z_]\w*\(.*\):\s*$", re.M)


def _fim_prompt(text: str, cursor: int, end: int, tokenizer, prefix_tokens: int, suffix_tokens: int) -> list[int]:
    """The server's FIM prompt for ``text`` with ``text[cursor:end]`` removed and the cursor there."""
    codec = codec_for(types.PositionEncodingKind.Utf32)  # characters are code points
    budget = Settings(prefix_tokens=prefix_tokens, suffix_tokens=suffix_tokens, extra_tokens=0)
    document = Document("file:///held-out/cut.py", text[:cursor] + text[end:], 0, "python")
    line_starts = document.lines.starts
    row = bisect.bisect_right(line_starts, cursor) - 1
    position = types.Position(line=row, character=cursor - line_starts[row])
    return build_prompt(resolve_request(document, position, codec, budget), tokenizer).prompt_ids


def fim_prompts(texts: list[str], tokenizer, count: int, rng: random.Random,
                prefix_tokens: int = 768, suffix_tokens: int = 256) -> list[tuple[list[int], str]]:
    """(prompt ids, missing line) pairs: the server's FIM prompt with the cursor at the end of the line
    before the missing one.

    The cursor sits where tokens end: a cut inside indentation would split a token the model only ever
    saw whole (``"\\n   "``). The missing line and the line break before it are removed from the file;
    the prompt keeps at most ``prefix_tokens`` tokens before the cursor and ``suffix_tokens`` after it,
    cut at line boundaries as the server cuts them (no snippets of other files).

    Args:
        texts: file texts with ``\\n`` line breaks; one is drawn per cut point.
        tokenizer: a transformers fast tokenizer (the prompt builder needs offsets).
        count: how many pairs.
    """
    pairs = []
    while len(pairs) < count:
        text = rng.choice(texts)
        lines = text.splitlines(keepends=True)
        index = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
        line = lines[index]
        if not index or not line.strip() or not lines[index - 1].endswith("\n"):
            continue
        start = sum(len(item) for item in lines[:index])
        cursor = start - 1  # before the newline that ends the previous line
        end = start + len(line.rstrip("\n"))
        pairs.append((_fim_prompt(text, cursor, end, tokenizer, prefix_tokens, suffix_tokens), line.rstrip("\n")))
    return pairs


_BODY_DEF = re.compile(r"^([ \t]*)(?:async )?def [A-Za-z_]\w*\(.*\).*:[ \t]*$", re.M)


def body_prompts(texts: list[str], tokenizer, count: int, rng: random.Random, max_new_tokens: int = 128,
                 prefix_tokens: int = 768, suffix_tokens: int = 256) -> list[tuple[list[int], int]]:
    """(prompt ids, new tokens) pairs: the server's FIM prompt with a function's body (3 to 15 lines after
    a one-line ``def``) missing and the cursor at the end of the ``def`` line; new tokens: the body's
    length in tokens, at most ``max_new_tokens``."""
    bodies = []  # (text index, cursor, end)
    for index, text in enumerate(texts):
        for match in _BODY_DEF.finditer(text):
            indent, cursor = len(match.group(1)), match.end()
            end = at = cursor  # end: after the body's last non-blank line
            for line in text[cursor + 1:].split("\n"):
                if line.strip() and len(line) - len(line.lstrip()) <= indent:
                    break
                at += 1 + len(line)
                end = at if line.strip() else end
            if 3 <= text.count("\n", cursor, end) <= 15 and text[cursor:end].strip():
                bodies.append((index, cursor, end))
    out = []
    for index, cursor, end in rng.sample(bodies, min(count, len(bodies))):
        text = texts[index]
        body_tokens = len(tokenizer.encode(text[cursor:end], add_special_tokens=False))
        out.append((_fim_prompt(text, cursor, end, tokenizer, prefix_tokens, suffix_tokens),
                    min(max_new_tokens, body_tokens)))
    return out


def edit_prompts(texts: list[str], tokenizer, count: int, rng: random.Random) -> list[tuple[list[int], int]]:
    """(prompt ids, max new tokens) for the edit workload."""
    functions = []
    for text in texts:
        for match in _DEF.finditer(text):
            end = text.find("\n\n", match.end())
            body = text[match.start(): end if end != -1 else len(text)]
            if 4 <= body.count("\n") <= 20:
                functions.append(body)
    out = []
    for function in rng.sample(functions, min(count, len(functions))):
        names = sorted({n for n in re.findall(r"\b[a-z_][a-z0-9_]{2,}\b", function) if function.count(n) >= 3})
        if not names:
            continue
        name = rng.choice(names)
        renamed = rename_identifier(function, name, name + "_value")
        header, _, rest = renamed.partition("\n")
        prompt = f"{function}\n\n\n# The same function with `{name}` renamed to `{name}_value`:\n{header}\n"
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        out.append((ids, min(128, len(tokenizer.encode(rest, add_special_tokens=False)))))
    return out


def entropy_prompts(texts: list[str], tokenizer, count: int, rng: random.Random, new_tokens: int):
    """(prompt ids, ``new_tokens``) pairs: 300 shuffled tokens of a held-out chunk each."""
    out = []
    for _ in range(count):
        text = rng.choice([t for t in texts if len(t) > 2000])
        start = rng.randrange(len(text) - 1500)
        ids = tokenizer.encode(text[start:start + 1500], add_special_tokens=False)
        rng.shuffle(ids)
        out.append((ids[:300], new_tokens))
    return out


WORKLOADS = ("edit", "fim", "body", "entropy")


def workloads(tokenizer, quick: bool, seed: int, corpus: str = "2026",
              names: tuple[str, ...] = WORKLOADS) -> dict[str, list[tuple[list[int], int]]]:
    """The prompts of ``speclsp bench decode`` per workload: (prompt ids, new tokens) pairs, cut from
    ``corpus``; each workload draws from its own random source, so its prompts do not depend on the others.

    Raises:
        ValueError: an unknown workload or corpus.
    """
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workloads {unknown}; use {', '.join(WORKLOADS)}")
    texts = [t for t in read_texts(corpus_files(corpus)) if t.strip()]
    count = 3 if quick else 10
    makers = {
        "edit": lambda rng: edit_prompts(texts, tokenizer, count, rng),
        "fim": lambda rng: [(ids, 32) for ids, _ in fim_prompts(texts, tokenizer, count, rng)],
        "body": lambda rng: body_prompts(texts, tokenizer, count, rng),
        "entropy": lambda rng: entropy_prompts(texts, tokenizer, count, rng, 32),
    }
    return {name: makers[name](random.Random(f"{seed}:{name}")) for name in names}
