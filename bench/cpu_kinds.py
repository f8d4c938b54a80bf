"""``--cpu-kind native|avx512-vnni|avx2`` for the speed benches: measure as a kind of CPU this one can emulate.

A kind (:mod:`decoding.weights.cpu_kinds`) caps the instruction sets of torch's kernels through
environment variables the libraries read when torch is imported, so the measuring must happen in a
process started with them: :func:`run_as_kind` runs the same ``speclsp`` command line again in a child
with the caps and ``SPECLSP_CPU_KIND`` set (``bench decode``, ``bench lsp``: the server they start
inherits them); ``bench step-cost`` sets them on the child it starts per path (:func:`kind_environment`).

:func:`what_ran` is the record each bench writes beside its figures: the kind asked, whether emulated,
the native CPU and the flags that matter, the caps in the environment, and what the kernels actually
ran with (:func:`bench.kernel_probe.probe`: ATen's capability, oneDNN's ISA and implementations, MKL's
code path) and whether that stayed at or below the kind (``capped``; ``False`` comes with warnings, also
printed on stderr). What it cannot cap is named in ``not_capped``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping

from bench.kernel_probe import above_kind, probe
from decoding.weights.cpu_flags import cpu_vendor, native_cpu_flags, native_cpu_name
from decoding.weights.cpu_kinds import KIND_VARIABLE, KINDS, NATIVE, CpuKind, CpuKindError, cpu_kind, require_runnable

#: The flags :func:`what_ran` records (those the kinds, ``dtype: auto`` and the llama.cpp build look at).
FLAGS_THAT_MATTER = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
                     "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "avx_vnni")
FBGEMM_NOT_CAPPED = ("fbgemm (torch.ops.quantized.*: dynamic int8 linear) picks its instruction set itself; "
                     "no environment variable caps it")
MKL_NOT_INTEL = "MKL: MKL_ENABLE_INSTRUCTIONS applies on Intel CPUs only; on this CPU MKL picks its code path itself"


def add_argument(parser: argparse.ArgumentParser) -> None:
    """``--cpu-kind`` (default ``native``)."""
    parser.add_argument("--cpu-kind", default=NATIVE.name, choices=list(KINDS),
                        help="measure as this kind of CPU, emulated by capping the instruction sets of torch's "
                             "kernels in the measuring process (avx512-vnni: Intel Ice Lake, no bfloat16 or AMX; "
                             "avx2: no AVX-512); the output says what ran (docs/cpu-kinds.md)")


def checked_kind(name: str, environ: Mapping[str, str] | None = None) -> CpuKind:
    """The kind ``name``, refused where this CPU cannot run it, or where ``native`` is asked while the
    environment already names another kind.

    Raises:
        CpuKindError: an unknown kind, one this CPU cannot run (the missing flags named), or the conflict.
    """
    environ = os.environ if environ is None else environ
    kind = cpu_kind(name)
    inherited = environ.get(KIND_VARIABLE, "")
    if kind is NATIVE and inherited not in ("", NATIVE.name):
        raise CpuKindError(f"--cpu-kind native, but {KIND_VARIABLE}={inherited} is set in the environment: unset it, "
                           f"or ask for --cpu-kind {inherited}")
    require_runnable(kind, native_cpu_flags(), native_cpu_name())
    return kind


def kind_environment(kind: CpuKind, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's environment) with ``kind``'s caps and :data:`KIND_VARIABLE` set."""
    return {**(os.environ if environ is None else environ), **kind.environment()}


def run_as_kind(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int | None:
    """Where ``args.cpu_kind`` is emulated and its caps are not all in this process's environment, the
    exit status of the same command line (``args.argv``, set by :func:`lsp_server.cli.main`) run again
    by ``python -m lsp_server.cli`` with them; ``None``: measure in this process (``native``, or this is
    that child).

    Raises:
        CpuKindError: as :func:`checked_kind`; or the command line is unknown (not run through ``speclsp``).
    """
    environ = os.environ if environ is None else environ
    kind = checked_kind(args.cpu_kind, environ)
    wanted = kind.environment()
    if all(environ.get(name) == value for name, value in wanted.items()):
        return None
    argv = getattr(args, "argv", None)
    if argv is None:
        raise CpuKindError("--cpu-kind needs the speclsp command line to run again: run it as `speclsp bench ...`")
    print(f"[cpu kind] {kind.name}: running this command again with "
          + " ".join(f"{name}={value}" for name, value in wanted.items()), file=sys.stderr, flush=True)
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", *argv], env=kind_environment(kind, environ),
                          check=False).returncode


