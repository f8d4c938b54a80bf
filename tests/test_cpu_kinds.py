"""The kinds of CPU (decoding/weights/cpu_kinds.py) and ``--cpu-kind`` for the benches (bench/cpu_kinds.py):
the flags an emulated kind hides, the kinds refused, the caps, the command run again with them, and the
record of what the kernels ran with, read from the libraries' own logs (two probes run a child process)."""

from __future__ import annotations

import argparse
import builtins
import subprocess

import pytest

from bench import cpu_kinds, kernel_probe
from bench.kernel_probe import above_kind, parse_mkl, parse_onednn, probe
from decoding.weights.cpu_flags import cpu_flags, cpu_name, native_cpu_flags
from decoding.weights.cpu_kinds import AVX2, AVX512_VNNI, KIND_VARIABLE, KINDS, NATIVE, CpuKindError, cpu_kind

pytestmark = pytest.mark.unit

#: /proc/cpuinfo's flags of an Intel Xeon with AMX (Sapphire Rapids), the ones that matter here.
XEON_AMX = ("fpu sse4_2 avx avx2 fma f16c avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 "
            "amx_bf16 amx_tile amx_int8 avx_vnni vaes")
AVX2_ONLY = "fpu sse4_2 avx avx2 fma f16c"

# Real lines, from `ONEDNN_VERBOSE=1 MKL_VERBOSE=1` on bench.kernel_probe's code, torch 2.13.0+cpu, AMD EPYC
# (AVX2): as it is, then with ONEDNN_MAX_CPU_ISA=SSE41 (problem sizes and timings trimmed).
ONEDNN_AVX2 = """\
onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)
onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2
onednn_verbose,v1,info,cpu,isa:Intel AVX2
onednn_verbose,v1,info,gpu,runtime:none
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind,memory_descriptors,attributes,auxiliary,problem_desc,exec_time
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32::blocked:abcd::f0 dst:f32::blocked:aBcd8b::f0,attr-scratchpad:user,,2x32x16x16,6.95312
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx2,forward_training,src:f32:a:blocked:aBcd8b::f0 wei:f32:a:blocked:ABcd8b8a::f0 bia:undef::undef::: dst:f32:a:blocked:aBcd8b::f0,attr-scratchpad:user,alg:convolution_direct,mb2_ic32oc32,7.89697
""".splitlines()
ONEDNN_SSE41 = """\
onednn_verbose,v1,info,cpu,isa:Intel SSE4.1
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:sse41,forward_training,src:f32:a:blocked:aBcd8b::f0 wei:f32:a:blocked:ABcd8b8a::f0 bia:undef::undef::: dst:f32:a:blocked:aBcd8b::f0,attr-scratchpad:user,alg:convolution_direct,mb2_ic32oc32,7.052
""".splitlines()
MKL_AMD = """\
MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture Intel(R) Architecture processors, Lnx 2.45GHz lp64 gnu_thread
MKL_VERBOSE SGEMM(T,N,512,16,512,0x7ffd6086f9a0,0x7f8531214040,512,0x55bb41ad21c0,512,0x7ffd6086f9c0,0x55bb41ae2340,512) 12.27ms CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:2
""".splitlines()
#: Written here in the format of the lines above (this CPU has no AVX-512): a bfloat16 matmul on AMX.
ONEDNN_AMX_MATMUL = ("onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_amx,undef,"
                     "src:bf16::blocked:ab::f0 wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,,,16x512:512x512,0.1")


@pytest.fixture
def cpuinfo(tmp_path, monkeypatch):
    """Write a fake /proc/cpuinfo with the given flags; everything that reads /proc/cpuinfo reads it."""
    info = tmp_path / "cpuinfo"
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path, *a, **k))
    monkeypatch.delenv(KIND_VARIABLE, raising=False)

    def write(flags: str, name: str = "Intel(R) Xeon(R) Platinum 8480+") -> str:
        info.write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: {name}\nflags\t\t: {flags}\n")
        return str(info)
    return write


