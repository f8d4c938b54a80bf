"""The typist bench's rules (bench/typist.py) and the prompt gate's statistics (bench/prompt_gate.py)."""

from __future__ import annotations

import pytest

from bench.prompt_gate import _columns, interval, summarize
from bench.typist import takeable

pytestmark = pytest.mark.unit


def test_a_suggestion_is_taken_only_where_it_is_exactly_what_comes_next():
    rest = "value = compute(x)\n    return value\n"
    assert takeable("value = compute(x)", rest) == "value = compute(x)"  # the whole rest of the line
    assert takeable("value = compute(x)\n    return value", rest) == "value = compute(x)\n    return value"
    assert takeable("value = compute(x)\n    return None", rest) == "value = compute(x)"  # a wrong line stops it
    assert takeable("value", rest) == "value"  # a prefix of 4 or more characters
    assert takeable("val", rest) == ""  # a shorter prefix is not worth a key
    assert takeable("value = compute(y)", rest) == ""  # wrong: nothing
    assert takeable("", rest) == "" and takeable("\n    return value", rest) == ""
    assert takeable("value\n    return value", rest) == "value"  # a prefix line: no further lines


def test_cursor_kinds_fall_where_they_say():
    line = "        result = compute_total(value, 42)"
    assert _columns(line, "line_start") == [8]
    mid_token = _columns(line, "mid_token")
    word = set("abcdefghijklmnopqrstuvwxyz_0123456789")
    assert mid_token and all(line[c - 1] in word and line[c] in word for c in mid_token)
    mid_line = _columns(line, "mid_line")
    assert 17 in mid_line and all(not (line[c - 1].isalnum() or line[c - 1] == "_") for c in mid_line)
    assert _columns("    ", "line_start") == []


def test_the_gate_interval_and_its_verdict():
    assert interval([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)
    mean, low, high = interval([1.0, 0.0, 1.0, 0.0])
    assert mean == 0.5 and low < 0.5 < high
    same = {"first_line_exact": True, "parses": True}
    rows = [{"kind": "mid_token", "a": same, "b": same} for _ in range(50)]
    assert summarize(rows, "a", "b")["gate_passes"]
    worse = [{"kind": "mid_token", "a": same, "b": {"first_line_exact": i % 4 != 0, "parses": True}}
             for i in range(200)]
    verdict = summarize(worse, "a", "b")
    assert not verdict["gate_passes"] and verdict["losing_languages"] == ["python"]  # rows without a language
    assert verdict["languages"]["python"]["mid_token"]["first_line_exact"]["difference"][0] == -0.25


def test_server_memory_reads_this_process_and_none_for_a_process_that_is_gone():
    import os

    from bench.typist import server_memory_mb

    memory = server_memory_mb(os.getpid())
    assert memory["rss"] is not None and 0 < memory["rss"] <= memory["peak"]
    assert server_memory_mb(2**22 + 12345) == {"rss": None, "peak": None}  # above pid_max: no such process
