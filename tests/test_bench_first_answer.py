"""``speclsp bench lsp --first-answer`` (bench/first_answer.py): the functions it picks, where typing
stops, and the first answer read from a made-up list of events; no model."""

from __future__ import annotations

import asyncio
import random

import pytest
from lsprotocol import types

from bench.first_answer import first_answer, first_line_stop, line_count, pick_long_file_functions, summarize
from bench.typist import TypistSession, answer_text

pytestmark = pytest.mark.unit


def _function(name: str, lines: int = 4) -> str:
    return f"def {name}(value):\n" + "".join(f"    value = value + {i}\n" for i in range(lines - 2)) + "    return value\n"


def _file(functions_before: int, functions_after: int, filler_to: int) -> str:
    """Functions of 4 lines, ``filler_to`` lines of comments, more functions after them."""
    text = "".join(_function(f"early_{i}") + "\n" for i in range(functions_before))
    text += "".join(f"# filler {i}\n" for i in range(filler_to - line_count(text)))
    return text + "".join(_function(f"late_{i}") + "\n" for i in range(functions_after))


def test_functions_come_from_long_files_past_half_their_minimum_length(tmp_path):
    (tmp_path / "long.py").write_text(_file(3, 6, filler_to=30)
                                      + "def signature_only(\n    a,\n    b,\n    c,\n) -> int:\n    return a\n")
    (tmp_path / "short.py").write_text(_file(2, 2, filler_to=10))  # under 40 lines: no function of it
    picked = pick_long_file_functions(4, seed=0, min_lines=40, corpus=str(tmp_path))
    assert line_count((tmp_path / "long.py").read_text()) >= 40 > line_count((tmp_path / "short.py").read_text())
    assert len(picked) == 4
    for name, text, start, end in picked:
        assert name.startswith(f"{tmp_path.name}/long.py:") and " late_" in name
        assert text.count("\n", 0, start) + 1 > 20 and text[start:end].startswith("def late_")
    assert [start for _, _, start, _ in picked] == sorted(start for _, _, start, _ in picked)  # file order
    everything = pick_long_file_functions(100, seed=0, min_lines=40, corpus=str(tmp_path))
    assert len(everything) == 6  # the late ones; the signature cut at its ')' has no line after its header
    assert len(pick_long_file_functions(100, seed=0, min_lines=40, corpus=str(tmp_path), past_line=0)) == 9


def test_the_pick_is_seeded(tmp_path):
    (tmp_path / "long.py").write_text(_file(0, 12, filler_to=30))
    picks = {seed: [name for name, *_ in pick_long_file_functions(2, seed, min_lines=40, corpus=str(tmp_path))]
             for seed in range(6)}
    assert picks[3] == [name for name, *_ in pick_long_file_functions(2, 3, min_lines=40, corpus=str(tmp_path))]
    assert len({tuple(names) for names in picks.values()}) > 1  # another seed, another pick


def test_typing_stops_at_the_end_of_the_first_line_after_the_header():
    assert first_line_stop("def f(x):\n    return x + 1\n    # more") == len("def f(x):\n    return x + 1")
    header = "def g(\n    a,\n    b,\n) -> int:\n"
    assert first_line_stop(header + "\n    total = a + b\n    return total") == len(header + "\n    total = a + b")
    assert first_line_stop('def h():\n    """Doc\n    more."""\n    pass') == len('def h():\n    """Doc')
    assert first_line_stop("def cut(\n    self,\n    other,") is None  # the header never ends
    assert first_line_stop("def bare():\n\n") is None  # nothing after the header


def _events(*items: tuple) -> list[dict]:
    """(seconds, kind, request id, text[, error]) -> TypistSession.events."""
    events = []
    for t, kind, *rest in items:
        event = {"event": kind, "t": t}
        if kind == "key":
            event["taken"] = False
        else:
            event["id"] = rest[0]
        if kind == "answer":
            event["text"] = rest[1]
            if len(rest) > 2:
                event["error"] = rest[2]
        events.append(event)
    return events


