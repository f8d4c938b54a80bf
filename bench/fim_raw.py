"""The raw-model path of ``speclsp bench fim-eval``: the model alone, with Qwen's PSM prompt and scorer.

What Qwen's fim-bench does (QwenLM/Qwen2.5-Coder, ``qwencoder-eval/base/benchmarks/fim-bench``:
``run_hm_fim.sh`` runs ``hm_fim/humaneval_fim.py`` with ``--model_type codelm_leftright_context``, whose
prompt is ``utils.prepare_prompt``), followed here:

* **left** is the task's ``prompt`` as it is (no line break added: the text up to the end of the line
  before the hole), **right** the task's ``suffix`` as it is (from the line after the hole);
* left is cut to its last ``max_seq_length - gen_length - right_context_length`` = 2048 - 64 - 512 =
  **1,472** tokens, right to its first **512** (tokens of ``tokenizer.encode``, no special tokens);
* the prompt is ``<|fim_prefix|>`` left ``<|fim_suffix|>`` right ``<|fim_middle|>``;
* greedy (vLLM, temperature 0), at most **64** new tokens, ending at the model's end-of-sequence ids;
  the text decoded without special tokens;
* scored by :func:`bench.fim_tasks.qwen_line` against the canonical line, both stripped.

Where this differs: Qwen decodes the cut contexts and vLLM encodes the whole prompt string again; here
the ids go in as cut. The two agree wherever no cut happens, and none does on these tasks (the longest
holds 2,806 characters, far under 1,472 tokens); a cut that split a word could tokenize differently.
Generation is our engine's plain decoding (drafter ``none``, :meth:`decoding.engine.Engine.generate`),
in pieces of :data:`PIECE_TOKENS` tokens, each continuing the last from the same KV cache (the cache keeps
the committed tokens but the last, which the next piece feeds as plain decoding would: the same passes as
one run). It stops once the scored line is complete (:func:`line_complete`): later tokens cannot change
it, so the score is the 64-token run's, and the row's ``answer`` is the output up to there.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from bench.fim_tasks import FimTask, qwen_line
from decoding.types import FINISH_LENGTH, GenerationConfig
from lsp_server.settings import Settings

LEFT_TOKENS = 2048 - 64 - 512  # Qwen's max_seq_length - gen_length - right_context_length
RIGHT_TOKENS = 512
NEW_TOKENS = 64
PIECE_TOKENS = 8  # tokens per generate call; the scored line is checked between calls


def psm_prompt_ids(tokenizer, fim, left: str, right: str) -> list[int]:
    """Qwen's PSM prompt as token ids: ``[<|fim_prefix|>, left's last 1,472, <|fim_suffix|>, right's first 512,
    <|fim_middle|>]``.

    Args:
        tokenizer: the model's (a transformers tokenizer).
        fim: :class:`decoding.weights.capabilities.FimTokens` of that tokenizer.
    """
    left_ids = tokenizer.encode(left, add_special_tokens=False)[-LEFT_TOKENS:]
    right_ids = tokenizer.encode(right, add_special_tokens=False)[:RIGHT_TOKENS]
    return [fim.prefix, *left_ids, fim.suffix, *right_ids, fim.middle]


def load_raw_engine(model: str, settings: Settings):
    """The engine of ``model`` alone (no draft model), with ``settings``' device, dtype, quantization and
    engine (the server's, as ``--setting`` leaves them).

    Raises:
        decoding.errors.ModelLoadError: the model cannot load.
        SystemExit: the model has no FIM tokens (Qwen's prompt needs them).
    """
    from decoding.engine import Engine  # torch loads here, not at parser setup

    engine = Engine.load(replace(settings, model=model, draft_model="none").engine_config())
    if engine.target.capabilities.fim is None:
        raise SystemExit(f"speclsp bench fim-eval: {model} has no FIM tokens; the raw path needs Qwen's PSM prompt")
    return engine


def raw_row(task: FimTask, output: str, latency_ms: float, prompt_tokens: int, new_tokens: int) -> dict:
    """One task's row of the raw path (``output``: the model's text up to where it stopped, special tokens
    left out; ``latency_ms``: its generation, prompt included)."""
    written = qwen_line(output)
    return {"name": task.name, "language": task.language, "path": "raw", "expected": task.expected,
            "first_line": written, "match": written == task.expected, "empty": not written,
            "latency_ms": round(latency_ms, 1), "answer": output, "prompt_tokens": prompt_tokens,
            "new_tokens": new_tokens}


def line_complete(output: str) -> bool:
    """Whether the line :func:`bench.fim_tasks.qwen_line` scores is complete in ``output``: a line break
    follows it (the second line break where the output starts with ``"\n"`` or ``" \n"``)."""
    return output.count("\n") >= (2 if output.startswith(("\n", " \n")) else 1)


def greedy_until_line(engine, prompt_ids: list[int]) -> tuple[str, list[int]]:
    """(the output text, special tokens left out; the new token ids) of greedy plain decoding after ``prompt_ids``:
    at most :data:`NEW_TOKENS`, ending at the model's end-of-sequence ids or once :func:`line_complete`
    (see the module docstring)."""
    new_ids: list[int] = []
    text = ""
    while len(new_ids) < NEW_TOKENS:
        config = GenerationConfig(max_new_tokens=min(PIECE_TOKENS, NEW_TOKENS - len(new_ids)))  # stop ids: EOS
        generation = engine.generate(prompt_ids + new_ids, config, mode="none", cache_key="fim-eval")
        new_ids += generation.token_ids
        text = engine.tokenizer.decode(new_ids, skip_special_tokens=True)
        if generation.finish_reason != FINISH_LENGTH or line_complete(text):
            break
    return text, new_ids


def run_raw(engine, tasks: list[FimTask]) -> list[dict]:
    """One row per task, in order: greedy plain decoding of Qwen's PSM prompt (see the module docstring)."""
    rows = []
    for number, task in enumerate(tasks, 1):
        prompt_ids = psm_prompt_ids(engine.tokenizer, engine.target.capabilities.fim, task.prompt, task.suffix)
        started = time.perf_counter()
        output, new_ids = greedy_until_line(engine, prompt_ids)
        rows.append(raw_row(task, output, 1000 * (time.perf_counter() - started), len(prompt_ids), len(new_ids)))
        print(f"[raw {number}/{len(tasks)}] {task.key}: {rows[-1]['first_line']!r} ({rows[-1]['latency_ms']:.0f} ms)",
              file=sys.stderr)
    return rows
