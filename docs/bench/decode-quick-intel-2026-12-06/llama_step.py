import sys, time, os, statistics
sys.path.insert(0, '.')  # run from the repository root
import decoding.weights.llama_cpp_model as lm
if len(sys.argv) > 2:
    lm.BATCH_TOKENS = int(sys.argv[2])
from decoding.weights.llama_cpp_model import LlamaCppModel
import llama_cpp.llama_cpp as m
path = sys.argv[1]
model = LlamaCppModel(path, threads=2)
print('lib', m._lib._name, 'batch', lm.BATCH_TOKENS)
import random
rng = random.Random(0)
ids = [rng.randrange(1000, 30000) for _ in range(700)]
def timed(fn, n=5):
    xs = []
    for _ in range(n):
        t = time.perf_counter(); fn(); xs.append(1000*(time.perf_counter()-t))
    return min(xs), statistics.median(xs)
st = model.new_state()
t = time.perf_counter(); st.forward(ids[:512]); pre = 1000*(time.perf_counter()-t)
print(f'prefill 512: {pre:.0f} ms ({512000/pre:.1f} tok/s)')
for M in (1, 2, 4, 8, 16, 32):
    def f():
        st.forward(ids[512:512+M]); st.rollback(512)
    print(f'M={M}: min/median ms', ['%.1f' % x for x in timed(f, 7)])