def test_the_first_answer_is_the_first_ok_non_empty_answer_that_no_later_key_superseded():
    events = _events(
        (10.0, "key"), (10.1, "ask", "r1"),
        (10.3, "key"),  # supersedes r1
        (10.4, "ask", "r2"), (10.5, "answer", "r2", ""),  # ok but empty
        (10.6, "key"), (10.7, "ask", "r3"), (10.75, "answer", "r3", "cached"),  # the type-through cache
        (10.9, "answer", "r1", "late text"),  # ok and non-empty, but after a later key
        (11.0, "key"), (11.1, "ask", "r4"), (11.5, "answer", "r4", "first"),
        (11.6, "key"), (11.7, "ask", "r5"), (11.9, "answer", "r5", "second"),
        (12.0, "key"), (12.1, "ask", "r6"), (12.7, "answer", "r6", "third"))
    records = {"r1": {"status": "ok", "ms": {"total": 850.0, "prefill": 800.0}, "prefill_computed": 1400,
                      "prefill_reused": 0},
               "r2": {"status": "ok"}, "r3": {"status": "type-through cache hit"},
               "r4": {"status": "ok", "ms": {"total": 480.0, "prefill": 300.0}, "prefill_computed": 25,
                      "prefill_reused": 1400},
               "r5": {"status": "ok"}, "r6": {"status": "ok"}}
    found = first_answer(events, records)
    assert found["first_answer_ms"] == pytest.approx(1500.0) and found["keys_before_first_answer"] == 4
    assert found["first_answer"] == {"request": "r4", "status": "ok", "latency_ms": pytest.approx(500.0),
                                     "server_ms": 480.0, "prefill_ms": 300.0, "prompt_tokens_computed": 25,
                                     "prompt_tokens_reused": 1400}
    # the first request sent, superseded: its own latency (key to the late answer) and prefill all the same
    first_request = found["first_request"]
    assert first_request["request"] == "r1" and first_request["latency_ms"] == pytest.approx(900.0)
    assert first_request["prompt_tokens_computed"] == 1400 and first_request["server_ms"] == 850.0
    assert found["answers"] == 3 and found["answers_p50_ms"] == pytest.approx(500.0)  # r4 500, r5 300, r6 700 ms
    assert found["superseded_answers"] == 1 and found["requests"] == 6 and found["keys"] == 6
    assert found["no_answer"] is None and found["longest_wait_ms"] == pytest.approx(500.0)  # r4 asked to the next key


def test_no_answer_gives_nulls_and_says_why():
    events = _events((1.0, "key"), (1.1, "ask", "r1"), (1.2, "key"), (1.3, "answer", "r1", "too late"),
                     (1.4, "ask", "r2"), (1.45, "answer", "r2", "", "RequestCancelled"),
                     (1.5, "ask", "r3"), (1.6, "answer", "r3", "suggested"))  # no trace record: not the model's
    found = first_answer(events, {"r1": {"status": "ok"}, "r2": {"status": "cancelled by client"}})
    assert found["first_answer_ms"] is None and found["first_answer"] is None
    assert found["keys_before_first_answer"] is None and found["answers_p50_ms"] is None
    assert "no model answer" in found["no_answer"] and "1 model answers superseded" in found["no_answer"]
    assert found["longest_wait_ms"] == pytest.approx(100.0) and "waited 100.0 ms" in found["no_answer"]  # r2, r3: no key after
    assert found["first_request"]["status"] == "ok" and found["superseded_answers"] == 1
    assert first_answer([], {})["first_request"] is None


def test_the_summary_has_no_worst_while_a_function_went_unanswered():
    memory = {"rss": 5000.0, "peak": 5100.0}
    rows = [{"first_answer_ms": 900.0, "server_memory_mb": memory},
            {"first_answer_ms": 2100.0, "server_memory_mb": {"rss": 5200.0, "peak": 5300.0}},
            {"first_answer_ms": 1300.0, "server_memory_mb": memory}]
    summary = summarize(rows)
    assert summary["first_answer_ms"] == {"median": 1300.0, "worst": 2100.0, "worst_answered": 2100.0}
    assert summary["server_memory_peak_mb"] == 5300.0 and summary["without_answer"] == 0
    summary = summarize(rows + [{"first_answer_ms": None, "server_memory_mb": memory}])
    assert summary["first_answer_ms"]["worst"] is None and summary["first_answer_ms"]["worst_answered"] == 2100.0
    assert summary["without_answer"] == 1


def test_the_typist_logs_every_response_superseded_or_not():
    async def responses() -> list[dict]:
        session = TypistSession(None, {}, random.Random(0))
        loop = asyncio.get_running_loop()
        answered, failed, dropped = loop.create_future(), loop.create_future(), loop.create_future()
        item = types.InlineCompletionItem(insert_text="return value")
        answered.set_result(types.InlineCompletionList(items=[item]))
        failed.set_exception(RuntimeError("cancelled"))
        dropped.cancel()
        for request_id, future in (("typist-1", answered), ("typist-2", failed), ("typist-3", dropped)):
            session._arrived(request_id, future)
        return session.events

    events = asyncio.run(responses())
    assert [(e["id"], e["text"], e.get("error")) for e in events] == [("typist-1", "return value", None),
                                                                     ("typist-2", "", "cancelled")]
    assert answer_text(None) == "" and answer_text([types.InlineCompletionItem(insert_text="x")]) == "x"
