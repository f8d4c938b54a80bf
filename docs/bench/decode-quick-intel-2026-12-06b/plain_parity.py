"""Plain greedy decoding of the 1.5B's Q4_K_M file three ways on the quick edit prompts, interleaved,
two rounds: llama-server (the peer build, 2 threads, one slot, no prompt cache), our engine
(``bench.decode.run_ours`` with ``--engine llama.cpp``: a new state, prefill, one-token passes) and a
bare loop over ``LlamaCppState.forward``. Prints the summed wall seconds after each prompt.

    python docs/bench/decode-quick-intel-2026-12-06b/plain_parity.py [server-first | ours-first]
"""
import sys
import time

import torch

from bench import llama_cpp
from bench.decode import run_ours
from bench.workloads import workloads
from decoding.engine import Engine
from decoding.types import EngineConfig

ORDER = sys.argv[1] if len(sys.argv) > 1 else "server-first"
engine = Engine.load(EngineConfig(model="qwen2.5-coder-1.5b", draft_model="none", engine="llama.cpp"))
model = engine.target.model
prompts = workloads(engine.tokenizer, True, 0, "2026", ("edit",))["edit"]
server = llama_cpp.LlamaServer(llama_cpp.gguf_path("qwen2.5-coder-1.5b"), ["-np", "1"], threads=2).start()
seconds = {"server": 0.0, "engine": 0.0, "bare loop": 0.0}


def on_server(prompt, new):
    seconds["server"] += llama_cpp.complete(server, prompt, new, ignore_eos=True).wall_ms / 1000


def on_engine(prompt, new):
    seconds["engine"] += run_ours(engine, "none", prompt, new, 0)[1]
    start, state = time.perf_counter(), model.new_state()
    state.forward(prompt[:-1], logits_to_keep=1)
    token = prompt[-1]
    for _ in range(new):
        token = int(torch.argmax(state.forward([token])[-1]))
    seconds["bare loop"] += time.perf_counter() - start


try:
    for round_ in range(2):
        for prompt, new in prompts:
            for run in ((on_server, on_engine) if ORDER == "server-first" else (on_engine, on_server)):
                run(prompt, new)
            print(ORDER, round_, len(prompt), {k: round(v, 2) for k, v in seconds.items()}, flush=True)
finally:
    server.stop()
