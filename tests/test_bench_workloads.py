"""``speclsp bench decode``'s workloads (bench.workloads): the multi-line body cut, and each workload's
prompts independent of the others asked for."""

from __future__ import annotations

import random

import pytest

from bench.workloads import body_prompts, workloads
from decoding.weights.loading import load_tokenizer
from decoding.weights.starter import TARGET_DIR

pytestmark = pytest.mark.unit

SOURCE = "".join(
    f"class Shape{i}:\n"
    f"    def area(self, scale):\n"
    f"        width = self.width * scale\n"
    f"        height = self.height * scale\n"
    f"\n"
    f"        return width * height + {i}\n"
    f"\n"
    f"    def name(self):\n"
    f"        return 'shape{i}'\n\n\n"
    for i in range(40))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(TARGET_DIR), local_only=True)


def test_a_body_prompt_misses_the_whole_body_and_the_cursor_ends_the_def_line(tokenizer):
    special = tokenizer.get_added_vocab()
    pairs = body_prompts([SOURCE], tokenizer, 8, random.Random(0), prefix_tokens=300, suffix_tokens=80)
    assert len(pairs) == 8
    body = "\n        width = self.width * scale\n        height = self.height * scale\n\n        return width * height + "
    for prompt, new_tokens in pairs:
        assert prompt[0] == special["<|fim_prefix|>"] and prompt[-1] == special["<|fim_middle|>"]
        cut = prompt.index(special["<|fim_suffix|>"])
        prefix, suffix = tokenizer.decode(prompt[1:cut]), tokenizer.decode(prompt[cut + 1:-1])
        assert prefix.endswith("    def area(self, scale):")  # only `area` has 3+ body lines
        assert suffix.startswith("\n\n    def name(self):")  # the blank line inside the body went with it
        start = SOURCE.find(prefix)
        missing = SOURCE[start + len(prefix):SOURCE.index(suffix, start)]
        assert missing.startswith(body) and missing.count("\n") == 4 and missing[-1].isdigit()
        assert new_tokens == len(tokenizer.encode(missing, add_special_tokens=False))


def test_a_workloads_prompts_do_not_depend_on_the_others_asked_for(tokenizer, tmp_path):
    functions = "".join(f"def total_{i}(values):\n    result = 0\n    for value in values:\n        result += value\n"
                        f"    return result * {i}\n\n\n" for i in range(20))
    (tmp_path / "shapes.py").write_text(SOURCE * 3 + functions, encoding="utf-8")
    every = workloads(tokenizer, True, 1, str(tmp_path))
    assert set(every) == {"edit", "fim", "body", "entropy"} and all(every.values())
    for name in every:
        assert workloads(tokenizer, True, 1, str(tmp_path), (name,)) == {name: every[name]}
    with pytest.raises(ValueError, match="unknown workloads"):
        workloads(tokenizer, True, 1, str(tmp_path), ("edit", "poetry"))
