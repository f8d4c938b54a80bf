import sys, time, cProfile, pstats
sys.path.insert(0, '.')  # run from the repository root
from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.types import GenerationConfig
from bench.workloads import workloads
engine = Engine.load(EngineConfig(model='qwen2.5-coder-1.5b', draft_model='none', engine='llama.cpp'))
prompt, n = workloads(engine.tokenizer, True, 0, '2026', ('edit',))['edit'][0]
cfg = GenerationConfig(max_new_tokens=96, max_draft_tokens=32, stop_token_ids=frozenset())
engine.reset_caches(); engine.generate(prompt, cfg, 'none')  # warm
st = engine.target.model.new_state(); st.forward(prompt[:-1])
t = time.perf_counter()
for tok in prompt[-1:] + list(range(1000, 1095)):
    st.forward([tok])
raw = (time.perf_counter() - t) / 96 * 1000
engine.reset_caches()
pr = cProfile.Profile(); pr.enable()
g = engine.generate(prompt, cfg, 'none')
pr.disable()
print('raw forward per token ms', round(raw, 1), 'loop', g.stats.ms)
pstats.Stats(pr).sort_stats('tottime').print_stats(14)
