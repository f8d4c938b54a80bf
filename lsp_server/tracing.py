"""Request tracing: one ``window/logMessage`` line per request with its id, stages and acceptance.

The line holds no code text: file name, position, milliseconds per stage (queue wait, context
build, prefill, draft, verify, post-processing, total), prefill tokens computed and reused, tokens
generated, target passes and accepted/drafted tokens per draft source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lsprotocol import types

log = logging.getLogger("speclsp.trace")


class Tracer:
    """Formats request summaries and sends them to the client's log (and to stderr logging)."""

    def __init__(self, send: Callable[[types.LogMessageParams], None] | None = None):
        self._send = send

    def message(self, text: str, kind: types.MessageType = types.MessageType.Log) -> None:
        log.info("%s", text)
        if self._send is not None:
            self._send(types.LogMessageParams(type=kind, message=text))

    def request(self, request_id: int, method: str, uri: str, position: types.Position, status: str,
                queue_ms: float = 0.0, completion=None, total_ms: float = 0.0) -> None:
        name = uri.rsplit("/", 1)[-1]
        parts = [f"[speclsp] req={request_id} {method} {name}:{position.line}:{position.character} {status}"]
        if completion is not None:
            stats = completion.generation.stats
            stages = {"queue": queue_ms, "context": completion.ms.get("context", 0.0), **{
                k: v for k, v in stats.ms.items() if k != "total"}, "postprocess": completion.ms.get("postprocess", 0.0),
                "total": total_ms}
            parts.append(" ".join(f"{k}={v:.1f}ms" for k, v in stages.items()))
            sources = " ".join(f"{n}={s.accepted}/{s.drafted}" for n, s in sorted(stats.sources.items())) or "-"
            parts.append(f"prefill_tokens={stats.prefill_computed} reused={stats.prefill_reused} "
                         f"tokens={stats.new_tokens} passes={stats.target_passes} "
                         f"tokens/pass={stats.tokens_per_pass:.2f} accepted[{sources}] "
                         f"finish={completion.generation.finish_reason}")
        self.message(" | ".join(parts))
