"""``speclsp eval models``: quality figures of a target/draft pair on held-out code.

Every figure is measured on the held-out standard-library packages (``json/`` and ``email/`` by
default), which no starter model trains on. All decoding here is plain greedy decoding of one model
(transformers ``generate``), so the figures describe the models, not the speculative engine.

* ``target_loss`` / ``draft_loss``: mean next-token cross-entropy (nats/token) over non-overlapping
  windows of plain held-out text.
* ``draft_acceptance``: on the same windows, the fraction of positions where the draft's argmax
  equals the target's — the acceptance rate of greedy draft-model speculation with teacher forcing.
* ``copy_score``: a held-out chunk, then the chunk again from one of its lines; the prompt ends
  ``prompt_tokens`` tokens into the repeat. Score = the number of the next ``window`` greedy tokens
  reproduced before the first mismatch, divided by ``window`` (a prefix match: what speculation
  can accept), averaged over samples.
* ``edit_score``: as ``copy_score``, but the repeat is an edited copy with one identifier renamed
  throughout; the prompt ends just after the first renamed occurrence and the expected continuation
  (which renames a later occurrence within the window) is the edited text.
* ``induction_score``: a run of random ordinary token ids, then the same run again; the fraction of
  the repeat's tokens (after its first) that the model predicts right with teacher forcing. Code has
  priors a model can lean on; random ids have none, so this measures in-context copying (an induction
  head, Olsson et al. 2022) alone. A model without one scores near 0. ``induction_by_id_quarter``
  splits the target's score by the copied id's quarter of the vocabulary (rarer tokens last).
* ``fim_exact_match``: fill-in-the-middle with the cursor at the end of a line, the next (non-blank) line
  missing, the prompt built by the server's own prompt builder (:func:`bench.workloads.fim_prompts`:
  PSM, ``<|fim_prefix|>``...``<|fim_middle|>``, 768 tokens before the cursor, 256 after); exact match
  of the first generated line with it (indentation included), at ``fim_cuts`` cut points. The cursor
  sits where tokens end: a cut inside indentation would split a token the model only ever saw whole
  (``"\n   "``), and a model that does not back off over it (token healing) starts a new line instead.
* ``timing_ms``: the cost of one decode step and of verifying 8 tokens with the target, and of one
  draft decode step, all with a 512-token cache, median of repetitions (ms, this machine).
"""

from __future__ import annotations

import random
import re
import statistics
import time
from dataclasses import dataclass

import torch

from bench.corpus import DEFAULT_HELD_OUT, held_out_texts, rename_identifier
from bench.workloads import fim_prompts
from training.data import PYTHON_WORDS

_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_KEYWORDS = PYTHON_WORDS | {"cls", "print", "len", "str", "int", "dict", "list", "set", "tuple", "isinstance"}


@dataclass(frozen=True)
class EvalConfig:
    """Sample sizes of ``speclsp eval models``; ``quick()`` is the small version."""

    copy_samples: int = 100  # prompts for the copy score
    edit_samples: int = 100  # prompts for the edit score
    fim_cuts: int = 100  # cut points for FIM next-line exact match
    induction_runs: int = 16  # random-id runs for the induction score
    induction_length: int = 128  # tokens per random-id run
    loss_windows: int = 48  # 1024-token windows for losses and draft agreement
    window: int = 32  # tokens compared after a copy/edit prompt
    prompt_tokens: int = 8  # tokens of the repeat already in the copy prompt
    context: int = 1024  # window length for the loss (tokens)
    seed: int = 0

    @classmethod
    def quick(cls) -> "EvalConfig":
        return cls(copy_samples=20, edit_samples=20, fim_cuts=20, loss_windows=8, induction_runs=4)


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def _chunks(texts: list[str], rng: random.Random, count: int, min_lines: int, max_lines: int) -> list[str]:
    """``count`` random line-aligned chunks of ``min_lines``..``max_lines`` lines with code on them."""
    pool = [t.splitlines(keepends=True) for t in texts if t.count("\n") >= min_lines]
    out: list[str] = []
    while len(out) < count:
        lines = rng.choice(pool)
        first = rng.randrange(len(lines) - min_lines + 1)
        chunk = "".join(lines[first : first + rng.randint(min_lines, max_lines)])
        if sum(1 for line in chunk.splitlines() if line.strip()) >= min_lines // 2:
            out.append(chunk)
    return out


@torch.inference_mode()
def _greedy(model, prompt_ids: list[int], max_new_tokens: int, stop_ids: tuple[int, ...] = ()) -> list[int]:
    """Plain greedy continuation of ``prompt_ids`` (transformers ``generate``), at most ``max_new_tokens``."""
    input_ids = torch.tensor([prompt_ids], device=model.device)  # (1, T)
    output = model.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens, do_sample=False,
        eos_token_id=list(stop_ids) or None, pad_token_id=model.config.pad_token_id,
    )
    return output[0, input_ids.shape[1]:].tolist()


