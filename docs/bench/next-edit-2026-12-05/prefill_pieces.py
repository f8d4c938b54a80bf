"""The prefill rate of the 1.5B target by piece size (2026-12-05, quiet 2-core Intel Xeon, bfloat16):
after a 400-token prompt, the next 512 tokens fed in pieces of M; the best of 3 rounds.
Run from the repository root: .venv/bin/python docs/bench/next-edit-2026-12-05/prefill_pieces.py"""
import time

import torch
from transformers import DynamicCache

from decoding.weights.loading import load_model

model = load_model("qwen2.5-coder-1.5b").model
torch.manual_seed(0)
ids = torch.randint(100, 20000, (1, 1100))
with torch.inference_mode():
    for pieces in (32, 64, 128, 256, 512):
        rounds = []
        for _ in range(3):
            cache = DynamicCache()
            model(ids[:, :400], past_key_values=cache, use_cache=True, logits_to_keep=1)
            started = time.perf_counter()
            for position in range(400, 912, pieces):
                model(ids[:, position:position + pieces], past_key_values=cache, use_cache=True, logits_to_keep=1)
            rounds.append((time.perf_counter() - started) / (512 / pieces))
        best = min(rounds)
        print(f"pieces of {pieces}: {1000 * best:.0f} ms per piece, {pieces / best:.0f} tokens/s", flush=True)
