"""The functions a typist types (bench/functions.py), in Python and in the brace languages we parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.functions import file_functions, language_of

pytestmark = pytest.mark.unit

TYPESCRIPT = """import { x } from "y";

export function add(a: number, b: number): number {
  const s = a + b;
  // a comment
  return s;
}

export const mul = (a: number, b: number): number => {
  const p = a * b;
  const q = p;
  return q;
};

class K {
  async run(task: string): Promise<void> {
    if (!task) {
      return;
    }
    await go(task);
  }

  short(): void { return; }
}
"""

RUST = """pub fn parse(text: &str) -> Option<u32> {
    let trimmed = text.trim();
    let value = trimmed.parse().ok()?;
    Some(value)
}

fn tiny() {}
"""


def _bodies(name: str, text: str) -> dict[str, str]:
    return {found.split(" ", 1)[1]: text[start:end] for found, _, start, end in file_functions(Path(name), text)}


def test_typescript_declarations_methods_and_bound_arrows_are_typed_whole_from_their_line():
    bodies = _bodies("pkg/src/ops.ts", TYPESCRIPT)
    assert set(bodies) == {"add", "mul", "run"}  # short() is one line: under the 4-line minimum
    assert bodies["add"].startswith("export function add(") and bodies["add"].endswith("  return s;\n}")
    assert bodies["mul"].startswith("export const mul = (") and bodies["mul"].endswith("};")
    assert bodies["run"].startswith("async run(task") and bodies["run"].endswith("await go(task);\n  }")


def test_names_carry_the_file_and_line_and_the_language_follows_the_extension():
    (name, *_), *_ = file_functions(Path("pkg/src/ops.ts"), TYPESCRIPT)
    assert name == "src/ops.ts:3 add"
    assert [language_of(Path(p)) for p in ("a.ts", "a.tsx", "a.mjs", "a.rs", "a.py", "a.txt")] == [
        "typescript", "typescriptreact", "javascript", "rust", "python", "plaintext"]


def test_rust_functions_and_python_defs_are_found_and_unknown_languages_give_none():
    assert set(_bodies("crate/src/lib.rs", RUST)) == {"parse"}
    python = "def f(x):\n    y = x\n    z = y\n    return z\n"
    assert _bodies("pkg/m.py", python) == {"f": python.rstrip("\n")}
    assert file_functions(Path("notes.txt"), TYPESCRIPT) == []
