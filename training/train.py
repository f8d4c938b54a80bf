"""Train the bundled starter pair (tokenizer, target, draft) on this interpreter's standard library.

Reproducible up to the time budget: seeds are fixed, and ``--max-steps`` pins the number of steps
when exact reproduction matters (the time budget alone stops wherever the machine got to).

    python -m training.train --target-minutes 20 --draft-minutes 7

Writes ``OUT/target`` and ``OUT/draft`` (default: the package's ``models`` directory), each a
Hugging Face model directory with bf16 safetensors weights, the shared tokenizer, a model card
(``README.md``) and ``training.json`` with the recipe and the held-out loss.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from bench.corpus import DEFAULT_HELD_OUT, held_out_texts, read_texts, stdlib_files
from decoding.weights.starter import MODELS_DIR, SPECIAL_TOKENS
from training.data import ExampleMaker, ExampleMix, chunk_text, site_packages_files, train_tokenizer
from training.induction import install_previous_token_head


@dataclass(frozen=True)
class ModelShape:
    """Qwen2 shape of one starter model."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int


TARGET_SHAPE = ModelShape(384, 6, 6, 2, 1024)  # about 12.6M parameters with an 8k vocabulary
DRAFT_SHAPE = ModelShape(128, 2, 2, 1, 384)  # about 1.5M parameters


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings for one model."""

    minutes: float  # wall-clock budget for the optimisation loop
    max_steps: int = 1_000_000  # a hard cap; the time budget usually ends training first
    context: int = 1024  # tokens per training sequence
    batch_size: int = 4  # sequences per step
    lr: float = 2e-3  # peak learning rate
    min_lr_ratio: float = 0.1  # the cosine schedule decays to lr * min_lr_ratio
    schedule: str = "cosine"  # or "constant" after the warm-up
    warmup_steps: int = 30
    weight_decay: float = 0.1
    seed: int = 0
    checkpoint_minutes: float = 5.0  # how often the resumable state is written
    log_every: int = 10  # steps between log records
    probe_every: int = 100  # steps between copy-probe scores (a multiple of log_every)


def build_config(shape: ModelShape, tokenizer: PreTrainedTokenizerFast, context: int) -> Qwen2Config:
    """A Qwen2 config for ``shape`` with the tokenizer's vocabulary and special-token ids."""
    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_hidden_layers,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        max_position_embeddings=4 * context,  # positions beyond the training context extrapolate (RoPE)
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def embeddings_tied(model: Qwen2ForCausalLM) -> bool:
    """Whether ``model``'s output layer shares its matrix with the input embeddings."""
    embedding = model.get_input_embeddings().weight  # (V, H)
    return model.lm_head.weight is embedding or model.lm_head.weight.data_ptr() == embedding.data_ptr()


@torch.no_grad()
def untie_embeddings(model: Qwen2ForCausalLM) -> bool:
    """Give ``model``'s output layer (``lm_head``) its own copy of the tied input embeddings, in place.

    The outputs do not change at first; afterwards the two matrices train apart. With tied weights the
    softmax gradient pushes every rarely seen token's embedding the same way (towards minus the mean
    hidden state: the "representation degeneration" of Gao et al. 2019, ICLR), and the shipped tied
    target's embeddings show it: random token pairs have cosine 0.40 among the 1,024 most frequent
    merges and 0.57 among the last 1,024, and copying a token from the context fails more often the
    rarer it is (``evaluate.induction_by_id_quarter``: 0.81 for the first quarter of the ids, 0.55 for
    the last).
    Untied, the input embeddings are shaped by their use only. Costs ``vocab_size * hidden_size``
    more parameters.

    Returns:
        True when the model was tied (and is now untied), False when it already had its own ``lm_head``.
    """
    if not embeddings_tied(model):
        return False
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    return True


def wrap_tokenizer(tokenizer) -> PreTrainedTokenizerFast:
    """The ``tokenizers`` object as a transformers tokenizer with its special tokens declared."""
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|endoftext|>",
        pad_token="<|fim_pad|>",
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in ("<|endoftext|>", "<|fim_pad|>")],
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