def _prefix_match(generated: list[int], expected: list[int]) -> int:
    count = 0
    for got, want in zip(generated, expected):
        if got != want:
            break
        count += 1
    return count


def copy_prompts(texts: list[str], tokenizer, cfg: EvalConfig, rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, expected ids) pairs for the copy score: chunk, then a repeat of it from a line on."""
    pairs = []
    for chunk in _chunks(texts, rng, cfg.copy_samples, 12, 40):
        lines = chunk.splitlines(keepends=True)
        first = rng.randrange(len(lines) // 2)
        original = _encode(tokenizer, chunk)
        text_ids = _encode(tokenizer, chunk + "".join(lines[first:]))
        # Token-level: the text's own tokens after the repeat's first prompt_tokens tokens.
        cut = len(original) + cfg.prompt_tokens
        expected = text_ids[cut : cut + cfg.window]
        if len(expected) == cfg.window:
            pairs.append((text_ids[:cut], expected))
    return pairs


def edit_prompts(texts: list[str], tokenizer, cfg: EvalConfig, rng: random.Random) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, expected ids) for the edit score: chunk, then an edited copy with a name renamed
    throughout; the prompt ends after the first renamed occurrence, and the name recurs within the window."""
    pairs: list[tuple[list[int], list[int]]] = []
    tries = 0
    while len(pairs) < cfg.edit_samples and tries < 50 * cfg.edit_samples:
        tries += 1
        chunk = _chunks(texts, rng, 1, 12, 40)[0]
        names = [m.group() for m in _IDENTIFIER.finditer(chunk)]
        candidates = sorted({n for n in names if names.count(n) >= 3 and n not in _KEYWORDS and len(n) > 1})
        if not candidates:
            continue
        name = rng.choice(candidates)
        new_name = _new_name(name, set(names), rng)
        edited = rename_identifier(chunk, name, new_name)
        first_use = re.search(rf"\b{re.escape(new_name)}\b", edited)
        second_use = re.search(rf"\b{re.escape(new_name)}\b", edited[first_use.end():])
        line_start = edited.rfind("\n", 0, first_use.start()) + 1
        original = _encode(tokenizer, chunk)
        # The edited copy starts at the line of the first renamed occurrence (a rename in progress).
        full = chunk + edited[line_start:]
        text_ids = _encode(tokenizer, full)
        prompt_text = chunk + edited[line_start:first_use.end()]
        cut = len(_encode(tokenizer, prompt_text))
        if text_ids[:cut] != _encode(tokenizer, prompt_text) or cut <= len(original):
            continue  # the name's tokens merge with what follows; the cut is not a token boundary
        expected = text_ids[cut : cut + cfg.window]
        recurs_at = len(_encode(tokenizer, full[: len(chunk) + first_use.end() - line_start + second_use.start()]))
        if len(expected) == cfg.window and recurs_at < cut + cfg.window:
            pairs.append((text_ids[:cut], expected))
    return pairs


def _new_name(name: str, taken: set[str], rng: random.Random) -> str:
    """A plausible replacement identifier for ``name`` that does not occur in the chunk."""
    for _ in range(20):
        style = rng.randrange(4)
        word = rng.choice(("item", "value", "result", "node", "entry", "data", "buf", "obj", "key", "out"))
        if style == 0:
            candidate = f"{name}_{word}"
        elif style == 1:
            candidate = f"{word}_{name.lstrip('_')}"
        elif style == 2:
            candidate = f"{name}{rng.randint(2, 9)}"
        else:
            candidate = word + ("s" if rng.random() < 0.5 else "")
        if candidate not in taken and candidate not in _KEYWORDS:
            return candidate
    return f"{name}_renamed"


def _continuation_score(model, pairs: list[tuple[list[int], list[int]]], window: int) -> float:
    scores = [_prefix_match(_greedy(model, prompt, window), expected) / window for prompt, expected in pairs]
    return round(statistics.fmean(scores), 4) if scores else float("nan")


@torch.inference_mode()
def _induction_hits(model, tokenizer, runs: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hits, expected)``, both ``(runs, length - 1)``: whether the model's argmax on the second copy
    of each random id run is the repeat's next id (bool), and that id (int64)."""
    generator = torch.Generator().manual_seed(seed)
    ordinary = torch.tensor(sorted(set(range(len(tokenizer))) - set(tokenizer.all_special_ids)))  # (N,) int64
    run_ids = ordinary[torch.randint(len(ordinary), (runs, length), generator=generator)]  # (R, L)
    input_ids = torch.cat([run_ids, run_ids], dim=1).to(model.device)  # (R, 2L)
    predicted = model(input_ids=input_ids).logits.argmax(-1)  # (R, 2L)
    # Position length + i predicts token length + i + 1, the repeat's (i + 1)-th id.
    expected = input_ids[:, length + 1 :]  # (R, L - 1)
    return (predicted[:, length : 2 * length - 1] == expected).cpu(), expected.cpu()


