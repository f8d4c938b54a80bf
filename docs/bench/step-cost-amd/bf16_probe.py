"""Which bfloat16 matrix product torch runs on this CPU, and how fast: a probe for the AMD EPYC gap.

On the AMD EPYC (Zen 4) the 1.5B's bfloat16 one-token step read its 3.55 GB at about 14 GB/s (258.8 ms),
while llama.cpp read its Q4_K_M file at about 25 GB/s (44.2 ms); on the Intel Xeon torch reached about
18 GB/s (200.8 ms). This times ``F.linear`` in bfloat16 on the 1.5B's weight shapes at M rows, with
oneDNN (torch's default) and without it, and asks oneDNN which kernel it ran (``ONEDNN_VERBOSE``), so
a session on that machine sees at once whether the slow path is a kernel choice. On the Intel Xeon
oneDNN runs ``brg_matmul:avx10_1_512_amx`` (AMX) for every M; Zen 4 has no AMX. It also times the
int8 weight-only kernel that ``int8-hybrid`` (and so ``quantization: auto``) runs for short passes.

Each timing cycles through copies of the layer's weights that together hold at least twice the
last-level cache (the Intel Xeon's VM reports 300 MiB of L3, more than one layer's 94 MB in bfloat16),
so the products read their weights from memory, as a model's step does, not from cache; the runs
before 2026-12-06 (``bf16_probe_intel.json``) timed one copy.

Run (repository root, about a minute)::

    python docs/bench/step-cost-amd/bf16_probe.py [--threads 2] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

#: (out, in) of the 1.5B's matrices in one layer: q, k, v, o, gate, up, down.
LAYER_SHAPES = ((1536, 1536), (256, 1536), (256, 1536), (1536, 1536), (8960, 1536), (8960, 1536), (1536, 8960))
ROWS = (1, 2, 4, 16, 32)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def last_level_cache_bytes() -> int:
    """The largest CPU cache's size in bytes (sysfs), or 64 MiB where this Linux does not say."""
    sizes = []
    for index in range(8):
        try:
            with open(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size") as handle:
                text = handle.read().strip()
        except OSError:
            break
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KMG")) * unit)
    return max(sizes, default=64 << 20)


def copies_beyond_cache(weight_bytes: int) -> int:
    """How many copies of ``weight_bytes`` of weights hold at least twice the last-level cache."""
    return max(2, -(-2 * last_level_cache_bytes() // weight_bytes))


def time_products(torch, product, layers: list, inputs: dict, repeats: int) -> float:
    """Median ms of one layer's products, cycling through ``layers`` (copies of one layer's weights, each a
    list of ``(in_features, weight args)``) so each timed layer reads its weights from memory."""
    spent = []
    with torch.inference_mode():
        for round_index in range(repeats + len(layers)):
            layer = layers[round_index % len(layers)]
            started = time.perf_counter()
            for width, weight in layer:
                product(inputs[width], *weight)
            spent.append(1000 * (time.perf_counter() - started))
    return statistics.median(spent[len(layers):])  # a first cycle of warm-ups: oneDNN builds a kernel per shape


def time_layer(torch, rows: int, repeats: int, dtype) -> float:
    """Median ms of one layer's seven products over ``rows`` input rows (weights of ``dtype``)."""
    generator = torch.Generator().manual_seed(0)
    one = [torch.randn(shape, generator=generator).to(dtype) for shape in LAYER_SHAPES]
    copies = copies_beyond_cache(sum(w.numel() * w.element_size() for w in one))
    layers = [[(w.shape[1], (w if i == 0 else w.clone(),)) for w in one] for i in range(copies)]
    inputs = {shape[1]: torch.randn(rows, shape[1], generator=generator).to(dtype) for shape in LAYER_SHAPES}
    return time_products(torch, torch.nn.functional.linear, layers, inputs, repeats)


def time_layer_int8(torch, rows: int, repeats: int) -> float:
    """Median ms of the same seven products through PyTorch's weight-only int8 kernel
    (``aten._weight_int8pack_mm``, bfloat16 activations: what ``int8-hybrid`` runs for short passes)."""
    generator = torch.Generator().manual_seed(0)
    one = [(torch.randint(-127, 128, shape, generator=generator, dtype=torch.int8),
            (torch.rand(shape[0], generator=generator) / 100).bfloat16()) for shape in LAYER_SHAPES]
    copies = copies_beyond_cache(sum(q.numel() for q, _ in one))
    layers = [[(q.shape[1], (q if i == 0 else q.clone(), s)) for q, s in one] for i in range(copies)]
    inputs = {shape[1]: torch.randn(rows, shape[1], generator=generator).bfloat16() for shape in LAYER_SHAPES}
    return time_products(torch, torch.ops.aten._weight_int8pack_mm, layers, inputs, repeats)


def bf16_supported(torch) -> bool | None:
    """Whether torch finds oneDNN's bfloat16 kernels usable here (``None``: this torch cannot say)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return None


def amx_usable(torch) -> bool | None:
    """Whether the kernel let this process use AMX tiles (torch asks as oneDNN does; ``None``: unknown)."""
    try:
        return bool(torch._C._cpu._init_amx())
    except (AttributeError, RuntimeError):
        return None


def onednn_kernels(rows: int) -> list[str]:
    """The oneDNN primitives a bfloat16 product of ``rows`` rows runs (``ONEDNN_VERBOSE=1`` in a child)."""
    code = ("import torch; w = torch.randn(8960, 1536).bfloat16(); x = torch.randn(%d, 1536).bfloat16()\n"
            "with torch.inference_mode():\n    [torch.nn.functional.linear(x, w) for _ in range(2)]" % rows)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ONEDNN_VERBOSE": "1"})
    lines = [line for line in done.stdout.splitlines() if line.startswith("onednn_verbose") and ",exec," in line]
    return sorted({line.split(",")[6] for line in lines}) or ["no oneDNN primitive ran"]  # the implementation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    layer_bytes = 2 * sum(out * inp for out, inp in LAYER_SHAPES)
    report = {"cpu": cpu_name(), "torch": torch.__version__, "threads": args.threads,
              "capability": torch.backends.cpu.get_cpu_capability(),
              "mkldnn_bf16_supported": bf16_supported(torch), "amx_usable": amx_usable(torch),
              "last_level_cache_bytes": last_level_cache_bytes(), "rows": {}}
    for rows in ROWS:
        default = time_layer(torch, rows, args.repeats, torch.bfloat16)
        with torch.backends.mkldnn.flags(enabled=False):
            without = time_layer(torch, rows, args.repeats, torch.bfloat16)
        float32 = time_layer(torch, rows, args.repeats, torch.float32)
        int8 = time_layer_int8(torch, rows, args.repeats)
        report["rows"][rows] = {"bf16_ms": round(default, 3), "bf16_without_onednn_ms": round(without, 3),
                                "float32_ms": round(float32, 3), "int8_weight_only_ms": round(int8, 3),
                                "bf16_GB_per_s": round(layer_bytes / default / 1e6, 2),
                                "float32_GB_per_s": round(2 * layer_bytes / float32 / 1e6, 2),
                                "int8_GB_per_s": round(layer_bytes / 2 / int8 / 1e6, 2)}
        print(f"M={rows:2d}: one layer's products in bfloat16 {default:7.2f} ms ({layer_bytes / default / 1e6:5.1f} GB/s), "
              f"without oneDNN {without:7.2f} ms, float32 {float32:7.2f} ms ({2 * layer_bytes / float32 / 1e6:5.1f} GB/s), "
              f"int8 weights {int8:7.2f} ms ({layer_bytes / 2 / int8 / 1e6:5.1f} GB/s)", flush=True)
    report["onednn_kernels"] = {rows: onednn_kernels(rows) for rows in (1, 16)}
    for rows, kernels in report["onednn_kernels"].items():
        print(f"oneDNN, M={rows}: {'; '.join(kernels)}")
    print(json.dumps({k: v for k, v in report.items() if k not in ("rows", "onednn_kernels")}))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(report, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