def what_ran(environ: Mapping[str, str] | None = None) -> dict:
    """The record of the kind this process measures as (``environ``'s :data:`KIND_VARIABLE`) and what its
    kernels ran with (see the module docstring); its warnings are printed on stderr too."""
    environ = os.environ if environ is None else environ
    kind = cpu_kind(environ.get(KIND_VARIABLE) or NATIVE.name)
    native = native_cpu_flags()
    reading = probe(dict(environ))
    record = {
        "cpu_kind": kind.name, "emulated": kind is not NATIVE, "cpu": native_cpu_name(),
        "native_flags": sorted(set(FLAGS_THAT_MATTER) & native),
        "kind_flags": sorted(set(FLAGS_THAT_MATTER) & kind.visible_flags(native)),
        "caps": {name: environ.get(name) for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                                       "MKL_ENABLE_INSTRUCTIONS")},
        "kernels": reading,
        "not_capped": [FBGEMM_NOT_CAPPED] + ([] if cpu_vendor() == "GenuineIntel" else [MKL_NOT_INTEL])
                      + llama_cpp_above(kind, kind.visible_flags(native)),
    }
    warnings = [f"the kernels could not be read: {reading['error']}"] if "error" in reading else []
    if kind is not NATIVE:
        warnings += [f"{name} is {environ.get(name)!r} in the environment, not the kind's {value!r}"
                     for name, value in kind.caps.items() if environ.get(name) != value]
        warnings += above_kind(kind.name, kind.caps["ATEN_CPU_CAPABILITY"], reading) if "error" not in reading else []
    record["capped"] = None if kind is NATIVE else not warnings
    record["warnings"] = warnings
    for warning in warnings:
        print(f"WARNING: --cpu-kind {kind.name}: {warning}"
              + (": these figures are NOT the kind's" if kind is not NATIVE else ""), file=sys.stderr)
    return record


def llama_cpp_above(kind: CpuKind, kind_flags: frozenset[str], stamp: Mapping | None = None) -> list[str]:
    """A sentence where the cached llama.cpp peer build (its ``stamp``, default: read from the cache) was
    built with instruction sets ``kind_flags`` lacks: ``llama-server`` and the ``model.engine: llama.cpp``
    setting run that build whatever the kind; empty where it is not built or stays within the kind."""
    from bench.llama_cpp_build import ISA_OPTIONS, STAMP, build_dir

    if stamp is None:
        try:
            stamp = json.loads((build_dir() / STAMP).read_text())
        except (OSError, ValueError):
            return []
    built = set(stamp.get("cmake_flags") or ())
    above = [option for flag, option in ISA_OPTIONS if f"-D{option}=ON" in built and flag not in kind_flags]
    return [f"llama.cpp: the cached build ({build_dir()}) has {', '.join(above)} on, above the {kind.name} kind; "
            f"llama.cpp rows run it as it is (build one for the kind: SPECLSP_CPU_KIND={kind.name} speclsp bench "
            "peers --build, which replaces it)"] if above else []


def label(record: Mapping) -> str:
    """One line for a figure's output: ``avx2, emulated on AMD EPYC (ATen AVX2, oneDNN Intel AVX2, MKL
    ...)``, ``native AMD EPYC (...)``; ``NOT CAPPED`` where the caps did not hold."""
    kernels = record.get("kernels", {})
    onednn = (kernels.get("onednn") or {}).get("isa")
    seen = f"ATen {kernels.get('aten_capability', '?')}, oneDNN {onednn or '-'}, MKL {kernels.get('mkl') or '-'}"
    where = (f"{record['cpu_kind']}, emulated on {record['cpu']}" if record["emulated"]
             else f"native {record['cpu']}")
    return f"{where} ({seen})" + ("; NOT CAPPED: " + "; ".join(record["warnings"]) if record["capped"] is False else "")


if __name__ == "__main__":  # the record of this environment, as JSON
    print(json.dumps(what_ran(), indent=2))