class Batches:
    """Random packed sequences of ``context + 1`` tokens drawn from the example mix, with the loss
    weight of each token (see :meth:`ExampleMaker.weighted`)."""

    def __init__(self, chunks: list[str], maker: ExampleMaker, context: int, rng: random.Random):
        self.chunks, self.maker, self.context, self.rng = chunks, maker, context, rng

    def sequence(self) -> tuple[list[int], list[float]]:
        ids: list[int] = []
        weights: list[float] = []
        while len(ids) < self.context + 1:
            example, example_weights = self.maker.weighted(self.rng.choice(self.chunks))
            ids.extend(example)
            weights.extend(example_weights)
        return ids[: self.context + 1], weights[: self.context + 1]

    def __call__(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids, weights)``, both ``(B, T + 1)``; ids int64, weights float32."""
        rows = [self.sequence() for _ in range(batch_size)]
        return torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])


class _BatchStream(torch.utils.data.IterableDataset):
    """Endless batches from :class:`Batches`, each DataLoader worker with its own seeded random state."""

    def __init__(self, batches: Batches, batch_size: int, seed: int):
        super().__init__()
        self.batches, self.batch_size, self.seed = batches, batch_size, seed

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else 0
        self.batches.rng.seed(self.seed * 1000 + worker)
        while True:
            yield self.batches(self.batch_size)


def batch_source(batches: Batches, batch_size: int, workers: int, seed: int) -> Callable[[], tuple]:
    """A function returning the next ``(ids, weights)`` batch: built in this process (``workers`` 0,
    reproducible and resumable to the step) or by ``workers`` DataLoader processes (fast enough to keep
    a GPU busy; the data stream then depends on the workers' interleaving and is not resumed exactly)."""
    if workers <= 0:
        return lambda: batches(batch_size)
    loader = torch.utils.data.DataLoader(_BatchStream(batches, batch_size, seed), batch_size=None,
                                         num_workers=workers, pin_memory=torch.cuda.is_available(),
                                         prefetch_factor=4, persistent_workers=True)
    stream = iter(loader)
    return lambda: next(stream)


def lr_at(cfg: TrainConfig, steps_in_phase: int, progress: float) -> float:
    """Linear warm-up over the first ``cfg.warmup_steps`` steps of a phase, then cosine decay over
    ``progress`` in [0, 1] (time or steps, whichever is further).

    The warm-up restarts with every phase because AdamW's second-moment estimates carry over from the
    previous data: after a phase of random-token repeats (small gradients) the first full-rate steps on
    code took the starter target's copy probe from 0.87 to 0.30 within 84 steps (with the warm-up and a
    lower rate, 0.6-0.75; the two changes were not tried apart).
    """
    if steps_in_phase < cfg.warmup_steps:
        return cfg.lr * (steps_in_phase + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


class CopyProbe:
    """A few held-out copy prompts scored during training, to watch copying (induction) appear."""

    def __init__(self, tokenizer, samples: int = 8, window: int = 16):
        from training.evaluate import EvalConfig, copy_prompts

        cfg = EvalConfig(copy_samples=samples, window=window)
        self.window = window
        self.pairs = copy_prompts(held_out_texts(), tokenizer, cfg, random.Random(12345))

    @torch.inference_mode()
    def __call__(self, model) -> float:
        """Mean prefix-match fraction of greedy continuations (see ``evaluate.copy_prompts``)."""
        from training.evaluate import _greedy, _prefix_match

        was_training = model.training
        model.eval()
        scores = [_prefix_match(_greedy(model, prompt, self.window), expected) / self.window
                  for prompt, expected in self.pairs]
        model.train(was_training)
        return round(sum(scores) / max(len(scores), 1), 4)


def _distillation_loss(teacher: Qwen2ForCausalLM, input_ids: torch.Tensor, logits: torch.Tensor, cuda: bool) -> torch.Tensor:
    """KL(teacher || model) per position, nats: ``input_ids`` (B, T) int64, ``logits`` (B, T, V) -> (B * T,)."""
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
        teacher_logits = teacher(input_ids=input_ids).logits  # (B, T, V)
    teacher_log_probs = torch.log_softmax(teacher_logits.flatten(0, 1).float(), dim=-1)  # (B * T, V)
    log_probs = torch.log_softmax(logits.flatten(0, 1).float(), dim=-1)  # (B * T, V)
    return (teacher_log_probs.exp() * (teacher_log_probs - log_probs)).sum(-1)


def checkpoint_step(path: Path) -> int:
    """Optimizer steps recorded in the checkpoint at ``path`` (0 when there is none)."""
    return torch.load(path, weights_only=False, map_location="cpu")["step"] if path.exists() else 0


def check_lineage(work_dir: Path, name: str, init_steps: int, resuming: bool) -> None:
    """Record (new run) or check (resumed run) the step count of the model a run continues from.

    A checkpoint's counts include every step of its run, so resuming it from a model exported by
    that same run (whose record holds the run already) would count those steps twice.

    Raises:
        ValueError: resuming from another starting model than the stopped run's.
    """
    lineage = work_dir / f"{name}.init.json"
    if resuming and lineage.exists():
        started_from = json.loads(lineage.read_text())["init_steps"]
        if started_from != init_steps:
            raise ValueError(f"the {name} checkpoint in {work_dir} continued a model trained for {started_from} "
                             f"steps, but --init-from names one trained for {init_steps}; resume with the stopped "
                             "run's --init-from (a model exported by this run already holds its steps)")
        return
    lineage.write_text(json.dumps({"init_steps": init_steps}) + "\n")


def _save_checkpoint(path: Path, state: dict) -> None:
    """Write atomically: a stopped run never leaves half a checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save(state, partial)
    os.replace(partial, path)


def train_model(model: Qwen2ForCausalLM, batches: Batches, cfg: TrainConfig, name: str,
                checkpoint: Path | None = None, log_path: Path | None = None, probe: CopyProbe | None = None,
                phase: dict | None = None, after_step: Callable[[], None] | None = None,
                data_workers: int = 0, teacher: Qwen2ForCausalLM | None = None) -> dict:
    """Optimise ``model`` in place, on the device its parameters are on (fp32 weights; on CUDA the
    forward and backward run under bfloat16 autocast); returns the steps, tokens and last training loss.

    Args:
        checkpoint: file for model, optimizer and data-sampler state, written every
            ``cfg.checkpoint_minutes`` and at the end; when it exists, training resumes from it (the
            time budget and the learning-rate schedule count the time already spent).
        log_path: JSON-lines log, one record per ``cfg.log_every`` steps (step, loss, lr, tokens/s, copy probe).
        probe: scored every ``cfg.probe_every`` steps and logged.
        phase: what this invocation trains on (e.g. the data mix and learning rate); a resumed run whose phase differs
            from the checkpoint's records a new phase starting at the resumed step. A checkpoint
            whose embeddings were tied (or untied) does not load into a model whose are not (ValueError).
        after_step: called after every optimizer step and once before the first (after a resumed
            checkpoint is loaded), e.g. to hold parameters fixed.
        data_workers: DataLoader processes building batches (see :func:`batch_source`); 0 builds them here.
        teacher: when given (a model on the same device and vocabulary, e.g. the target for a draft), the
            loss per token is the KL divergence from the teacher's next-token distribution to the
            model's instead of the cross-entropy with the data (knowledge distillation, Hinton et al.
            2015; for drafts, Zhou et al. 2023, "DistillSpec": a draft fitted to its target's
            distribution is accepted more often).
    """
    torch.manual_seed(cfg.seed)
    device = next(model.parameters()).device
    cuda = device.type == "cuda"
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
        fused=cuda or None,
    )
    step, tokens, loss_ema, spent = 0, 0, None, 0.0
    phases = [{"from_step": 0, **(phase or {})}]
    tied = embeddings_tied(model)
    if checkpoint is not None and checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False, map_location=device)
        # Checkpoints from before this flag was saved all come from tied models. A mismatch would
        # otherwise fail later, in the optimizer's state, with a message about parameter group sizes.
        saved_tied = state.get("tied_embeddings", True)
        if saved_tied != tied:
            raise ValueError(f"{checkpoint} was trained with {'tied' if saved_tied else 'untied'} embeddings but the "
                             f"model's are {'tied' if tied else 'untied'}: resume with the stopped run's "
                             "--untie-embeddings setting")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        batches.rng.setstate(state["data_rng"])
        torch.set_rng_state(state["torch_rng"].cpu())
        step, tokens, loss_ema, spent = state["step"], state["tokens"], state["loss_ema"], state["seconds"]
        phases = state.get("phases", phases)
        if {k: v for k, v in phases[-1].items() if k != "from_step"} != (phase or {}):
            phases.append({"from_step": step, **(phase or {})})
        print(f"{name}: resumed from {checkpoint} at step {step} ({spent / 60:.1f} min spent)", file=sys.stderr)

    def save() -> None:
        if checkpoint is not None:
            _save_checkpoint(checkpoint, {
                "model": model.state_dict(), "optimizer": optimizer.state_dict(), "data_rng": batches.rng.getstate(),
                "torch_rng": torch.get_rng_state(), "step": step, "tokens": tokens, "loss_ema": loss_ema,
                "seconds": spent + time.monotonic() - start, "config": asdict(cfg), "phases": phases,
                "tied_embeddings": tied,
            })

    log = log_path.open("a") if log_path is not None else None
    next_batch = batch_source(batches, cfg.batch_size, data_workers, cfg.seed + step)
    if after_step is not None:
        after_step()
    model.train()
    budget_s = cfg.minutes * 60
    start = time.monotonic()
    last_save = start
    bar = tqdm(total=int(budget_s), initial=int(spent), desc=f"train {name}", unit="s", file=sys.stderr,
               dynamic_ncols=True)
    try:
        while step < cfg.max_steps:
            elapsed = spent + time.monotonic() - start
            if elapsed >= budget_s:
                break
            lr = lr_at(cfg, step - phases[-1]["from_step"], max(elapsed / budget_s, step / cfg.max_steps))
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch, weights = next_batch()  # (B, T + 1) each
            batch, weights = batch.to(device, non_blocking=True), weights.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
                logits = model(input_ids=batch[:, :-1]).logits  # (B, T, V)
            if teacher is None:
                per_token = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten(),
                                                              reduction="none")  # (B * T,)
            else:
                per_token = _distillation_loss(teacher, batch[:, :-1], logits, cuda)  # (B * T,)
            target_weights = weights[:, 1:].flatten()  # (B * T,)
            loss = (per_token * target_weights).sum() / target_weights.sum().clamp(min=1.0)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if after_step is not None:
                after_step()
            step += 1
            tokens += batch[:, 1:].numel()
            loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
            now = time.monotonic()
            bar.n = min(int(spent + now - start), int(budget_s))
            bar.set_postfix(step=step, loss=f"{loss_ema:.3f}", tok_s=f"{batch[:, 1:].numel() * step / max(spent + now - start, 1e-9):.0f}")
            if log is not None and step % cfg.log_every == 0:
                record = {"model": name, "step": step, "tokens": tokens, "loss_ema": round(loss_ema, 4),
                          "lr": lr, "minutes": round((spent + now - start) / 60, 2)}
                if probe is not None and step % cfg.probe_every == 0:
                    record["copy_probe"] = probe(model)
                log.write(json.dumps(record) + "\n")
                log.flush()
            if now - last_save >= cfg.checkpoint_minutes * 60:
                save()
                last_save = now
        save()
    finally:
        bar.close()
        if log is not None:
            log.close()
    model.eval()
    return {"steps": step, "train_tokens": tokens, "final_train_loss_ema": loss_ema,
            "train_seconds": round(spent + time.monotonic() - start, 1), "phases": phases}


@torch.no_grad()
def held_out_loss(model: Qwen2ForCausalLM, token_ids: list[int], context: int, max_windows: int) -> dict:
    """Mean next-token cross-entropy (nats/token) over non-overlapping ``context``-token windows."""
    model.eval()
    total, count = 0.0, 0
    windows = [token_ids[i : i + context + 1] for i in range(0, len(token_ids) - context, context)][:max_windows]
    for window in windows:
        ids = torch.tensor([window], device=model.device)  # (1, T + 1)
        logits = model(input_ids=ids[:, :-1]).logits.float()  # (1, T, V)
        total += torch.nn.functional.cross_entropy(logits[0], ids[0, 1:], reduction="sum").item()
        count += context
    return {"held_out_loss": round(total / max(count, 1), 4), "held_out_tokens": count}


def model_card(name: str, info: dict) -> str:
    """A short Markdown model card from the training record."""
    lines = [
        f"# speclsp starter {name}",
        "",
        f"A {info['parameters'] / 1e6:.2f}M-parameter Qwen2-architecture code model, trained from scratch "
        "by `python -m training.train` on this interpreter's standard-library `.py` files "
        f"(tests excluded; held out for evaluation: {', '.join(info['held_out_packages'])})"
        + (" and the installed packages' `.py` files" if (info.get("data_sources") or {}).get("site_packages_files") else "")
        + ".",
        "It is a toy for demos and tests of the speculative engine, not a useful code assistant.",
        "",
        *([("The first heads of layer 0 (and of other layers, where `previous_token_distances` lists "
            "LAYER:DISTANCE) were built as previous-token heads, one per distance, before training "
            "(`training.induction`), so that copying (induction) forms early; phases with "
            "`source_weight` 0 train only on reproducing text seen earlier in the sequence."), ""]
          if any(r.get("previous_token_head") for r in info.get("runs", [])) else []),
        "| field | value |",
        "|---|---|",
    ]
    for key in ("parameters", "shape", "tied_embeddings", "vocab_size", "context", "steps", "train_tokens", "train_seconds",
                "batch_size", "device", "runs", "data_mix", "data_sources", "training_files", "held_out_loss", "held_out_tokens",
                "weights_dtype", "python"):
        lines.append(f"| {key} | `{json.dumps(info.get(key))}` |")
    lines += ["", "Held-out loss: mean next-token cross-entropy in nats per token on plain held-out text, "
              "measured with the shipped bf16 weights loaded as fp32.", ""]
    return "\n".join(lines)


def _mix(spec: str) -> ExampleMix:
    try:
        values = [float(x) for x in spec.split(",")]
        return ExampleMix(*values)
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"--mix wants FIM,COPY,EDIT,RANDOM_REPEAT[,SPAN_REPEAT] fractions: {exc}") from None


def _distances(spec: str) -> tuple[tuple[int, int], ...]:
    """``"1,2,3"`` (layer 0) or ``"0:1,0:2,0:3,1:4"`` (layer:distance) -> ((layer, distance), ...)."""
    try:
        values = tuple((int(item.partition(":")[0]), int(item.partition(":")[2])) if ":" in item else (0, int(item))
                       for item in spec.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--previous-token-distances wants DISTANCE or LAYER:DISTANCE items: {exc}") from None
    if not values or min(d for _, d in values) < 1 or min(layer for layer, _ in values) < 0:
        raise argparse.ArgumentTypeError("--previous-token-distances wants distances >= 1 and layers >= 0")
    return values


def built_heads(spec: tuple[tuple[int, int], ...], config) -> list[tuple[int, int, int]]:
    """(layer, head, distance) for each head to build: heads numbered from 0 within each layer, at most
    all heads but one per layer, and only in layers the model has."""
    per_layer: dict[int, int] = {}
    heads = []
    for layer, distance in spec:
        head = per_layer.get(layer, 0)
        if layer < config.num_hidden_layers and head < max(1, config.num_attention_heads - 1):
            heads.append((layer, head, distance))
            per_layer[layer] = head + 1
    return heads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=MODELS_DIR)
    parser.add_argument("--target-minutes", type=float, default=20.0)
    parser.add_argument("--draft-minutes", type=float, default=7.0)
    parser.add_argument("--max-steps", type=int, default=1_000_000)
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    parser.add_argument("--mix", type=_mix, default=ExampleMix(fim=0.3, copy=0.2, edit=0.25, random_repeat=0.05),
                        help="fractions FIM,COPY,EDIT,RANDOM_REPEAT of the examples; plain text is the rest "
                             "(default 0.3,0.2,0.25,0.05)")
    parser.add_argument("--weight-decay", type=float, default=0.1,
                        help="AdamW weight decay of the matrices, embeddings included (default 0.1)")
    parser.add_argument("--untie-embeddings", action="store_true",
                        help="give the target's output layer its own copy of the (tied) input embeddings before "
                             "training (see untie_embeddings); the draft stays tied")
    parser.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                        help="learning rate after the warm-up: cosine decay over the time budget, or constant")
    parser.add_argument("--source-weight", type=float, default=1.0,
                        help="loss weight of the text a copy or edited copy reproduces (0: train only on the "
                             "reproduction, a copying phase; default 1)")
    parser.add_argument("--no-site-packages", dest="site_packages", action="store_false",
                        help="train on the standard library only (by default the installed packages' .py files join)")
    parser.add_argument("--held-out", nargs="+", default=list(DEFAULT_HELD_OUT))
    parser.add_argument("--eval-windows", type=int, default=48)
    parser.add_argument("--probe-every", type=int, default=100, help="steps between copy-probe scores")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where to train (auto: CUDA when there is a GPU); CUDA trains under bf16 autocast")
    parser.add_argument("--data-workers", type=int, default=0,
                        help="processes building batches (0: in the training process, exactly resumable); "
                             "a GPU needs several to be kept busy")
    parser.add_argument("--init-from", type=Path, default=None,
                        help="continue from the models (and tokenizer) in this directory instead of training "
                             "from scratch; the training record accumulates steps and tokens")
    parser.add_argument("--previous-token-head", choices=("fresh", "always", "never"), default="fresh",
                        help="build a previous-token head in layer 0 (training.induction): for models "
                             "trained from scratch (fresh, the default), also over a trained head (always), or never")
    parser.add_argument("--previous-token-distances", type=_distances, default=((0, 1),),
                        help="distances of the built heads, one query head each from head 0 on in its layer: "
                             "DISTANCE (layer 0) or LAYER:DISTANCE, comma-separated. 1,2,3 writes the three "
                             "preceding tokens into layer 0's output; adding 1:4,1:8 lets layer 1 fetch what layer 0 "
                             "wrote 4 and 8 positions back, so later heads can match contexts of about 12 tokens")
    parser.add_argument("--draft-previous-token-distances", type=_distances, default=((0, 1),),
                        help="as --previous-token-distances, for the draft (default 1: its two layers leave room "
                             "for one built head)")
    parser.add_argument("--distill-draft", action="store_true",
                        help="train the draft to match the target's next-token distributions (the target trained "
                             "in this run, else the one in --init-from) instead of the data's next tokens")
    parser.add_argument("--induction-steps", type=int, default=0,
                        help="steps of random-token repeats only (loss on the repeat) before the data mix, for each "
                             "model: an induction (copying) head forms there; 0 skips the phase")
    parser.add_argument("--work-dir", type=Path, default=Path.home() / ".cache" / "speclsp" / "starter-train",
                        help="checkpoints and the JSON-lines training log (train.log.jsonl)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the checkpoints in --work-dir (same arguments as the stopped run); "
                             "without it, old checkpoints there are replaced")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.data_workers > 0:  # the workers are forked after this process has used the tokenizer
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    device = torch.device("cuda" if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
                          else "cpu")
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    args.work_dir.mkdir(parents=True, exist_ok=True)

    held_out = tuple(args.held_out)
    train_texts = read_texts(stdlib_files(held_out))
    sources = {"stdlib_files": len(train_texts)}
    if args.site_packages:
        extra = read_texts(site_packages_files())
        sources["site_packages_files"] = len(extra)
        train_texts += extra
    eval_texts = read_texts(stdlib_files(held_out, want_held_out=True))
    print(f"corpus: {sources}, {len(eval_texts)} held-out files; work dir {args.work_dir}", file=sys.stderr)
    if args.init_from is not None:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(args.init_from / "target")
    else:
        tokenizer = wrap_tokenizer(train_tokenizer(train_texts, args.vocab_size))
    eos = tokenizer.eos_token_id
    eval_ids: list[int] = []
    for text in eval_texts:
        eval_ids += tokenizer.encode(text, add_special_tokens=False) + [eos]

    # ~2000 characters is ~600 tokens: a chunk and a copy of part of it fit one 1024-token sequence.
    chunks = [c for text in train_texts for c in chunk_text(text, max_chars=2000)]
    mix = args.mix
    probe = CopyProbe(tokenizer)
    models = [(name, shape, minutes) for name, shape, minutes in (("target", TARGET_SHAPE, args.target_minutes),
                                                                  ("draft", DRAFT_SHAPE, args.draft_minutes))
              if minutes > 0]
    records: dict[str, dict] = {}  # the training record of each model we continue from
    for name, _, _ in models:  # before any training: a refused resume must not come after hours of it
        checkpoint = args.work_dir / f"{name}.pt"
        if not args.resume and checkpoint.exists():
            checkpoint.unlink()
        records[name] = json.loads((args.init_from / name / "training.json").read_text()) if args.init_from else {}
        try:
            check_lineage(args.work_dir, name, records[name].get("steps", 0), args.resume and checkpoint.exists())
        except ValueError as error:
            parser.error(str(error))
    for name, shape, minutes in models:
        checkpoint = args.work_dir / f"{name}.pt"
        previous = records[name]
        if args.init_from is not None:
            model = Qwen2ForCausalLM.from_pretrained(args.init_from / name, dtype=torch.float32)
        else:
            torch.manual_seed(args.seed)
            model = Qwen2ForCausalLM(build_config(shape, tokenizer, args.context))
        untied = name == "target" and args.untie_embeddings and untie_embeddings(model)
        model = model.to(device)
        built_head = args.previous_token_head == "always" or (args.previous_token_head == "fresh" and not previous)
        # The head is written again after every step: its attention pattern stays fixed while the rest
        # of the model learns to use it (left free, training eroded it within 70 steps).
        spec = args.previous_token_distances if name == "target" else args.draft_previous_token_distances
        heads = built_heads(spec, model.config) if built_head else []
        teacher = None
        if name == "draft" and args.distill_draft:
            teacher_dir = args.out / "target" if args.target_minutes > 0 else (args.init_from or args.out) / "target"
            teacher = Qwen2ForCausalLM.from_pretrained(teacher_dir, dtype=torch.float32).to(device).eval()
        distances = [f"{layer}:{distance}" for layer, _, distance in heads]

        def keep_head(m=model) -> None:
            for layer, head, distance in heads:
                install_previous_token_head(m, layer=layer, head=head, distance=distance)
        earlier_runs = len(previous.get("runs", [previous])) if previous else 0
        cfg = TrainConfig(minutes=minutes, max_steps=args.max_steps, context=args.context, batch_size=args.batch_size,
                          seed=args.seed + earlier_runs, lr=args.lr, warmup_steps=50 if previous else 30,
                          probe_every=args.probe_every, schedule=args.schedule, weight_decay=args.weight_decay)
        rng = random.Random(cfg.seed)
        maker = ExampleMaker(tokenizer.backend_tokenizer, mix, rng, source_weight=args.source_weight)
        batches = Batches(chunks, maker, args.context, rng)
        # Shared by both phases; the checkpoint carries the model, optimizer and step from one to the next.
        common = dict(checkpoint=checkpoint, log_path=args.work_dir / "train.log.jsonl", probe=probe,
                      after_step=keep_head if built_head else None, data_workers=args.data_workers)
        if args.induction_steps > 0 and checkpoint_step(checkpoint) < args.induction_steps:
            # An induction-forming phase: random-token repeats only, where nothing but copying from the
            # context lowers the loss (see training/README.md for the measurement).
            induction_maker = ExampleMaker(tokenizer.backend_tokenizer, ExampleMix(fim=0.0, copy=0.0, random_repeat=1.0),
                                           rng, source_weight=0.0)
            train_model(model, Batches(chunks, induction_maker, args.context, rng),
                        replace(cfg, max_steps=args.induction_steps), name,
                        phase={"data_mix": asdict(induction_maker.mix), "source_weight": 0.0,
                               "previous_token_distances": distances, "lr": cfg.lr}, **common)
        record = train_model(model, batches, cfg, name, teacher=teacher,
                             phase={"data_mix": asdict(mix), "source_weight": args.source_weight,
                                    "previous_token_distances": distances, "lr": cfg.lr}, **common)
        run_keys = ("steps", "train_tokens", "train_seconds", "lr", "seed")
        runs = previous.get("runs", [{k: previous.get(k) for k in run_keys}] if previous else [])
        runs.append({k: record[k] for k in ("steps", "train_tokens", "train_seconds")}
                    | {"lr": cfg.lr, "seed": cfg.seed, "previous_token_head": built_head,
                       "previous_token_distances": distances, "distilled_from": str(teacher_dir) if teacher else None,
                       "phases": record.pop("phases"), "data_sources": sources,
                       "weight_decay": cfg.weight_decay, "untied_here": untied,
                       "tied_embeddings": model.config.tie_word_embeddings,
                       "copy_probe": probe(model)})
        record.update(runs=runs, steps=sum(r["steps"] for r in runs), train_tokens=sum(r["train_tokens"] for r in runs),
                      train_seconds=round(sum(r["train_seconds"] for r in runs), 1))
        model = model.to("cpu", torch.bfloat16)
        out_dir = args.out / name
        out_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
        shipped = Qwen2ForCausalLM.from_pretrained(out_dir, dtype=torch.float32)
        record.update(held_out_loss(shipped, eval_ids, args.context, args.eval_windows))
        record.update(
            parameters=sum(p.numel() for p in shipped.parameters()),
            tied_embeddings=shipped.config.tie_word_embeddings,
            shape=asdict(shape), vocab_size=len(tokenizer), context=args.context,
            batch_size=args.batch_size, data_mix=asdict(mix), data_sources=sources, device=device.type,
            training_files=len(train_texts), held_out_packages=list(held_out), weights_dtype="bfloat16",
            python=sys.version.split()[0],
        )
        (out_dir / "training.json").write_text(json.dumps(record, indent=2) + "\n")
        (out_dir / "README.md").write_text(model_card(name, record))
        print(f"{name}: {json.dumps(record)}", file=sys.stderr)
    return 0


def add_parser(commands) -> None:
    """Register ``speclsp train-starter`` (the arguments of :func:`main`) on an argparse subparsers object."""
    # No option prefix here: every argument after the command, --help included, goes to main's own parser.
    train = commands.add_parser("train-starter", help="retrain the bundled starter models (see training.train)",
                                add_help=False, prefix_chars="\0")
    train.add_argument("train_args", nargs=argparse.REMAINDER)
    train.set_defaults(run=lambda args: main(args.train_args))


if __name__ == "__main__":
    raise SystemExit(main())
