import sys, torch
sys.path.insert(0, '.')  # run from the repository root
import decoding.weights.llama_cpp_model as lm
lm.BATCH_TOKENS = int(sys.argv[1])
from decoding.engine import Engine
from decoding.types import EngineConfig
from bench.workloads import workloads
from bench.decode import run_ours
from bench.noise import replay_logits
engine = Engine.load(EngineConfig(model='qwen2.5-coder-1.5b', draft_model='none', engine='llama.cpp'))
print(lm.loaded_library(), 'batch', lm.BATCH_TOKENS)
prompts = workloads(engine.tokenizer, True, 0, '2026', ('fim',))['fim']
model = engine.target.model
for i, (prompt, n) in enumerate(prompts):
    ref = run_ours(engine, 'none', prompt, n, 32)[0]
    step = replay_logits(model, prompt, ref, 1)
    out = []
    for chunk in (5, 17, 33):
        passes = replay_logits(model, prompt, ref + ref[-1:] * chunk, chunk)[: len(ref)]
        top = step.topk(2, dim=-1).indices
        lead_s = step.gather(1, top[:, :1]) - step.gather(1, top[:, 1:])
        lead_p = passes.gather(1, top[:, :1]) - passes.gather(1, top[:, 1:])
        out.append(f'{chunk}: {float((lead_s - lead_p).abs().max()):.3f}')
    print(i, 'max lead change', out, flush=True)
