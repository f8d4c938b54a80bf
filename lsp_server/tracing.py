"""Request tracing: a one-line summary per request, details on demand, an optional JSON-lines file.

* ``window/logMessage``: one line per request, always: id, method, the document's short name
  (:mod:`lsp_server.workspace.names`: never an absolute path) and position, status,
  milliseconds per stage (queue wait, context build, prefill, draft, verify, the engine's bookkeeping
  around them, post-processing, total),
  prefill tokens computed and reused, tokens generated, target passes, tokens per pass and
  accepted/drafted tokens per draft source. No code text. A remote backend's request
  (:class:`lsp_server.backends.remote.RemoteGeneration`) has the stages ``first_token`` (time to the
  first text) and ``stream``, the engine's own draft acceptance as source ``engine`` when it reports
  it, and ``backend=`` with the engine's own timings.
* ``$/logTrace``: when the trace value is ``messages``, the same line; when ``verbose``, the line plus
  a JSON ``verbose`` field with every figure and the completion text (code text appears only here,
  and in the trace file at verbose level). The trace value is the client's (``initialize`` ``trace``
  or ``$/setTrace``); when the client leaves it ``off``, the ``trace.level`` setting applies.
* ``trace.file`` setting: one JSON object per request appended to that file.

A request's ``total`` runs from the moment the server has read and decoded its JSON-RPC message to
the moment the answer is written to the pipe (:class:`RpcClock`); ``rpc_in`` and ``rpc_out`` are the
parts before the handler starts (dispatch, parameter conversion) and after it returns (serialising and
writing the answer).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from lsprotocol import types

from lsp_server.workspace.names import file_name

log = logging.getLogger("speclsp.trace")

OFF, MESSAGES, VERBOSE = "off", "messages", "verbose"


class RpcClock:
    """When each JSON-RPC request was received and its response written (``time.perf_counter()``
    seconds), by message id. The protocol marks both; request handlers read them. Keeps the newest
    ``limit`` requests."""

    def __init__(self, limit: int = 256):
        self._limit = limit
        self._received: dict[object, float] = {}
        self._responded: dict[object, float] = {}

    def received(self, msg_id: object) -> None:
        self._received[msg_id] = time.perf_counter()
        if len(self._received) > self._limit:
            oldest = next(iter(self._received))
            self._received.pop(oldest)
            self._responded.pop(oldest, None)

    def responded(self, msg_id: object) -> None:
        if msg_id in self._received:
            self._responded[msg_id] = time.perf_counter()

    def times(self, msg_id: object) -> tuple[float | None, float | None]:
        """(received, responded) of a request; ``None`` for what is not known (yet)."""
        return self._received.get(msg_id), self._responded.get(msg_id)

    def forget(self, msg_id: object) -> None:
        self._received.pop(msg_id, None)
        self._responded.pop(msg_id, None)


def _open_regular_for_append(path: Path):
    """``path`` opened for appending text, created if missing; never blocks (a FIFO without a reader
    would block ``open`` on the event loop for ever) and refuses anything but a regular file.

    Raises:
        OSError: cannot be opened or created; ``ValueError``: not a regular file.
    """
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, 0o644)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ValueError("it is not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


class Tracer:
    """Formats request records and sends them to the client's log, its trace and a file.

    Args:
        names: a document URI's short name (default: its file name).
    """

    def __init__(self, send: Callable[[types.LogMessageParams], None] | None = None,
                 send_trace: Callable[[types.LogTraceParams], None] | None = None,
                 trace_value: Callable[[], str] = lambda: OFF, names: Callable[[str], str] | None = None):
        self._names = names or file_name
        self._send = send
        self._send_trace = send_trace
        self._trace_value = trace_value
        self._file: TextIO | None = None
        self._file_path = ""

    def set_trace_file(self, path: str) -> str | None:
        """Append request records to ``path`` ('' turns the file off); returns an error message or None."""
        if path == self._file_path:
            return None
        if self._file is not None:
            self._file.close()
            self._file, self._file_path = None, ""
        if not path:
            return None
        try:
            target = Path(path).expanduser()
            target.parent.mkdir(parents=True, exist_ok=True)
            self._file = _open_regular_for_append(target)
            self._file_path = path
        except (OSError, ValueError) as exc:
            return f"cannot write the trace file {path}: {exc.strerror if isinstance(exc, OSError) else exc}"
        return None

    def message(self, text: str, kind: types.MessageType = types.MessageType.Log) -> None:
        # A client that takes an information line shows it; on stderr it would show twice (VS Code: as
        # an error). Warnings and errors stay on stderr too (a client's own log file).
        quiet = self._send is not None and kind in (types.MessageType.Info, types.MessageType.Log)
        level = {types.MessageType.Error: logging.ERROR, types.MessageType.Warning: logging.WARNING}.get(kind, logging.INFO)
        log.log(logging.DEBUG if quiet else level, "%s", text)
        if self._send is not None:
            self._send(types.LogMessageParams(type=kind, message=text))

    def request(self, request_id: int, method: str, uri: str, position: types.Position, status: str,
                queue_ms: float = 0.0, completion=None, total_ms: float = 0.0,
                rpc_ms: tuple[float, float] = (0.0, 0.0), msg_id: object = None) -> dict:
        """Trace one answered request; returns the record (without code text).

        At verbose level the trace file's record also holds what a plain replay of the completion needs
        (``replay``: the target, prompt and output token ids, the generation's stops and healing text;
        ``bench/replay.py``), code as token ids, so it stays out of the client's ``$/logTrace``.

        Args:
            msg_id: the request's JSON-RPC id (the client's name for it), kept in the record.
            total_ms: the whole request in the server, milliseconds.
            rpc_ms: (``rpc_in``, ``rpc_out``) milliseconds: from reading the request to the handler's
                start, and from its end to the answer written.
        """
        name = self._names(uri)
        record: dict = {"time": round(time.time(), 3), "id": request_id, "method": method, "file": name,
                        "line": position.line, "character": position.character, "status": status}
        if isinstance(msg_id, (int, str)):
            record["msg_id"] = msg_id
        parts = [f"[speclsp] req={request_id} {method} {name}:{position.line}:{position.character} {status}"]
        if completion is not None:
            parts += _completion_figures(completion, record, {"rpc_in": rpc_ms[0], "queue": queue_ms}, rpc_ms[1], total_ms)
        elif total_ms:
            parts.append(f"total={total_ms:.1f}ms")
            record["ms"] = {"total": round(total_ms, 2)}
        self._emit(" | ".join(parts), record, completion)
        return record


    def _emit(self, summary: str, record: dict, completion) -> None:
        """The summary as a log line, the record to ``$/logTrace`` and the trace file, by the trace level."""
        self.message(summary)
        level = self._trace_value()
        detailed = dict(record)
        if level == VERBOSE and completion is not None:
            detailed["insert_text"] = completion.insert_text
        if level in (MESSAGES, VERBOSE) and self._send_trace is not None:
            self._send_trace(types.LogTraceParams(
                message=summary, verbose=json.dumps(detailed) if level == VERBOSE else None))
        if self._file is not None:
            if level == VERBOSE and getattr(completion, "config", None) is not None:
                detailed["replay"] = replay_record(completion)
            try:
                self._file.write(json.dumps(detailed if level == VERBOSE else record) + "\n")
                self._file.flush()
            except OSError as exc:
                log.warning("trace file write failed: %s", exc)


def _completion_figures(completion, record: dict, before: dict[str, float], rpc_out_ms: float,
                        total_ms: float) -> list[str]:
    """The summary's parts for an answered generation; its figures added to ``record``.

    Args:
        before: milliseconds of the stages before the handler's work (``rpc_in``, ``queue``).
    """
    stats = completion.generation.stats
    model = {k: v for k, v in stats.ms.items() if k != "total"}
    # The engine's own bookkeeping around the model: detokenizing, stops, cache and source upkeep.
    decode_other = max(0.0, completion.ms.get("engine", 0.0) - sum(model.values()))
    stages = {**before, "context": completion.ms.get("context", 0.0), **model, "decode_other": decode_other,
              "postprocess": completion.ms.get("postprocess", 0.0), "rpc_out": rpc_out_ms, "total": total_ms}
    sources = " ".join(f"{n}={s.accepted}/{s.drafted}" for n, s in sorted(stats.sources.items())) or "-"
    parts = [" ".join(f"{k}={v:.1f}ms" for k, v in stages.items()),
             f"prefill_tokens={stats.prefill_computed} reused={stats.prefill_reused} "
             f"tokens={stats.new_tokens} passes={stats.target_passes} "
             f"tokens/pass={stats.tokens_per_pass:.2f} accepted[{sources}] "
             f"finish={completion.generation.finish_reason}"]
    record.update(
        ms={k: round(v, 2) for k, v in stages.items()}, prefill_computed=stats.prefill_computed,
        prefill_reused=stats.prefill_reused, tokens=stats.new_tokens, target_passes=stats.target_passes,
        tokens_per_pass=round(stats.tokens_per_pass, 3),
        accepted={n: {"accepted": s.accepted, "drafted": s.drafted} for n, s in sorted(stats.sources.items())},
        finish=completion.generation.finish_reason)
    backend = getattr(completion.generation, "backend", "")
    if backend:  # a remote engine generated: which backend, and the engine's own timings
        engine_ms = getattr(completion.generation, "engine_ms", {})
        parts.append(f"backend={backend}" + "".join(f" engine_{k}={v:.1f}ms" for k, v in engine_ms.items()))
        record.update(backend=backend, engine_ms={k: round(v, 2) for k, v in engine_ms.items()})
    record.update(completion.trace_fields())
    return parts


def replay_record(completion) -> dict:
    """What plain decoding needs to replay ``completion`` (a :class:`lsp_server.model.completer.Completion`):
    its target, prompt and output token ids and the generation's stops, length cap and healing text; and
    the shapes of its verify passes (``[tokens fed, tokens kept, a tree pass]`` each; empty where the
    engine did not record them, as a remote one), which the replay's kernel-noise measure recomputes, and
    the same for the passes that computed the cached prompt but its last token (``prompt_passes``, over
    earlier requests too), with which the replay recomputes the server's own logits."""
    config = completion.config
    stats = getattr(completion.generation, "stats", None)
    passes, prompt_passes = getattr(stats, "passes", None) or [], getattr(stats, "prompt_passes", None) or []
    return {"model": completion.model, "prompt_ids": list(completion.prompt.prompt_ids),
            "passes": [[int(fed), int(kept), bool(tree)] for fed, kept, tree in passes],
            "prompt_passes": [[int(fed), int(kept), bool(tree)] for fed, kept, tree in prompt_passes],
            "output_ids": list(completion.generation.token_ids), "required_prefix": config.required_prefix,
            "max_new_tokens": config.max_new_tokens, "stop_strings": list(config.stop_strings),
            "stop_token_ids": sorted(config.stop_token_ids) if config.stop_token_ids is not None else None,
            "temperature": config.sampling.temperature}
