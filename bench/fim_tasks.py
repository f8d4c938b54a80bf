"""HumanEval-FIM single-line, the tasks of ``speclsp bench fim-eval``: reading them, the stratified
sample, the two scorers, the Wilson interval and the published rows.

A task is one line cut out of a HumanEval solution (Python) or of its MultiPL-E translation (Java,
JavaScript): bigcode's SantaCoder FIM set, as the rows of
``qwencoder-eval/base/benchmarks/fim-bench/hm_fim/data/train.parquet`` in the QwenLM/Qwen2.5-Coder
repository (Apache-2.0; HumanEval: MIT). Fields: ``name``, ``language`` (``py``, ``java``, ``js``),
``prompt`` (the text before the hole, without the line break that ends it), ``suffix`` (the text after the
hole's line break), ``canonical_solution`` (the removed line, indentation included). The original text
is ``prompt + "\\n" + canonical_solution + "\\n" + suffix``.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

#: Where the 4,792 tasks are kept outside the repository (``--tasks`` names another file): the
#: workspace's shared data folder beside the checkout, then the machine's.
TASKS_CANDIDATES = (Path(__file__).resolve().parents[2] / "shared/data/humaneval-fim/tasks.jsonl",
                    Path("/work/shared/data/humaneval-fim/tasks.jsonl"))
#: language -> (LSP language id, file extension): the server tells languages apart by either.
LANGUAGES = {"py": ("python", ".py"), "java": ("java", ".java"), "js": ("javascript", ".js")}
FIELDS = ("name", "language", "prompt", "suffix", "canonical_solution")
#: Exact match, % of tasks, of the base models: the Qwen2.5-Coder technical report, Table 7 (greedy, PSM
#: prompt, left context 1,472 tokens, right 512, 64 new tokens; ``all``: weighted by the tasks per language).
PUBLISHED = {"qwen2.5-coder-0.5b": {"py": 70.3, "java": 78.1, "js": 81.2, "all": 77.7},
             "qwen2.5-coder-1.5b": {"py": 77.0, "java": 85.6, "js": 85.0, "all": 83.5}}


@dataclass(frozen=True)
class FimTask:
    """One task (see the module docstring)."""

    name: str
    language: str  # a key of LANGUAGES
    prompt: str  # the FIM prefix, without the line break before the hole
    suffix: str  # the FIM suffix, after the hole line's line break
    canonical_solution: str  # the removed line (the FIM middle), its indentation included

    @property
    def key(self) -> str:
        """``language/name``: names repeat across languages (the same HumanEval problem, translated)."""
        return f"{self.language}/{self.name}"

    @property
    def holed_text(self) -> str:
        """The document with the hole removed: an empty line where the canonical line was."""
        return self.prompt + "\n\n" + self.suffix

    @property
    def hole_line(self) -> int:
        """The 0-based line of the empty line in :attr:`holed_text` (the cursor goes to its column 0)."""
        return self.prompt.count("\n") + 1

    @property
    def expected(self) -> str:
        """The canonical line, stripped: what both scorers compare with."""
        return self.canonical_solution.strip()

    @property
    def file_name(self) -> str:
        """A file name for the task with its language's extension, e.g. ``HumanEval_59_largest_prime_factor-L26.java``."""
        stem = "".join(c if c.isalnum() or c in "_-" else "_" for c in self.name.removeprefix("humaneval-"))
        return stem.replace("_json-", "-") + LANGUAGES[self.language][1]


def default_tasks_path() -> Path | None:
    """The first of :data:`TASKS_CANDIDATES` that exists; ``None`` when none does."""
    return next((path for path in TASKS_CANDIDATES if path.is_file()), None)


def read_tasks(path: Path) -> list[FimTask]:
    """The tasks of a JSON-lines file, in file order.

    Raises:
        ValueError: a line that is not a JSON object with the five fields, or an unknown language.
    """
    tasks = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not isinstance(row, dict) or any(not isinstance(row.get(field), str) for field in FIELDS):
            raise ValueError(f"{path}:{number}: a task needs the string fields {', '.join(FIELDS)}")
        if row["language"] not in LANGUAGES:
            raise ValueError(f"{path}:{number}: unknown language {row['language']!r} (known: {', '.join(LANGUAGES)})")
        tasks.append(FimTask(**{field: row[field] for field in FIELDS}))
    return tasks


def sample_tasks(tasks: list[FimTask], languages: list[str], per_language: int | None, seed: int) -> list[FimTask]:
    """A fixed stratified sample: ``per_language`` tasks of each of ``languages`` (all of a language's
    tasks where it has fewer; ``None``: every task), drawn without replacement from that language's tasks
    in file order with ``random.Random(f"{seed}:{language}")``; languages in the order given, each
    language's tasks in the order drawn. The same seed and file give the same tasks on any machine.

    Raises:
        ValueError: an unknown language, or ``per_language`` under 1.
    """
    unknown = [language for language in languages if language not in LANGUAGES]
    if unknown:
        raise ValueError(f"unknown languages {', '.join(unknown)} (known: {', '.join(LANGUAGES)})")
    if per_language is not None and per_language < 1:
        raise ValueError(f"--per-language must be at least 1, got {per_language}")
    chosen = []
    for language in languages:
        own = [task for task in tasks if task.language == language]
        if per_language is None:
            chosen += own
        else:
            chosen += random.Random(f"{seed}:{language}").sample(own, min(per_language, len(own)))
    return chosen


def served_line(answer: str) -> str:
    """The served answer's line scored: its first line, stripped (the cursor is at column 0 of the hole's
    own line, so the answer's first line is the hole's)."""
    return answer.split("\n", 1)[0].strip()


def qwen_line(output: str) -> str:
    """Qwen's scorer (``evaluate_results`` of ``hm_fim/humaneval_fim.py``): the output's first line,
    or its second where the output starts with ``"\\n"`` or ``" \\n"`` (the FIM prefix ends without the
    hole's line break, so the model usually writes it first), stripped; ``""`` where that line is missing."""
    lines = output.split("\n")
    index = 1 if output.startswith(("\n", " \n")) else 0
    return lines[index].strip() if index < len(lines) else ""


def wilson(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of a binomial proportion, as fractions in [0, 1].

    Raises:
        ValueError: ``trials`` under 1, or ``successes`` outside [0, trials].
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"Wilson interval of {successes} in {trials}: needs 0 <= successes <= trials, trials >= 1")
    share = successes / trials
    denominator = 1 + z * z / trials
    centre = (share + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)
