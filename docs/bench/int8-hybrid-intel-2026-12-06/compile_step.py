"""A pass of M tokens of a real model, eager or with its decoder under ``torch.compile(dynamic=True)``.

Loads the model as the server does (``decoding.weights.loading.load_model``), prefills 500 tokens in two
pieces, then times passes of 1 and 4 tokens (medians of 15, the cache cut back after each). Run from
the repository root, one process per row, alternating::

    PYTHONPATH=. python docs/bench/int8-hybrid-intel-2026-12-06/compile_step.py qwen2.5-coder-0.5b int8-hybrid eager
    PYTHONPATH=. python docs/bench/int8-hybrid-intel-2026-12-06/compile_step.py qwen2.5-coder-0.5b int8-hybrid compile

"warm-up" is the first three passes: for ``compile``, tracing and compiling (less with inductor's cache
on disk from an earlier run).
"""

import statistics
import sys
import time

import torch

from decoding.kv_cache import cache_state
from decoding.weights.loading import load_model

name, quantization, mode = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(2)
model = load_model(name, device="cpu", dtype="auto", quantization=quantization).model
if mode == "compile":
    model.model.forward = torch.compile(model.model.forward, dynamic=True)
state = cache_state(model)
prompt = list(range(1000, 1500))
state.forward(prompt[:200], logits_to_keep=1)
state.forward(prompt[200:], logits_to_keep=1)


def one_pass(tokens: int) -> None:
    state.forward([1234] * tokens, logits_to_keep=tokens)
    state.rollback(len(prompt))


started = time.perf_counter()
for _ in range(3):
    one_pass(1)
print(f"warm-up {time.perf_counter() - started:.1f} s", flush=True)
for tokens in (1, 4):
    spent = []
    for _ in range(15):
        started = time.perf_counter()
        one_pass(tokens)
        spent.append(time.perf_counter() - started)
    print(f"{name} {quantization} {mode}: M={tokens} median {1000 * statistics.median(spent):.1f} ms", flush=True)
