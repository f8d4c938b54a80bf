"""``speclsp bench fim-eval`` (bench/fim_eval.py, fim_tasks.py, fim_served.py, fim_raw.py): the seeded
stratified sample, both scorers, the Wilson interval, Qwen's PSM prompt, the summary, and both paths end
to end on nine tasks (tests/data/humaneval-fim) through the real server on the starter pair. The starter
models' scores mean nothing; the rows' fields are checked, not the scores."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fim_eval import _tasks, summarize
from bench.fim_raw import LEFT_TOKENS, RIGHT_TOKENS, greedy_until_line, line_complete, psm_prompt_ids
from bench.fim_tasks import FimTask, qwen_line, read_tasks, sample_tasks, served_line, wilson
from tests.conftest import STARTER_FLAGS

SAMPLE = Path(__file__).parent / "data" / "humaneval-fim" / "sample.jsonl"
STARTER_TARGET = Path(__file__).parents[1] / "decoding" / "weights" / "starter" / "models" / "target"


def _made_up_tasks() -> list[FimTask]:
    counts = {"py": 40, "java": 50, "js": 60}
    return [FimTask(f"task-{i}", language, f"prompt {i}", "suffix", f"line {i}")
            for language, count in counts.items() for i in range(count)]


@pytest.mark.unit
def test_the_sample_is_stratified_and_seeded():
    tasks = _made_up_tasks()
    chosen = sample_tasks(tasks, ["py", "java", "js"], 10, seed=0)
    assert [task.language for task in chosen] == ["py"] * 10 + ["java"] * 10 + ["js"] * 10
    assert len({task.key for task in chosen}) == 30  # without replacement
    assert chosen == sample_tasks(tasks, ["py", "java", "js"], 10, seed=0)  # the same seed, the same tasks
    other = sample_tasks(tasks, ["py", "java", "js"], 10, seed=1)
    for language in ("py", "java", "js"):  # another seed, other tasks, in every language
        assert {t.key for t in chosen if t.language == language} != {t.key for t in other if t.language == language}
    # each language is drawn on its own: leaving one out or reordering leaves the others' draws as they were
    assert sample_tasks(tasks, ["js", "py"], 10, seed=0) == chosen[20:] + chosen[:10]
    assert len(sample_tasks(tasks, ["py"], 45, seed=0)) == 40  # a language with fewer: all of it
    assert sample_tasks(tasks, ["java"], None, seed=3) == [task for task in tasks if task.language == "java"]
    with pytest.raises(ValueError, match="unknown languages go"):
        sample_tasks(tasks, ["py", "go"], 10, seed=0)
    with pytest.raises(ValueError, match="at least 1"):
        sample_tasks(tasks, ["py"], 0, seed=0)


@pytest.mark.unit
def test_qwen_scores_the_first_line_or_the_second_after_a_leading_line_break():
    assert qwen_line("    return x + y\n    }\n") == "return x + y"
    assert qwen_line("\n        length += 1\n    return length") == "length += 1"  # the hole's line break first
    assert qwen_line(" \n\treturn string.length;") == "return string.length;"  # " \n" as Qwen's scorer has it
    assert qwen_line("  \nreturn x") == ""  # two spaces: not Qwen's case, the first line it is
    assert qwen_line("\n") == "" and qwen_line("") == ""
    assert qwen_line("\n\nreturn x") == ""  # the second line only, never a later one
    expected = "return x + y;"
    assert qwen_line("\n    return x + y; // sum") != expected  # a trailing comment fails the exact match
    assert qwen_line("return x + y;\n") == expected and qwen_line("return  x + y;") != expected
    # the served answer starts at the hole's column 0: its first line only, however it starts
    assert served_line("\treturn string.length;\n}") == "return string.length;"
    assert served_line("\nreturn x") == "" and served_line("") == ""


@pytest.mark.unit
def test_the_wilson_interval_matches_newcombes_published_values():
    # Newcombe (1998), Statistics in Medicine 17:857-872, Table I, method 3 (the score interval)
    for successes, trials, low, high in ((81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605),
                                         (0, 20, 0.0, 0.1611), (1, 29, 0.0061, 0.1718)):
        assert wilson(successes, trials) == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))
    assert wilson(30, 30)[1] == 1.0 and wilson(30, 30)[0] == pytest.approx(0.8865, abs=5e-5)
    assert wilson(15, 30) != wilson(15, 60)  # more trials, a narrower interval
    with pytest.raises(ValueError):
        wilson(0, 0)
    with pytest.raises(ValueError):
        wilson(31, 30)


@pytest.mark.unit
def test_a_task_opens_with_an_empty_line_where_its_canonical_line_was():
    tasks = read_tasks(SAMPLE)
    assert sorted({task.language for task in tasks}) == ["java", "js", "py"] and len(tasks) == 9
    for task in tasks:
        lines = task.holed_text.split("\n")
        assert lines[task.hole_line] == ""
        lines[task.hole_line] = task.canonical_solution
        assert "\n".join(lines) == task.prompt + "\n" + task.canonical_solution + "\n" + task.suffix
        assert task.file_name.endswith({"py": ".py", "java": ".java", "js": ".js"}[task.language])
        assert task.expected == task.canonical_solution.strip() and task.expected


@pytest.mark.unit
def test_a_missing_tasks_file_names_the_option(tmp_path):
    args = argparse.Namespace(tasks=tmp_path / "gone.jsonl", languages="py", paths="served", all=False,
                              per_language=3, seed=0)
    with pytest.raises(SystemExit, match="--tasks PATH"):
        _tasks(args)
    args.tasks, args.paths = SAMPLE, "served,model"
    with pytest.raises(SystemExit, match="--paths"):
        _tasks(args)


@pytest.mark.unit
def test_qwens_psm_prompt_cuts_the_left_to_its_last_1472_tokens_and_the_right_to_its_first_512():
    from transformers import AutoTokenizer

    from decoding.weights.capabilities import FimTokens

    tokenizer = AutoTokenizer.from_pretrained(STARTER_TARGET)
    fim = FimTokens(*tokenizer.convert_tokens_to_ids(["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"]))
    left, right = "".join(f"value_{i} = {i}\n" for i in range(900)), "".join(f"other_{i}()\n" for i in range(400))
    left_ids, right_ids = tokenizer.encode(left), tokenizer.encode(right)
    assert len(left_ids) > LEFT_TOKENS == 1472 and len(right_ids) > RIGHT_TOKENS == 512
    ids = psm_prompt_ids(tokenizer, fim, left, right)
    assert ids == [fim.prefix, *left_ids[-1472:], fim.suffix, *right_ids[:512], fim.middle]
    short = psm_prompt_ids(tokenizer, fim, "def f(x):", "    return y\n")
    assert tokenizer.decode(short) == "<|fim_prefix|>def f(x):<|fim_suffix|>    return y\n<|fim_middle|>"


@pytest.mark.unit
def test_the_scored_line_is_complete_once_a_line_break_follows_it():
    assert not line_complete("    return x") and line_complete("    return x\n")
    assert not line_complete("\n    return x") and line_complete("\n    return x\n    }")
    assert not line_complete(" \nreturn x") and line_complete(" \nreturn x\n")
    assert line_complete("  \nreturn x")  # two spaces: Qwen scores the first line, already complete
    assert not line_complete("") and not line_complete("\n")


@pytest.mark.model
def test_the_raw_path_stops_at_the_scored_line_with_the_64_token_runs_tokens():
    from bench.fim_raw import NEW_TOKENS, load_raw_engine
    from decoding.types import GenerationConfig
    from lsp_server.settings import Settings

    engine = load_raw_engine("starter", Settings())
    stopped_early = 0
    for task in read_tasks(SAMPLE):
        prompt_ids = psm_prompt_ids(engine.tokenizer, engine.target.capabilities.fim, task.prompt, task.suffix)
        whole = engine.generate(prompt_ids, GenerationConfig(max_new_tokens=NEW_TOKENS), mode="none", cache_key="whole")
        text, new_ids = greedy_until_line(engine, prompt_ids)
        assert new_ids and new_ids == whole.token_ids[:len(new_ids)]  # the pieces continue as one run does
        assert text == engine.tokenizer.decode(new_ids, skip_special_tokens=True)
        assert qwen_line(text) == qwen_line(whole.text)
        assert line_complete(text) or new_ids == whole.token_ids  # stopped early only where the line is complete
        stopped_early += len(new_ids) < len(whole.token_ids)
    assert stopped_early  # some outputs go on past their scored line: those stop early


def _row(path: str, language: str, name: str, match: bool, empty: bool, line: str = "x") -> dict:
    return {"path": path, "language": language, "name": name, "match": match, "empty": empty,
            "first_line": "" if empty else line, "latency_ms": 100.0 if path == "served" else 50.0}


@pytest.mark.unit
def test_the_summary_counts_served_empty_answers_where_the_model_alone_wrote_a_line():
    rows = [_row("served", "py", "a", True, False), _row("served", "py", "b", False, True),
            _row("served", "py", "c", False, True), _row("served", "java", "a", False, True),
            _row("raw", "py", "a", True, False), _row("raw", "py", "b", False, False),
            _row("raw", "py", "c", False, True), _row("raw", "java", "a", True, False)]
    summary = summarize(rows, ["py", "java", "js"])
    assert list(summary) == ["py", "java", "all"]  # no js rows: no js entry
    py = summary["py"]
    assert py["served"]["matches"] == 1 and py["served"]["exact_pct"] == pytest.approx(33.3)
    assert py["served"]["empty"] == 2 and py["served_empty_raw_not"] == 1  # b: raw wrote a line; c: neither
    assert summary["java"]["served_empty_raw_not"] == 1  # the same name in py does not count for java
    assert summary["all"]["served_empty_raw_not"] == 2 and summary["all"]["raw"]["matches"] == 2
    assert py["served"]["interval_pct"] == [round(100 * x, 1) for x in wilson(1, 3)]
    assert py["published"] == {"qwen2.5-coder-0.5b": 70.3, "qwen2.5-coder-1.5b": 77.0}
    assert "served_empty_raw_not" not in summarize(rows[:4], ["py"])["py"]  # served alone: not known


def _server_prompt(tokenizer, ids: list[int]) -> tuple[str, str]:
    """(the text before the cursor, the text after it) in a FIM prompt the server built."""
    text = tokenizer.decode(ids)
    before, rest = text.removeprefix("<|fim_prefix|>").split("<|fim_suffix|>")
    after, tail = rest.split("<|fim_middle|>")
    return before + tail, after


@pytest.mark.e2e
def test_both_paths_end_to_end_on_the_starter_pair(tmp_path):
    from transformers import AutoTokenizer

    done = subprocess.run(
        [sys.executable, "-m", "lsp_server.cli", "bench", "fim-eval", "--tasks", str(SAMPLE), "--per-language", "2",
         *STARTER_FLAGS, "--setting", "trace.level=verbose", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "fim_eval.json").read_text())
    tasks = sample_tasks(read_tasks(SAMPLE), ["py", "java", "js"], 2, seed=0)
    by_key = {task.key: task for task in tasks}
    served = [row for row in result["rows"] if row["path"] == "served"]
    raw = [row for row in result["rows"] if row["path"] == "raw"]
    assert [f"{r['language']}/{r['name']}" for r in served] == [f"{r['language']}/{r['name']}" for r in raw] == list(by_key)
    assert result["served"]["model"] == "starter" and "models ready" in result["served"]["load_message"]
    assert result["raw_model"] == "starter" and result["cpu_kind"]
    tokenizer = AutoTokenizer.from_pretrained(STARTER_TARGET)
    for row in served:
        task = by_key[f"{row['language']}/{row['name']}"]
        assert row["expected"] == task.canonical_solution.strip() and row["status"] == "ok" and row["error"] is None
        assert row["latency_ms"] > 0 and row["server_ms"] > 0 and row["prompt_tokens"] > 3
        assert row["first_line"] == row["answer"].split("\n")[0].strip() and row["empty"] == (not row["answer"].strip())
        # what the server saw: the task's text up to the hole, and after it the suffix; no canonical line
        before, after = _server_prompt(tokenizer, row["prompt_ids"])
        # the text before the cursor, less at most its last token (token healing backs it off)
        assert (task.prompt + "\n").startswith(before) and len(task.prompt + "\n") - len(before) <= 8
        assert ("\n" + task.suffix).startswith(after) and (after.strip() or not task.suffix.strip())
        assert task.prompt + "\n" + task.canonical_solution not in tokenizer.decode(row["prompt_ids"])
    for row in raw:
        task = by_key[f"{row['language']}/{row['name']}"]
        assert row["expected"] == task.expected and row["first_line"] == qwen_line(row["answer"])
        assert row["latency_ms"] > 0 and 0 < row["new_tokens"] <= 64 and row["prompt_tokens"] > 3
    assert result["summary"]["all"]["served"]["tasks"] == 6 == result["summary"]["all"]["raw"]["tasks"]
    assert result["empty_served"] == [f"{r['language']}/{r['name']}" for r in served if r["empty"]]
    assert "language | published qwen2.5-coder-0.5b" in done.stdout and "served by starter" in done.stdout
