"""The starter training loop on a tiny model: steps, checkpoint and resume, batches built by worker
processes (the path a GPU run uses), and a loss that goes down on repeated text."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
import torch
from tokenizers import Tokenizer
from transformers import Qwen2Config, Qwen2ForCausalLM

from decoding.weights.starter import TARGET_DIR
from training.data import ExampleMaker, ExampleMix
from training.train import (Batches, TrainConfig, batch_source, check_lineage, checkpoint_step, train_model,
                                   untie_embeddings)

pytestmark = pytest.mark.model

CHUNKS = ["def total(values, start=0):\n    result = start\n    for value in values:\n        result += value\n"
          "    return result\n", "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n"]


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.from_file(str(TARGET_DIR / "tokenizer.json"))


def tiny_model(vocab_size: int) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                        max_position_embeddings=256, tie_word_embeddings=True))


def batches(tokenizer, seed: int = 0) -> Batches:
    rng = random.Random(seed)
    return Batches(CHUNKS, ExampleMaker(tokenizer, ExampleMix(fim=0.0, copy=0.5, edit=0.0), rng), 64, rng)


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_from_this_process_or_workers_have_the_training_shape(tokenizer, workers):
    next_batch = batch_source(batches(tokenizer), 3, workers, seed=1)
    for _ in range(3):
        ids, weights = next_batch()
        assert ids.shape == weights.shape == (3, 65) and ids.dtype == torch.int64
        assert (weights >= 0).all() and weights.sum() > 0


def test_training_steps_checkpoint_resume_and_learn(tokenizer, tmp_path):
    model = tiny_model(tokenizer.get_vocab_size())
    checkpoint, log = tmp_path / "m.pt", tmp_path / "log.jsonl"
    cfg = TrainConfig(minutes=5, max_steps=4, context=64, batch_size=4, lr=3e-3, warmup_steps=1, log_every=2)
    record = train_model(model, batches(tokenizer), cfg, "tiny", checkpoint=checkpoint, log_path=log)
    assert record["steps"] == 4 and record["train_tokens"] == 4 * 4 * 64 and checkpoint.exists()
    assert checkpoint_step(checkpoint) == 4 and checkpoint_step(tmp_path / "none.pt") == 0
    first_loss = json.loads(log.read_text().splitlines()[0])["loss_ema"]
    # resumed: continues at step 4 from the saved state, up to the new cap
    resumed = tiny_model(tokenizer.get_vocab_size())
    cfg = TrainConfig(minutes=5, max_steps=60, context=64, batch_size=4, lr=3e-3, warmup_steps=1, log_every=2)
    record = train_model(resumed, batches(tokenizer), cfg, "tiny", checkpoint=checkpoint, log_path=log)
    assert record["steps"] == 60 and record["train_tokens"] == 60 * 4 * 64
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(2, 61, 2))
    assert records[-1]["loss_ema"] < first_loss - 1.0  # two code chunks, repeated: learnt


def test_learning_rate_warms_up_again_when_a_resumed_run_changes_phase(tokenizer, tmp_path):
    checkpoint, log = tmp_path / "m.pt", tmp_path / "log.jsonl"
    cfg = TrainConfig(minutes=5, max_steps=4, context=64, batch_size=2, lr=1e-3, warmup_steps=4, log_every=1,
                      schedule="constant")
    train_model(tiny_model(tokenizer.get_vocab_size()), batches(tokenizer), cfg, "tiny", checkpoint=checkpoint,
                log_path=log, phase={"data": "a"})
    same = train_model(tiny_model(tokenizer.get_vocab_size()), batches(tokenizer), replace(cfg, max_steps=6),
                       "tiny", checkpoint=checkpoint, log_path=log, phase={"data": "a"})
    changed = train_model(tiny_model(tokenizer.get_vocab_size()), batches(tokenizer), replace(cfg, max_steps=10),
                          "tiny", checkpoint=checkpoint, log_path=log, phase={"data": "b"})
    lrs = [json.loads(line)["lr"] for line in log.read_text().splitlines()]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3,  # phase a warms up
                                 1e-3, 1e-3,  # resumed within phase a: no new warm-up
                                 2.5e-4, 5e-4, 7.5e-4, 1e-3])  # phase b from step 6 warms up again
    assert len(same["phases"]) == 1 and changed["phases"][-1]["from_step"] == 6


def test_distillation_fits_the_teacher_distribution_not_the_data(tokenizer):
    """With a teacher, the loss is KL(teacher || model): the student moves toward the teacher's
    distributions (and the KL, unlike a cross-entropy with the data, can reach zero)."""
    from training.train import _distillation_loss

    vocab = tokenizer.get_vocab_size()
    teacher = tiny_model(vocab)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in teacher.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5)  # a teacher unlike the student's init
    teacher.eval()
    student = tiny_model(vocab)
    probe = batches(tokenizer, seed=5)(4)[0][:, :-1]  # (4, 64)

    def kl() -> float:
        with torch.no_grad():
            return _distillation_loss(teacher, probe, student(input_ids=probe).logits, False).mean().item()

    # the KL of a model to itself is zero
    assert abs(_distillation_loss(teacher, probe, teacher(input_ids=probe).logits, False).mean().item()) < 1e-4
    before = kl()
    cfg = TrainConfig(minutes=5, max_steps=40, context=64, batch_size=4, lr=3e-3, warmup_steps=1)
    train_model(student, batches(tokenizer), cfg, "tiny", teacher=teacher)
    distilled = kl()
    student = tiny_model(vocab)
    train_model(student, batches(tokenizer), cfg, "tiny")  # the same steps on the data instead
    assert distilled < 0.8 * before and distilled < kl() - 0.5


def test_a_resumed_run_must_continue_from_the_model_its_checkpoint_started_from(tmp_path):
    """Resuming from a model exported by the stopped run itself would count its steps twice."""
    check_lineage(tmp_path, "target", 9500, resuming=False)  # a new run records where it started
    check_lineage(tmp_path, "target", 9500, resuming=True)  # the same start: fine
    with pytest.raises(ValueError, match="9500 steps.*10000"):
        check_lineage(tmp_path, "target", 10000, resuming=True)
    check_lineage(tmp_path, "target", 10000, resuming=False)  # a new run may start anywhere
    check_lineage(tmp_path, "target", 10000, resuming=True)


def test_untied_embeddings_start_equal_train_apart_and_survive_a_save(tokenizer, tmp_path):
    """Untying changes no output at first; training then moves the output layer apart from the input
    embeddings, and a saved model reloads untied with both matrices."""
    model = tiny_model(tokenizer.get_vocab_size()).eval()
    input_ids = batches(tokenizer, seed=3)(2)[0]  # (2, 65)
    with torch.no_grad():
        before = model(input_ids=input_ids).logits  # (2, 65, V)
    assert untie_embeddings(model) and not untie_embeddings(model)  # a second call finds it untied
    with torch.no_grad():
        assert torch.equal(model(input_ids=input_ids).logits, before)
    train_model(model, batches(tokenizer), TrainConfig(minutes=5, max_steps=5, context=64, batch_size=2, lr=3e-3,
                                                      warmup_steps=1), "tiny")
    embedding, output = model.get_input_embeddings().weight, model.lm_head.weight
    assert not torch.equal(embedding, output)
    model.save_pretrained(tmp_path)
    reloaded = Qwen2ForCausalLM.from_pretrained(tmp_path)
    assert not reloaded.config.tie_word_embeddings
    assert torch.equal(reloaded.lm_head.weight, output) and torch.equal(reloaded.get_input_embeddings().weight, embedding)


def test_a_checkpoint_resumes_only_into_a_model_tied_as_it_was(tokenizer, tmp_path):
    """A resume with the other --untie-embeddings setting gets a clear error, in both directions."""
    cfg = TrainConfig(minutes=5, max_steps=3, context=64, batch_size=2, lr=3e-3, warmup_steps=1)

    def model(tied: bool) -> Qwen2ForCausalLM:
        built = tiny_model(tokenizer.get_vocab_size())
        if not tied:
            untie_embeddings(built)
        return built
    for tied in (False, True):
        checkpoint = tmp_path / f"tied-{tied}.pt"
        train_model(model(tied), batches(tokenizer), cfg, "tiny", checkpoint=checkpoint)
        with pytest.raises(ValueError, match="--untie-embeddings"):
            train_model(model(not tied), batches(tokenizer), replace(cfg, max_steps=4), "tiny", checkpoint=checkpoint)
        assert train_model(model(tied), batches(tokenizer), replace(cfg, max_steps=4), "tiny",
                           checkpoint=checkpoint)["steps"] == 4
