"""The kinds of CPU the engine is measured on, and how one is emulated on a CPU that can run it.

A kind is a set of instruction sets: ``avx512-vnni`` (Intel Ice Lake: AVX-512 with VNNI, no bfloat16
instructions, no AMX) and ``avx2`` (a laptop without AVX-512: AVX2, FMA, F16C). ``native`` is this CPU
as it is. A kind is emulated on a CPU that has every flag it needs (:attr:`CpuKind.needs`) by

* hiding the flags it lacks from :func:`decoding.weights.cpu_flags.cpu_flags` (so ``dtype: auto`` and
  the llama.cpp build flags follow the kind), and saying so in
  :func:`decoding.weights.cpu_flags.cpu_name` (so figures measured on the kind are cached apart), and
* capping the instruction sets of torch's kernels through the environment (:attr:`CpuKind.caps`):
  ``ATEN_CPU_CAPABILITY`` (ATen's vectorised kernels), ``ONEDNN_MAX_CPU_ISA`` (oneDNN, torch's bfloat16
  matmuls on AVX-512 CPUs) and ``MKL_ENABLE_INSTRUCTIONS`` (MKL, torch's float32 matmuls; Intel CPUs
  only). The libraries read them once, when torch is imported: they must be set before, in the
  environment a process starts with (``speclsp bench ... --cpu-kind`` starts such a process).

The kind travels to child processes as :data:`KIND_VARIABLE` (``SPECLSP_CPU_KIND``). Emulation gives
the kind's kernels, not its memory bandwidth, core count or clock; fbgemm (``torch.ops.quantized``)
picks its instruction set by itself and is not capped (docs/cpu-kinds.md).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

#: The environment variable naming the emulated kind (unset, empty or ``native``: none).
KIND_VARIABLE = "SPECLSP_CPU_KIND"


class CpuKindError(ValueError):
    """A kind that does not exist, or that this CPU cannot run (its message names the missing flags)."""


@dataclass(frozen=True)
class CpuKind:
    """One kind of CPU.

    Attributes:
        name: as ``--cpu-kind`` takes it.
        description: the CPUs it stands for.
        needs: ``/proc/cpuinfo`` flags this CPU must have to emulate the kind (its kernels need them).
        hides: ``fnmatch`` patterns of flags the kind lacks, hidden from :func:`cpu_flags` under it.
        caps: environment variables that cap torch's kernels at the kind (set before torch is imported).
    """

    name: str
    description: str
    needs: frozenset[str] = frozenset()
    hides: tuple[str, ...] = ()
    caps: Mapping[str, str] = field(default_factory=dict)

    def visible_flags(self, native_flags: frozenset[str]) -> frozenset[str]:
        """``native_flags`` without the ones this kind hides."""
        return frozenset(flag for flag in native_flags
                         if not any(fnmatch.fnmatchcase(flag, pattern) for pattern in self.hides))

    def missing_flags(self, native_flags: frozenset[str]) -> list[str]:
        """The flags this kind needs that ``native_flags`` lacks, sorted (empty: it can be emulated)."""
        return sorted(self.needs - native_flags)

    def environment(self) -> dict[str, str]:
        """The caps and :data:`KIND_VARIABLE`, for a child process's environment; ``{}`` for ``native``."""
        return {**self.caps, KIND_VARIABLE: self.name} if self.name != NATIVE.name else {}


NATIVE = CpuKind("native", "this machine's CPU as it is: no caps")
AVX512_VNNI = CpuKind(
    "avx512-vnni", "Intel Ice Lake (Xeon 3rd generation, client 10th-11th): AVX-512 with VNNI, no bfloat16 "
                   "instructions, no AMX",
    needs=frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}),
    hides=("avx512_bf16", "avx512_fp16", "amx_*", "avx_vnni*", "avx_ne_convert", "avx_ifma", "avx10*"),
    # MKL's AVX512_E2 is its Ice Lake server code path (AVX-512 with VNNI, VAES, VPCLMULQDQ; no bfloat16);
    # where the CPU lacks part of it, MKL falls back to the best path it has, still below the cap.
    caps={"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
          "MKL_ENABLE_INSTRUCTIONS": "AVX512_E2"})
AVX2 = CpuKind(
    "avx2", "a laptop or desktop without AVX-512 (AMD Zen 2/3, Intel client CPUs from the 12th generation on): "
            "AVX2, FMA, F16C",
    needs=frozenset({"avx2", "fma", "f16c"}),
    hides=("avx512*", "amx_*", "avx_vnni*", "avx_ne_convert", "avx_ifma", "avx10*"),
    caps={"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"})

#: Every kind by name, ``native`` first.
KINDS: dict[str, CpuKind] = {kind.name: kind for kind in (NATIVE, AVX512_VNNI, AVX2)}


def cpu_kind(name: str) -> CpuKind:
    """The kind called ``name``.

    Raises:
        CpuKindError: no such kind (the message lists them).
    """
    try:
        return KINDS[name]
    except KeyError:
        raise CpuKindError(f"unknown CPU kind {name!r}; the kinds are {', '.join(KINDS)}") from None


def emulated_kind(environ: Mapping[str, str] | None = None) -> CpuKind | None:
    """The kind ``environ`` (default: this process's environment) asks for in :data:`KIND_VARIABLE`, or
    ``None`` where it asks for none (unset, empty or ``native``).

    Raises:
        CpuKindError: an unknown kind.
    """
    name = (os.environ if environ is None else environ).get(KIND_VARIABLE, "")
    kind = cpu_kind(name) if name else NATIVE
    return None if kind is NATIVE else kind


def require_runnable(kind: CpuKind, native_flags: frozenset[str], cpu: str = "this CPU") -> None:
    """Refuse a kind ``cpu`` (whose flags are ``native_flags``) cannot run: emulation only takes
    instructions away.

    Raises:
        CpuKindError: flags the kind needs are missing (named in the message).
    """
    missing = kind.missing_flags(native_flags)
    if missing:
        raise CpuKindError(f"CPU kind {kind.name} cannot be emulated on {cpu}: it lacks {', '.join(missing)} "
                           f"(the kind needs {', '.join(sorted(kind.needs))}), and emulation only takes "
                           "instructions away; measure that kind on a CPU that has them")