def induction_score(model, tokenizer, runs: int, length: int, seed: int) -> float:
    """Teacher-forced accuracy on the second copy of random id runs (see the module docstring).

    Args:
        tokenizer: ids are drawn uniformly from its vocabulary less its special tokens.
        runs, length: how many runs of how many ids; each is scored on its ``length - 1`` predictable tokens.
    Returns:
        A fraction in [0, 1].
    """
    hits, _ = _induction_hits(model, tokenizer, runs, length, seed)
    return round(hits.float().mean().item(), 4)


def induction_by_id_quarter(model, tokenizer, runs: int, length: int, seed: int) -> list[float]:
    """The induction score split by the id of the token to copy, in four equal ranges of the vocabulary.

    A BPE vocabulary's later merges are its rarer tokens (the first quarter also holds the byte
    alphabet, some of it rare), so a score that falls from the first quarter
    to the last says copying depends on how often the model saw the token (the tied target shipped on
    2026-12-01: 0.81, 0.80, 0.67, 0.55; ``train.untie_embeddings`` gives the likely reason).

    Returns:
        Four fractions in [0, 1], lowest ids first (None for a range with no scored token).
    """
    hits, expected = _induction_hits(model, tokenizer, runs, length, seed)
    quarter = (expected * 4) // len(tokenizer)  # (R, L - 1) in 0..3
    return [round(hits[quarter == q].float().mean().item(), 4) if (quarter == q).any() else None
            for q in range(4)]


