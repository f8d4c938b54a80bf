"""The instruction sets and model name of the CPU this process runs on, read from ``/proc/cpuinfo`` (Linux, x86).

Detected, never assumed: the machines this project runs on differ (an Intel Xeon with AMX, an Intel
Ice Lake with AVX-512 but no bfloat16, an AMD EPYC whose VM shows AVX2 only), and a kernel built for
instructions the CPU lacks dies with SIGILL.
"""

from __future__ import annotations

import platform


def _first_field(name: str, path: str) -> str | None:
    """The value of the first ``name`` line of ``path`` (``/proc/cpuinfo`` layout), or ``None``."""
    try:
        with open(path, encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith(name):
                    return line.split(":", 1)[1]
    except OSError:
        pass
    return None


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The ``flags`` of the first processor in ``path`` (e.g. ``avx2``, ``avx512f``, ``avx512_bf16``,
    ``amx_bf16``); empty where the file is missing or names none (another OS, another architecture)."""
    return frozenset((_first_field("flags", path) or "").split())


def cpu_name(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (``path``), else what the platform says."""
    name = _first_field("model name", path)
    return name.strip() if name is not None else platform.processor() or platform.machine()
