"""llama.cpp as a benchmark peer and a test engine: its server, our GGUF files, one greedy request.

- :func:`build` / :func:`server_binary`: llama.cpp built once from the registry (:mod:`bench.llama_cpp_build`).
- :func:`gguf_path`: a model pack assembled once into ``<cache root>/gguf/<pack>-<sha256[:12]>.gguf``.
- :class:`LlamaServer`: ``llama-server`` on a free localhost port, ready when ``GET /health`` is ok.
- :func:`complete`: one greedy ``POST /completion`` and the server's own timings.

Only the standard library talks to the server (subprocess, urllib): llama.cpp is a benchmark peer and
a test engine, not a runtime dependency.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from bench.llama_cpp_build import (
    STAMP,
    VERSION,
    PeerBuildError,
    build,
    build_dir,
    is_built,
    server_binary,
)
from decoding.weights.gguf_files import gguf_cache_path, pack_gguf_path

__all__ = ["STAMP", "VERSION", "LlamaServer", "PeerBuildError", "PeerCompletion", "build", "build_dir", "complete",
           "gguf_cache_path", "gguf_path", "is_built", "server_binary"]


gguf_path = pack_gguf_path  # the pack's GGUF file, assembled once (decoding.weights.gguf_files)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LlamaServer:
    """``llama-server`` serving one GGUF file on ``127.0.0.1``; a context manager that stops it on exit.

    Args:
        gguf: the model file.
        extra_args: more ``llama-server`` flags, e.g. ``("--spec-type", "ngram-simple")`` or
            ``("-md", DRAFT_GGUF, "--spec-type", "draft-simple", "--spec-draft-n-max", "16")``.
        threads: CPU threads (``-t``).
        ctx_size: context length in tokens (``-c``).
        binary: the ``llama-server`` to run (default: the cached build, :func:`server_binary`).
        startup_timeout_s: how long loading may take before :meth:`start` gives up.
        log_path: where its output goes, never our stdout (default: a new temporary file, removed when
            the ``with`` block ends; a failed start puts its last lines in the exception).
    The port is chosen free at the first start and kept by :meth:`restart`, so :attr:`url` stays valid.
    """

    def __init__(self, gguf: Path | str, extra_args: Sequence[str] = (), threads: int = 2, ctx_size: int = 4096,
                 *, binary: Path | None = None, startup_timeout_s: float = 180.0, log_path: Path | None = None):
        self.gguf, self.extra_args = Path(gguf), [str(arg) for arg in extra_args]
        self.threads, self.ctx_size, self.startup_timeout_s = threads, ctx_size, startup_timeout_s
        self.binary = binary or server_binary()
        if self.binary is None:
            raise PeerBuildError(f"llama.cpp {VERSION} is not built (expected in {build_dir()}); "
                                 "build it with: speclsp bench peers --build")
        self._own_log = log_path is None
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = Path(log_path)
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def command(self) -> list[str]:
        return [str(self.binary), "-m", str(self.gguf), "--host", "127.0.0.1", "--port", str(self.port),
                "-t", str(self.threads), "-c", str(self.ctx_size), *self.extra_args]

    def start(self) -> Self:
        """Start the server and wait until ``GET /health`` answers 200.

        Raises:
            RuntimeError: it exited or was not healthy within ``startup_timeout_s`` (it is stopped then);
                the message ends with the last lines of its log.
        """
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"llama-server is already running (pid {self.process.pid})")
        env = dict(os.environ)  # its shared libraries are beside it
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(self.binary.parent), env.get("LD_LIBRARY_PATH")]))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.process.returncode} while starting: "
                                   f"{' '.join(self.command())}\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server was not healthy within {self.startup_timeout_s:.0f} s\n{self.log_tail()}")

    def healthy(self, timeout_s: float = 2.0) -> bool:
        """Whether ``GET /health`` answers 200 now (503 while the model loads, no answer when down)."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=timeout_s) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate (SIGTERM), then SIGKILL after ``timeout_s``; does nothing when it is not running."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL it at once (as a crash would) and reap it; does nothing when it is not running."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self) -> Self:
        """Stop it if it runs and start it again on the same port (see :meth:`start` for errors)."""
        self.stop()
        return self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "".join(self.log_path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)


@dataclass(frozen=True)
class PeerCompletion:
    """One ``/completion`` answer. Times in ms; token counts are the server's own."""

    text: str
    num_tokens: int  # tokens generated (timings.predicted_n)
    wall_ms: float  # request sent to answer read, measured here
    prompt_ms: float  # the server's prefill time
    predicted_ms: float  # the server's generation time
    predicted_per_second: float  # tokens/s over predicted_ms
    draft_n: int | None  # tokens drafted by its speculation; None when it reports none
    draft_n_accepted: int | None
    stop_type: str  # "eos", "limit" or "word"
    token_ids: tuple[int, ...] = ()  # the generated tokens, in the model's vocabulary

    @property
    def acceptance(self) -> float | None:
        """Accepted over drafted tokens, or None when nothing was drafted."""
        return self.draft_n_accepted / self.draft_n if self.draft_n else None


def complete(server: LlamaServer, prompt: str | list[int], max_tokens: int, ignore_eos: bool = False,
             timeout_s: float = 600.0) -> PeerCompletion:
    """One greedy completion of ``prompt`` (temperature 0, no prompt cache, no streaming).

    Args:
        prompt: text (special tokens written in it, ``<|fim_prefix|>``..., are parsed as such by the
            server), or token ids (the very prompt another system is given).
        max_tokens: ``n_predict``.
        ignore_eos: generate ``max_tokens`` tokens even past end-of-text (as a benchmark of fixed length does).

    Raises:
        urllib.error.URLError: the server is down or answered an HTTP error.
        TimeoutError: no answer within ``timeout_s``.
    """
    body = json.dumps({"prompt": prompt, "n_predict": max_tokens, "temperature": 0.0, "cache_prompt": False,
                       "stream": False, "ignore_eos": ignore_eos, "return_tokens": True}).encode()
    request = urllib.request.Request(f"{server.url}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        answer = json.load(response)
    wall_ms = 1000 * (time.perf_counter() - started)
    timings = answer.get("timings", {})
    return PeerCompletion(
        text=answer["content"], num_tokens=int(timings.get("predicted_n", answer.get("tokens_predicted", 0))),
        wall_ms=wall_ms, prompt_ms=float(timings.get("prompt_ms", 0.0)),
        predicted_ms=float(timings.get("predicted_ms", 0.0)),
        predicted_per_second=float(timings.get("predicted_per_second", 0.0)),
        draft_n=timings.get("draft_n"), draft_n_accepted=timings.get("draft_n_accepted"),
        stop_type=str(answer.get("stop_type", "")), token_ids=tuple(answer.get("tokens") or ()))
