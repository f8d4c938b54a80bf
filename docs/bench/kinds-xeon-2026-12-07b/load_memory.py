"""Load the server's backend with the default settings, as `speclsp serve` does, and print its resident memory.

    python docs/bench/kinds-xeon-2026-12-07b/load_memory.py
    (env $(python -c "from decoding.weights.cpu_kinds import cpu_kind; print(' '.join(f'{k}={v}' for k, v in
     cpu_kind('avx512-vnni').environment().items()))") python docs/bench/kinds-xeon-2026-12-07b/load_memory.py)

Prints the auto choices (the log), then VmRSS, VmHWM (the peak), RssAnon and RssFile in MB from /proc/self/status,
and the tensors held by module type, dtype and where their bytes are (heap or anonymous memory, or a mapped
checkpoint file; a mapped file's size is listed, not its resident pages). Linux only. A checkpoint file that
another process maps too keeps its pages resident here (shared pages are not reclaimed).
"""

from __future__ import annotations

import collections
import logging
import os

import torch

from lsp_server.backends.loading import load_backend
from lsp_server.settings.parse import parse_settings


def status() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process, in MB."""
    wanted = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
    with open("/proc/self/status", encoding="utf-8") as lines:
        return {k: int(v.split()[0]) // 1024 for k, v in (line.split(":", 1) for line in lines) if k in wanted}


def regions() -> list[tuple[int, int, str]]:
    """(start, end, file name or "anon") of this process's mappings."""
    found = []
    with open("/proc/self/maps", encoding="utf-8") as lines:
        for line in lines:
            fields = line.split()
            start, end = (int(a, 16) for a in fields[0].split("-"))
            found.append((start, end, os.path.basename(fields[5]) if len(fields) > 5 else "anon"))
    return found


def tensors_by_kind(model_modules) -> collections.Counter:
    """Bytes of the distinct tensor storages the modules hold, by (module type, tensor name, dtype, where)."""
    maps, seen, held = regions(), set(), collections.Counter()
    for module in model_modules:
        named = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False),
                 *((f"attr:{k}", v) for k, v in vars(module).items() if isinstance(v, torch.Tensor))]
        for name, tensor in named:
            if tensor is None or tensor.untyped_storage().data_ptr() in seen:
                continue
            pointer = tensor.untyped_storage().data_ptr()
            seen.add(pointer)
            where = next((n for lo, hi, n in maps if lo <= pointer < hi), "?")
            held[(type(module).__name__, name, str(tensor.dtype), where)] += tensor.untyped_storage().nbytes()
    return held


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    backend = load_backend(parse_settings({})[0].backend_config())
    print("loaded:", status())
    engines = backend.values() if isinstance(backend, dict) else [backend]
    modules = [m for b in engines for m in b.engine.target.model.modules()]
    for (kind, name, dtype, where), size in tensors_by_kind(modules).most_common(12):
        print(f"{size / 1e6:9.0f} MB  {kind}.{name} {dtype} in {where}")


if __name__ == "__main__":
    main()
