"""Which instruction sets torch's CPU kernels run with in this environment, read from the libraries' own logs.

:func:`probe` starts a Python process with this process's environment plus ``ONEDNN_VERBOSE=1`` and
``MKL_VERBOSE=1`` and runs a small bfloat16 and float32 matmul (16x512 by 512x512, ``F.linear`` and
``matmul``) and a small float32 convolution (batch 2: oneDNN's, so that oneDNN states the ISA it dispatches to
even where torch sends no matmul to it, e.g. bfloat16 on a CPU without AVX-512). Both libraries print to
stdout: oneDNN an ``info,cpu,isa:`` line (the highest ISA it will use, after ``ONEDNN_MAX_CPU_ISA``)
and one ``exec`` line per primitive run, naming its implementation (``brg_matmul:avx512_core_amx``,
``jit:avx2``, ``gemm:jit``); MKL a first line naming its code path (``Intel(R) Advanced Vector
Extensions 2 (Intel(R) AVX2) enabled processors``; on a non-Intel CPU ``Intel(R) Architecture
processors``: MKL then picks its path itself and ``MKL_ENABLE_INSTRUCTIONS`` does not apply).

:func:`above_kind` says which of those readings exceed a kind's cap: a cap that did not take effect.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

PROBE_MARK = "PROBE "
PROBE_CODE = f"""
import json, torch
x, w = torch.randn(16, 512), torch.randn(512, 512)
for dtype in (torch.bfloat16, torch.float32):
    torch.nn.functional.linear(x.to(dtype), w.to(dtype)); torch.matmul(x.to(dtype), w.to(dtype))
torch.nn.functional.conv2d(torch.randn(2, 32, 16, 16), torch.randn(32, 32, 3, 3))
print({PROBE_MARK!r} + json.dumps({{"aten_capability": torch.backends.cpu.get_cpu_capability(),
                                   "torch": torch.__version__}}), flush=True)
"""
PROBE_TIMEOUT_S = 120

#: ATen's capabilities on x86, lowest first (``torch.backends.cpu.get_cpu_capability()``, upper case).
ATEN_ORDER = ("DEFAULT", "AVX2", "AVX512")
#: Per kind: words in oneDNN's ISA line, in the instruction set an implementation names (the text after
#: its ``:``, e.g. ``brg_matmul:avx512_core_amx``; a data type there, as in ``gemm:jit:bf16``, the bfloat16
#: product oneDNN emulates below ``avx512_core_bf16``, names none) and in MKL's code path, that mean an
#: instruction set above the kind (case-insensitive).
ABOVE = {
    "avx2": {"onednn": ("avx-512", "avx512", "amx", "dl boost", "avx2_vnni", "avx10"),
             "implementation": ("avx512", "amx", "avx2_vnni", "avx10"),
             "mkl": ("avx-512", "avx512", "amx", "advanced matrix")},
    "avx512-vnni": {"onednn": ("bfloat16", "bf16", "float16", "fp16", "amx", "avx10"),
                    "implementation": ("avx512_core_bf16", "avx512_core_fp16", "amx", "avx10"),
                    "mkl": ("bfloat16", "bf16", "float16", "amx", "advanced matrix")},
}

_ONEDNN_ISA = re.compile(r"(?:\bisa:|Detected ISA is )(.+)$")
_SOURCE_DTYPE = re.compile(r"\bsrc[:_]([a-z0-9]+)")
_MKL_PATH = re.compile(r"for Intel\(R\) 64 architecture (.+?),\s*(?:Lnx|Win|Mac|Linux)\b")


def parse_onednn(lines: list[str]) -> dict:
    """oneDNN's verbose ``lines`` -> ``{"isa": str | None, "ran": {dtype: [primitive implementation, ...]}}``
    (``dtype`` as oneDNN writes the source's: ``bf16``, ``f32``; reorders left out; each pair once)."""
    isa, ran = None, {}
    for line in lines:
        if not line.startswith(("onednn_verbose", "dnnl_verbose")):
            continue
        fields = line.strip().split(",")
        if "exec" not in fields:
            found = _ONEDNN_ISA.search(line.strip())
            isa = found.group(1).strip() if found and "cpu" in fields else isa
            continue
        at = fields.index("exec")
        if len(fields) < at + 5 or fields[at + 1] != "cpu" or fields[at + 2] == "reorder":
            continue
        dtype = _SOURCE_DTYPE.search(",".join(fields[at + 4:]))
        done = f"{fields[at + 2]} {fields[at + 3]}"
        names = ran.setdefault(dtype.group(1) if dtype else "?", [])
        if done not in names:
            names.append(done)
    return {"isa": isa, "ran": ran}


def parse_mkl(lines: list[str]) -> str | None:
    """MKL's code path from its first verbose line (``MKL_VERBOSE oneMKL ... for Intel(R) 64 architecture
    PATH, Lnx ...``), or ``None`` where MKL printed none (nothing went through it)."""
    for line in lines:
        if line.startswith("MKL_VERBOSE") and " architecture " in line:
            found = _MKL_PATH.search(line)
            return found.group(1).strip() if found else line.strip()
    return None


def probe(environ: dict[str, str] | None = None) -> dict:
    """Run :data:`PROBE_CODE` in a child with ``environ`` (default: this process's) and the verbose
    switches; ``{"aten_capability", "torch", "onednn": parse_onednn, "mkl": parse_mkl}``, or
    ``{"error": why}`` where the child failed or printed no result."""
    env = {**(os.environ if environ is None else environ), "ONEDNN_VERBOSE": "1", "MKL_VERBOSE": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", PROBE_CODE], env=env, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"the probe ran over {PROBE_TIMEOUT_S} s"}
    lines = done.stdout.splitlines()
    result = next((line for line in lines if line.startswith(PROBE_MARK)), None)
    if done.returncode != 0 or result is None:
        return {"error": f"the probe failed (exit status {done.returncode}): {done.stderr.strip()[-500:]}"}
    return {**json.loads(result[len(PROBE_MARK):]), "onednn": parse_onednn(lines), "mkl": parse_mkl(lines)}


def above_kind(kind: str, aten_cap: str, reading: dict) -> list[str]:
    """What in ``reading`` (:func:`probe`'s) runs above kind ``kind`` whose ATen cap is ``aten_cap``
    (``avx2``, ``avx512``): one sentence each; empty where every reading is at or below the kind."""
    found = []
    seen = str(reading.get("aten_capability", "")).upper()
    if seen not in ATEN_ORDER:
        found.append(f"ATen reports capability {seen or 'none'}, which is not one of {', '.join(ATEN_ORDER)}")
    elif ATEN_ORDER.index(seen) > ATEN_ORDER.index(aten_cap.upper()):
        found.append(f"ATen runs {seen} kernels, above the kind's {aten_cap.upper()}")
    words = ABOVE[kind]
    onednn = reading.get("onednn") or {}
    isa = onednn.get("isa") or ""
    if any(word in isa.lower() for word in words["onednn"]):
        found.append(f"oneDNN runs {isa!r}, above the kind")
    for name in (name for names in onednn.get("ran", {}).values() for name in names):
        if any(word in name.lower().partition(":")[2] for word in words["implementation"]):
            found.append(f"oneDNN runs {name!r}, above the kind")
    mkl = reading.get("mkl") or ""
    if any(word in mkl.lower() for word in words["mkl"]):
        found.append(f"MKL runs its {mkl!r} code path, above the kind")
    return found
