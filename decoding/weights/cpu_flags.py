"""The instruction sets and model name of the CPU this process runs on, read from ``/proc/cpuinfo`` (Linux, x86).

Detected, never assumed: the machines this project runs on differ (an Intel Xeon with AMX, an Intel
Ice Lake with AVX-512 but no bfloat16, an AMD EPYC whose VM shows AVX2 only), and a kernel built for
instructions the CPU lacks dies with SIGILL. Under an emulated kind of CPU (``$SPECLSP_CPU_KIND``,
:mod:`decoding.weights.cpu_kinds`) :func:`cpu_flags` and :func:`cpu_name` are the kind's.
"""

from __future__ import annotations

import platform

from decoding.weights.cpu_kinds import emulated_kind, require_runnable


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


def native_cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The ``flags`` of the first processor in ``path`` (e.g. ``avx2``, ``avx512f``, ``avx512_bf16``,
    ``amx_bf16``), whatever kind is emulated; empty where the file is missing or names none (another OS,
    another architecture)."""
    return frozenset((_first_field("flags", path) or "").split())


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The flags the engine may use: :func:`native_cpu_flags`, less those the emulated kind lacks
    (``$SPECLSP_CPU_KIND``, :meth:`decoding.weights.cpu_kinds.CpuKind.visible_flags`) where one is set.

    Raises:
        CpuKindError: ``$SPECLSP_CPU_KIND`` names an unknown kind, or one this CPU cannot run.
    """
    native = native_cpu_flags(path)
    kind = emulated_kind()
    if kind is None:
        return native
    require_runnable(kind, native, native_cpu_name(path))
    return kind.visible_flags(native)


def native_cpu_name(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (``path``), else what the platform says, whatever kind is emulated."""
    name = _first_field("model name", path)
    return name.strip() if name is not None else platform.processor() or platform.machine()


def cpu_vendor(path: str = "/proc/cpuinfo") -> str:
    """The CPU's ``vendor_id`` (``GenuineIntel``, ``AuthenticAMD``), or ``""`` where ``path`` names none."""
    return (_first_field("vendor_id", path) or "").strip()


def cpu_name(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (``path``), else what the platform says; under an emulated kind followed by
    ``(emulated KIND)``, e.g. ``AMD EPYC (emulated avx2)``, so figures measured on it are kept apart.

    Raises:
        CpuKindError: ``$SPECLSP_CPU_KIND`` names an unknown kind.
    """
    kind = emulated_kind()
    name = native_cpu_name(path)
    return name if kind is None else f"{name} (emulated {kind.name})"
