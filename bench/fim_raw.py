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
Generation is our engine's plain decoding (drafter ``none``, :meth:`decoding.engine.Engine.generate`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

from bench.fim_tasks import FimTask, qwen_line
from decoding.types import GenerationConfig
from lsp_server.settings import Settings

LEFT_TOKENS = 2048 - 64 - 512  # Qwen's max_seq_length - gen_length - right_context_length
RIGHT_TOKENS = 512
NEW_TOKENS = 64


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
    """One task's row of the raw path (``output``: the model's text, special tokens left out)."""
    written = qwen_line(output)
    return {"name": task.name, "language": task.language, "path": "raw", "expected": task.expected,
            "first_line": written, "match": written == task.expected, "empty": not written,
            "latency_ms": round(latency_ms, 1), "answer": output, "prompt_tokens": prompt_tokens,
            "new_tokens": new_tokens}


def run_raw(engine, tasks: list[FimTask]) -> list[dict]:
    """One row per task, in order: greedy plain decoding of Qwen's PSM prompt (see the module docstring)."""
    config = GenerationConfig(max_new_tokens=NEW_TOKENS)  # stop ids None: the model's end-of-sequence ids
    rows = []
    for number, task in enumerate(tasks, 1):
        prompt_ids = psm_prompt_ids(engine.tokenizer, engine.target.capabilities.fim, task.prompt, task.suffix)
        started = time.perf_counter()
        generation = engine.generate(prompt_ids, config, mode="none", cache_key="fim-eval")
        rows.append(raw_row(task, generation.text, 1000 * (time.perf_counter() - started), len(prompt_ids),
                            generation.stats.new_tokens))
        print(f"[raw {number}/{len(tasks)}] {task.key}: {rows[-1]['first_line']!r} ({rows[-1]['latency_ms']:.0f} ms)",
              file=sys.stderr)
    return rows