def fim_exact_match(model, tokenizer, pairs: list[tuple[list[int], str]], max_new_tokens: int = 64) -> float:
    """Fraction of cut points where the generated middle's first line (after the newline it starts
    with) equals the missing line, trailing whitespace aside."""
    stop_ids = tuple(sorted({tokenizer.eos_token_id, *tokenizer.convert_tokens_to_ids(
        ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>", "<|file_sep|>"])}))
    hits = 0
    for prompt, truth in pairs:
        generated = _greedy(model, prompt, max_new_tokens, stop_ids)
        text = tokenizer.decode([t for t in generated if t not in stop_ids])
        hits += text.removeprefix("\n").split("\n", 1)[0].rstrip() == truth.rstrip()
    return round(hits / len(pairs), 4) if pairs else float("nan")


@torch.inference_mode()
def loss_and_agreement(target, draft, token_ids: list[int], context: int, max_windows: int) -> dict:
    """Mean cross-entropy (nats/token) of both models and their argmax agreement on plain text windows."""
    windows = [token_ids[i : i + context + 1] for i in range(0, len(token_ids) - context, context)][:max_windows]
    target_nll = draft_nll = agree = count = 0.0
    for window in windows:
        ids = torch.tensor([window], device=target.device)  # (1, T + 1)
        target_logits = target(input_ids=ids[:, :-1]).logits[0].float()  # (T, V)
        draft_logits = draft(input_ids=ids[:, :-1].to(draft.device)).logits[0].float().to(target_logits.device)
        width = min(target_logits.shape[-1], draft_logits.shape[-1])
        labels = ids[0, 1:]
        target_nll += torch.nn.functional.cross_entropy(target_logits, labels, reduction="sum").item()
        draft_nll += torch.nn.functional.cross_entropy(draft_logits, labels, reduction="sum").item()
        agree += (target_logits[:, :width].argmax(-1) == draft_logits[:, :width].argmax(-1)).sum().item()
        count += labels.numel()
    count = max(count, 1)
    return {"target_loss": round(target_nll / count, 4), "draft_loss": round(draft_nll / count, 4),
            "draft_acceptance": round(agree / count, 4), "loss_tokens": int(count)}


@torch.inference_mode()
def step_costs(target, draft, context_tokens: int = 512, k: int = 8, repeats: int = 15) -> dict:
    """Median ms of: a target decode step, a target verify of ``k`` tokens, a draft decode step (cache warm)."""
    from transformers import DynamicCache

    def timed(model, new_tokens: int) -> float:
        vocab = model.config.vocab_size
        prompt = torch.randint(0, vocab, (1, context_tokens), device=model.device)  # (1, T)
        samples = []
        for _ in range(repeats):
            cache = DynamicCache()
            model(input_ids=prompt, cache=cache, use_cache=True)
            step = torch.randint(0, vocab, (1, new_tokens), device=model.device)  # (1, k)
            start = time.perf_counter()
            model(input_ids=step, cache=cache, use_cache=True)
            samples.append((time.perf_counter() - start) * 1000)
        return round(statistics.median(samples), 3)

    target_step = timed(target, 1)
    target_verify = timed(target, k)
    draft_step = timed(draft, 1)
    return {"target_step_ms": target_step, f"target_verify_{k}_ms": target_verify, "draft_step_ms": draft_step,
            "draft_to_target_step": round(draft_step / target_step, 3),
            f"verify_{k}_to_step": round(target_verify / target_step, 3), "context_tokens": context_tokens}


def evaluate_pair(target, draft, tokenizer, cfg: EvalConfig, held_out: tuple[str, ...] = DEFAULT_HELD_OUT,
                  progress=None) -> dict:
    """All figures of ``speclsp eval models`` for a loaded pair (both models in eval mode).

    Args:
        target, draft: causal LMs sharing ``tokenizer``'s vocabulary.
        progress: optional callable taking a stage name, for a progress display.

    Returns:
        A JSON-ready dict; scores are fractions in [0, 1], losses in nats per token, times in ms.
    """
    texts = held_out_texts(held_out)
    note = progress or (lambda stage: None)
    result: dict = {"held_out_packages": list(held_out), "held_out_files": len(texts)}
    eos = tokenizer.eos_token_id
    token_ids: list[int] = []
    for text in texts:
        token_ids += _encode(tokenizer, text) + [eos]
    note("loss")
    result.update(loss_and_agreement(target, draft, token_ids, cfg.context, cfg.loss_windows))
    note("copy")
    copies = copy_prompts(texts, tokenizer, cfg, random.Random(cfg.seed))
    result["copy_score"] = _continuation_score(target, copies, cfg.window)
    result["draft_copy_score"] = _continuation_score(draft, copies, cfg.window)
    note("edit")
    edits = edit_prompts(texts, tokenizer, cfg, random.Random(cfg.seed + 1))
    result["edit_score"] = _continuation_score(target, edits, cfg.window)
    result["draft_edit_score"] = _continuation_score(draft, edits, cfg.window)
    note("induction")
    for key, model in (("induction_score", target), ("draft_induction_score", draft)):
        result[key] = induction_score(model, tokenizer, cfg.induction_runs, cfg.induction_length, cfg.seed)
    result["induction_by_id_quarter"] = induction_by_id_quarter(target, tokenizer, cfg.induction_runs,
                                                                cfg.induction_length, cfg.seed)
    note("fim")
    cuts = fim_prompts(texts, tokenizer, cfg.fim_cuts, random.Random(cfg.seed + 2))
    result["fim_exact_match"] = fim_exact_match(target, tokenizer, cuts)
    result["draft_fim_exact_match"] = fim_exact_match(draft, tokenizer, cuts)
    note("timing")
    result["timing_ms"] = step_costs(target, draft)
    result["samples"] = {"copy": len(copies), "edit": len(edits), "fim": len(cuts), "window": cfg.window}
    return result


def add_parser(commands) -> None:
    """Register ``speclsp eval models`` on an argparse subparsers object."""
    from decoding.weights.model_names import STARTER_DRAFT, STARTER_TARGET

    evaluate = commands.add_parser("eval", help="measure model quality on held-out code")
    kinds = evaluate.add_subparsers(dest="eval_kind", required=True)
    models = kinds.add_parser("models", help="losses, copy/edit scores, FIM exact match, draft agreement, step costs")
    models.add_argument("--model", default=STARTER_TARGET, help="target: 'starter', a model directory or a hub id")
    models.add_argument("--draft-model", default=STARTER_DRAFT, help="draft: 'starter-draft', a directory or a hub id")
    models.add_argument("--device", default="auto")
    models.add_argument("--dtype", default="auto")
    models.add_argument("--trust-remote-code", action="store_true")
    models.add_argument("--quick", action="store_true", help="a small sample (20 prompts per score, 8 loss windows)")
    models.add_argument("--seed", type=int, default=0)
    models.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    models.set_defaults(run=run_models)


def run_models(args) -> int:
    import json
    import sys
    from dataclasses import replace

    from decoding.weights.loading import check_draft_compatible, load_model

    target = load_model(args.model, args.device, args.dtype, args.trust_remote_code)
    draft = load_model(args.draft_model, args.device, args.dtype, args.trust_remote_code)
    check_draft_compatible(target, draft)
    cfg = replace(EvalConfig.quick() if args.quick else EvalConfig(), seed=args.seed)
    started = time.monotonic()
    result = evaluate_pair(target.model, draft.model, target.tokenizer, cfg,
                           progress=lambda stage: print(f"eval: {stage}...", file=sys.stderr))
    result.update(target=args.model, draft=args.draft_model, quick=args.quick, seconds=round(time.monotonic() - started, 1))
    if args.json:
        print(json.dumps(result))
        return 0
    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {json.dumps(value) if isinstance(value, (dict, list)) else value}")
    return 0