def test_an_emulated_kind_hides_the_flags_it_lacks_and_names_itself(cpuinfo, monkeypatch):
    from bench.llama_cpp_build import isa_cmake_flags
    from decoding.weights.loading import resolve_dtype

    import torch

    path = cpuinfo(XEON_AMX)
    assert cpu_flags(path) == set(XEON_AMX.split()) and cpu_name(path) == "Intel(R) Xeon(R) Platinum 8480+"
    assert resolve_dtype("auto", torch.device("cpu")) == torch.bfloat16  # native: amx_bf16
    monkeypatch.setenv(KIND_VARIABLE, "avx512-vnni")
    ice_lake = cpu_flags(path)
    assert {"avx512f", "avx512bw", "avx512_vnni", "vaes"} <= ice_lake
    assert not ice_lake & {"avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "amx_int8", "avx_vnni"}
    assert cpu_name(path) == "Intel(R) Xeon(R) Platinum 8480+ (emulated avx512-vnni)"
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32  # no bfloat16 instructions on the kind
    assert "-DGGML_AVX512_VNNI=ON" in isa_cmake_flags(ice_lake) and "-DGGML_AVX512_BF16=OFF" in isa_cmake_flags(ice_lake)
    monkeypatch.setenv(KIND_VARIABLE, "avx2")
    laptop = cpu_flags(path)
    assert {"avx2", "fma", "f16c", "vaes"} <= laptop and not {f for f in laptop if f.startswith(("avx512", "amx"))}
    assert "avx_vnni" not in laptop and "-DGGML_AVX512=OFF" in isa_cmake_flags(laptop)
    assert native_cpu_flags(path) == set(XEON_AMX.split())  # the native flags stay readable
    monkeypatch.setenv(KIND_VARIABLE, "native")
    assert cpu_flags(path) == set(XEON_AMX.split()) and "emulated" not in cpu_name(path)


def test_a_kind_above_the_cpu_is_refused_naming_the_missing_flags(cpuinfo, monkeypatch):
    path = cpuinfo(AVX2_ONLY, "AMD EPYC")
    monkeypatch.setenv(KIND_VARIABLE, "avx512-vnni")
    with pytest.raises(CpuKindError, match=r"avx512-vnni cannot be emulated on AMD EPYC: it lacks "
                                           r"avx512_vnni, avx512bw, avx512dq, avx512f, avx512vl \("):
        cpu_flags(path)
    monkeypatch.delenv(KIND_VARIABLE)
    with pytest.raises(CpuKindError, match="it lacks avx512_vnni"):
        cpu_kinds.checked_kind("avx512-vnni")
    assert cpu_kinds.checked_kind("avx2") is AVX2  # AVX2, FMA, F16C are there
    cpuinfo("fpu sse4_2 avx avx2")
    with pytest.raises(CpuKindError, match=r"it lacks f16c, fma \("):
        cpu_kinds.checked_kind("avx2")


def test_an_unknown_kind_is_refused_listing_the_kinds(cpuinfo, monkeypatch):
    with pytest.raises(CpuKindError, match="unknown CPU kind 'zen9'; the kinds are native, avx512-vnni, avx2"):
        cpu_kind("zen9")
    monkeypatch.setenv(KIND_VARIABLE, "zen9")
    with pytest.raises(CpuKindError, match="the kinds are native, avx512-vnni, avx2"):
        cpu_flags(cpuinfo(XEON_AMX))
    parser = argparse.ArgumentParser()
    cpu_kinds.add_argument(parser)
    assert parser.parse_args([]).cpu_kind == "native"
    with pytest.raises(SystemExit):
        parser.parse_args(["--cpu-kind", "zen9"])


def test_each_kind_caps_torchs_kernels_at_its_own_instruction_sets():
    assert AVX2.environment() == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                  "MKL_ENABLE_INSTRUCTIONS": "AVX2", KIND_VARIABLE: "avx2"}
    assert AVX512_VNNI.environment() == {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI",
                                         "MKL_ENABLE_INSTRUCTIONS": "AVX512_E2", KIND_VARIABLE: "avx512-vnni"}
    assert NATIVE.environment() == {}
    assert cpu_kinds.kind_environment(AVX2, {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx512"}) == {
        "PATH": "/bin", **AVX2.environment()}
    for kind in KINDS.values():  # every emulated kind can be checked against what ran
        if kind is not NATIVE:
            assert kind.caps["ATEN_CPU_CAPABILITY"].upper() in kernel_probe.ATEN_ORDER and kind.name in kernel_probe.ABOVE


def test_an_emulated_kind_runs_the_same_command_again_with_its_caps(cpuinfo, monkeypatch):
    cpuinfo(XEON_AMX)
    started = []
    monkeypatch.setattr(subprocess, "run", lambda command, env, check: started.append((command, env))
                        or subprocess.CompletedProcess(command, 3))
    args = argparse.Namespace(cpu_kind="avx2", argv=["bench", "decode", "--cpu-kind", "avx2", "--quick"])
    assert cpu_kinds.run_as_kind(args, {"PATH": "/bin"}) == 3  # the child's exit status
    [(command, env)] = started
    assert command[1:] == ["-m", "lsp_server.cli", "bench", "decode", "--cpu-kind", "avx2", "--quick"]
    assert env == {"PATH": "/bin", **AVX2.environment()}
    assert cpu_kinds.run_as_kind(args, env) is None  # that child measures
    assert cpu_kinds.run_as_kind(argparse.Namespace(cpu_kind="native", argv=[]), {}) is None
    assert len(started) == 1
    with pytest.raises(CpuKindError, match="SPECLSP_CPU_KIND=avx2 is set"):
        cpu_kinds.run_as_kind(argparse.Namespace(cpu_kind="native", argv=[]), {KIND_VARIABLE: "avx2"})
    with pytest.raises(CpuKindError, match="speclsp bench"):
        cpu_kinds.run_as_kind(argparse.Namespace(cpu_kind="avx2"), {})


def test_the_libraries_logs_are_read_for_the_isa_that_ran():
    assert parse_onednn(ONEDNN_AVX2) == {"isa": "Intel AVX2", "ran": {"f32": ["convolution jit:avx2"]}}
    assert parse_onednn(ONEDNN_SSE41 + [ONEDNN_AMX_MATMUL]) == {
        "isa": "Intel SSE4.1", "ran": {"f32": ["convolution jit:sse41"], "bf16": ["matmul brg_matmul:avx512_core_amx"]}}
    assert parse_onednn(MKL_AMD) == {"isa": None, "ran": {}}
    assert parse_mkl(MKL_AMD) == "Intel(R) Architecture processors"
    assert parse_mkl(ONEDNN_AVX2) is None
    reading = {"aten_capability": "AVX2", "onednn": parse_onednn(ONEDNN_AVX2), "mkl": parse_mkl(MKL_AMD)}
    assert above_kind("avx2", "avx2", reading) == []
    assert above_kind("avx2", "default", reading) == ["ATen runs AVX2 kernels, above the kind's DEFAULT"]
    amx = {"aten_capability": "AVX512", "onednn": parse_onednn(ONEDNN_AVX2 + [ONEDNN_AMX_MATMUL]),
           "mkl": "Intel(R) Advanced Vector Extensions 512 (Intel(R) AVX-512) with support of Intel(R) Deep Learning "
                  "Boost (Intel(R) DL Boost) and bfloat16"}
    found = above_kind("avx512-vnni", "avx512", amx)
    assert len(found) == 2 and "avx512_core_amx" in found[0] and "MKL" in found[1]
    assert len(above_kind("avx2", "avx2", amx)) == 3  # ATen AVX512, the AMX matmul, MKL's AVX-512


# Real readings (bench.kernel_probe, torch 2.13.0+cpu) on an Intel Xeon with AMX, oneDNN's ISA line and the
# bfloat16 matmul it ran: as it is, capped at AVX512_CORE_BF16, capped at AVX512_CORE_VNNI (the Ice Lake kind:
# oneDNN's emulated bfloat16 gemm, whose name holds the data type, not an instruction set).
XEON_READINGS = {
    "native": ("Intel AVX10.1 and Intel AMX with bfloat16 and 8-bit integer support", "matmul brg_matmul:avx10_1_512_amx"),
    "AVX512_CORE_BF16": ("Intel AVX-512 with Intel DL Boost and bfloat16 support", "matmul brg_matmul:avx512_core_bf16"),
    "AVX512_CORE_VNNI": ("Intel AVX-512 with Intel DL Boost", "matmul gemm:jit:bf16"),
}


@pytest.mark.parametrize("cap, above", [("native", True), ("AVX512_CORE_BF16", True), ("AVX512_CORE_VNNI", False)])
def test_an_implementation_is_judged_by_the_instruction_set_it_names_not_its_data_type(cap, above):
    isa, matmul = XEON_READINGS[cap]
    reading = {"aten_capability": "AVX512", "mkl": None,
               "onednn": {"isa": isa, "ran": {"bf16": [matmul], "f32": ["convolution jit:avx512_core"]}}}
    found = above_kind("avx512-vnni", "avx512", reading)
    assert len(found) == (2 if above else 0), found  # the ISA line and the implementation
    assert len(above_kind("avx2", "avx2", reading)) >= 3  # ATen AVX512, the ISA line, the AVX-512 convolution
    if above:
        assert isa in found[0] and matmul in found[1]


def test_a_child_with_the_avx512_vnni_caps_runs_no_bfloat16_instructions():
    if AVX512_VNNI.missing_flags(native_cpu_flags()):
        pytest.skip("this CPU cannot run the avx512-vnni kind")
    reading = probe(cpu_kinds.kind_environment(AVX512_VNNI))
    assert reading["aten_capability"] == "AVX512", reading
    assert above_kind("avx512-vnni", "avx512", reading) == [], reading
    assert above_kind("avx2", "avx2", reading)  # the same reading fails a lower kind

def test_a_child_with_the_avx2_caps_runs_avx2_kernels():
    import torch

    if AVX2.missing_flags(native_cpu_flags()):
        pytest.skip("this CPU cannot run the avx2 kind")
    reading = probe(cpu_kinds.kind_environment(AVX2))
    assert reading["aten_capability"] == "AVX2", reading
    if torch.backends.mkldnn.is_available():
        assert reading["onednn"]["isa"] == "Intel AVX2" and reading["onednn"]["ran"]["f32"] == ["convolution jit:avx2"]
    assert above_kind("avx2", "avx2", reading) == []
    assert above_kind("avx2", "default", reading)  # the same reading fails a lower cap


def test_the_record_reads_what_ran_not_what_was_asked():
    """A child capped below AVX2 reports it: the record comes from the kernels, so it can fail."""
    import torch

    reading = probe(cpu_kinds.kind_environment(NATIVE, {**__import__("os").environ, "ATEN_CPU_CAPABILITY": "default",
                                                        "ONEDNN_MAX_CPU_ISA": "SSE41"}))
    assert reading["aten_capability"] == "DEFAULT", reading
    if torch.backends.mkldnn.is_available():
        assert reading["onednn"]["isa"] == "Intel SSE4.1"


def test_a_cap_that_did_not_hold_is_said_loudly(monkeypatch, capsys):
    above = {"aten_capability": "AVX512", "onednn": {"isa": "Intel AVX-512 with Intel DL Boost", "ran": {}}, "mkl": None}
    monkeypatch.setattr(cpu_kinds, "probe", lambda environ: above)
    monkeypatch.setattr(cpu_kinds, "native_cpu_flags", lambda: frozenset(XEON_AMX.split()))
    record = cpu_kinds.what_ran(AVX2.environment())
    assert record["cpu_kind"] == "avx2" and record["emulated"] is True and record["capped"] is False
    assert any("ATen runs AVX512 kernels" in w for w in record["warnings"]) and "avx512_bf16" in record["native_flags"]
    assert "avx512f" not in record["kind_flags"] and any("fbgemm" in n for n in record["not_capped"])
    assert "NOT CAPPED" in cpu_kinds.label(record) and "WARNING: --cpu-kind avx2" in capsys.readouterr().err
    monkeypatch.setattr(cpu_kinds, "probe", lambda environ: {"aten_capability": "AVX2", "mkl": None,
                                                             "onednn": {"isa": "Intel AVX2", "ran": {}}})
    record = cpu_kinds.what_ran(AVX2.environment())
    assert record["capped"] is True and record["warnings"] == []
    assert cpu_kinds.label(record).startswith("avx2, emulated on ")
    missing_cap = cpu_kinds.what_ran({KIND_VARIABLE: "avx2"})  # the kind named, its caps not set
    assert missing_cap["capped"] is False and any("ATEN_CPU_CAPABILITY" in w for w in missing_cap["warnings"])
    native = cpu_kinds.what_ran({})
    assert native["capped"] is None and cpu_kinds.label(native).startswith("native ")


def test_the_step_cost_tables_say_the_kind():
    from bench.step_cost_grid import markdown

    sizes = {s: 1.0 for s in ("1", "2", "4", "8", "16", "32", "128", "512", "1024")}
    row = {"path": "torch-float32", "model": "starter", "context": 16, "engine": "torch", "weight_bytes": 1e6,
           "pass_ms": sizes, "rates": {"plain": 1, "edit": 1, "fim": 1, "fim_with_prompt": 1}, "load_s": 0.1,
           "warmup_ms": {"1": 1.0}, "cpu_kind": "avx2, emulated on AMD EPYC (ATen AVX2, oneDNN Intel AVX2, MKL -)"}
    assert "CPU kind: avx2, emulated on AMD EPYC" in markdown([row])


def test_a_llama_cpp_build_above_the_kind_is_named():
    from bench.llama_cpp_build import isa_cmake_flags

    xeon, laptop = frozenset(XEON_AMX.split()), AVX2.visible_flags(frozenset(XEON_AMX.split()))
    [note] = cpu_kinds.llama_cpp_above(AVX2, laptop, {"cmake_flags": list(isa_cmake_flags(xeon))})
    assert "GGML_AVX512, GGML_AVX512_VNNI, GGML_AVX512_BF16 on, above the avx2 kind" in note
    assert cpu_kinds.llama_cpp_above(AVX2, laptop, {"cmake_flags": list(isa_cmake_flags(laptop))}) == []
    assert cpu_kinds.llama_cpp_above(NATIVE, xeon, {"cmake_flags": list(isa_cmake_flags(xeon))}) == []
