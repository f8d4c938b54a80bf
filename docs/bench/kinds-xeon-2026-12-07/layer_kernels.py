"""One layer's pass cost (ms) per kernel, float32 activations: dense float32, fbgemm float16 weights,
aten int8pack (weight-only int8, per-row scales). Run under the kind's caps."""
import json, sys, time, torch
from decoding.weights.fp16_weights import Fp16WeightLinear
torch.manual_seed(0)
def med(fn, x, n=15):
    for _ in range(3): fn(x)
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(x); ts.append(time.perf_counter()-t)
    ts.sort(); return 1000*ts[len(ts)//2]
rows=[]
for out_f, in_f in [(4864, 896), (896, 4864), (8960, 1536), (1536, 8960), (151936, 896)]:
    lin=torch.nn.Linear(in_f, out_f, bias=False)
    w=lin.weight.detach()
    scales=(w.abs().amax(1)/127).clamp(min=1e-8)
    q=torch.round(w/scales[:,None]).clamp(-127,127).to(torch.int8)
    fp16=Fp16WeightLinear(lin)
    for m in (1, 4, 16, 64, 128):
        x=torch.randn(m, in_f)
        with torch.inference_mode():
            r={"shape": f"{out_f}x{in_f}", "M": m,
               "f32": med(lambda a: torch.nn.functional.linear(a, w), x),
               "fp16w": med(fp16, x),
               "int8": med(lambda a: torch._weight_int8pack_mm(a, q, scales), x)}
        rows.append({k:(round(v,3) if isinstance(v,float) else v) for k,v in r.items()}); print(rows[-1], flush=True)
json.dump({"capability": torch.backends.cpu.get_cpu_capability(), "rows": rows}, open(sys.argv[1], "w"), indent=1)
