"""Run from the repository root with the kind's caps; its output: int8-activations-avx512-vnni.txt."""
import time, torch
def med(fn, x, n=15):
    for _ in range(3): fn(x)
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(x); ts.append(time.perf_counter()-t)
    ts.sort(); return round(1000*ts[len(ts)//2],3)
print(torch.backends.cpu.get_cpu_capability())
for out_f, in_f in [(4864, 896), (151936, 896)]:
    w=torch.randn(out_f,in_f)
    for dt in (torch.bfloat16, torch.float16):
        scales=(w.abs().amax(1)/127).to(dt)
        q=torch.randint(-127,127,(out_f,in_f),dtype=torch.int8)
        wd=w.to(dt)
        for m in (1,4,16,128):
            x=torch.randn(m,in_f,dtype=dt)
            with torch.inference_mode():
                print(out_f,in_f,dt,m,"int8",med(lambda a: torch._weight_int8pack_mm(a,q,scales),x),"dense",med(lambda a: torch.nn.functional.linear(a,wd),x), flush=True)
