import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import {
  LspTextEdit,
  NEXT_EDIT_COMMANDS,
  NEXT_EDIT_VISIBLE,
  NextEditResult,
  applyEdits,
  insertionLabel,
  isCurrent,
  previewPlan,
  showsReady,
  summary,
} from "../nextEdit";

const packageJson = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));

// The user renamed `width` to `w` on the definition line; the emoji (two UTF-16 code units) before
// some occurrences makes a code-point or byte offset land elsewhere.
const EDITED = 'def area(w, height):\n    label = "🙂"; total = width * height\r\n    if width < 0 or width > 99:\n        raise ValueError(width)\n';

function renameEdits(text: string, old: string, renamed: string): LspTextEdit[] {
  const edits: LspTextEdit[] = [];
  text.split("\n").forEach((line, row) => {
    if (row === 0) {
      return;
    }
    for (let at = line.indexOf(old); at !== -1; at = line.indexOf(old, at + old.length)) {
      edits.push({ range: { start: { line: row, character: at }, end: { line: row, character: at + old.length } }, newText: renamed });
    }
  });
  return edits;
}

test("applyEdits carries a rename through every occurrence, in UTF-16 positions, CRLF lines included", () => {
  const edits = renameEdits(EDITED, "width", "w");
  assert.equal(edits.length, 4);
  assert.equal(edits[0].range.start.character, 26); // after the emoji: 2 code units, 1 code point
  const expected = 'def area(w, height):\n    label = "🙂"; total = w * height\r\n    if w < 0 or w > 99:\n        raise ValueError(w)\n';
  assert.equal(applyEdits(EDITED, [...edits].reverse()), expected); // any order
});

test("applyEdits: insertions, deletions across lines, a position past the line's end or the last line", () => {
  const text = "ab\ncd\r\nef";
  assert.equal(applyEdits(text, [{ range: { start: { line: 0, character: 1 }, end: { line: 2, character: 1 } }, newText: "X" }]), "aXf");
  assert.equal(applyEdits(text, [{ range: { start: { line: 1, character: 9 }, end: { line: 1, character: 9 } }, newText: "!" }]), "ab\ncd!\r\nef");
  assert.equal(applyEdits(text, [{ range: { start: { line: 5, character: 0 }, end: { line: 5, character: 0 } }, newText: "\ng" }]), "ab\ncd\r\nef\ng");
  assert.equal(applyEdits(text, []), text);
});

test("overlapping edits are refused", () => {
  const overlapping: LspTextEdit[] = [
    { range: { start: { line: 0, character: 0 }, end: { line: 0, character: 3 } }, newText: "x" },
    { range: { start: { line: 0, character: 2 }, end: { line: 0, character: 4 } }, newText: "y" },
  ];
  assert.throws(() => applyEdits("abcdef", overlapping), /overlapping edits at line 1/);
  assert.throws(() => previewPlan(overlapping), /overlapping/);
});

test("previewPlan marks each replaced range and labels the new text at its end", () => {
  const edits: LspTextEdit[] = [
    { range: { start: { line: 3, character: 4 }, end: { line: 3, character: 4 } }, newText: "x = 1\n    " }, // insertion only
    { range: { start: { line: 1, character: 2 }, end: { line: 1, character: 7 } }, newText: "w" },
    { range: { start: { line: 2, character: 0 }, end: { line: 3, character: 0 } }, newText: "" }, // a deleted line
  ];
  const plan = previewPlan(edits);
  assert.deepEqual(plan.deletions, [edits[1].range, edits[2].range]);
  assert.deepEqual(plan.insertions, [
    { at: { line: 1, character: 7 }, label: "w" },
    { at: { line: 3, character: 4 }, label: "x = 1⏎    " },
  ]);
});

test("insertionLabel keeps one line and a bounded length", () => {
  assert.equal(insertionLabel("a\r\nb\tc"), "a⏎b  c");
  const long = insertionLabel("y".repeat(500), 10);
  assert.equal(long, "yyyyyyyyy…");
  assert.equal(long.length, 10);
});

test("an answer applies only to the version it was computed for", () => {
  const result: NextEditResult = { edits: [], range: { start: { line: 0, character: 0 }, end: { line: 1, character: 0 } }, text: "", version: 7 };
  assert.equal(isCurrent(result, 7), true);
  assert.equal(isCurrent(result, 8), false);
});

test("summary names the edits and the server's figures", () => {
  const edits = renameEdits(EDITED, "width", "w");
  const result: NextEditResult = { edits, range: edits[0].range, text: "", version: 1,
    stats: { tokens: 40, passes: 6, tokens_per_pass: 6.67, accepted: { region: 30 }, total_ms: 210.4 } };
  assert.equal(summary(result), "4 edits · 40 tokens · 6.7 tokens/pass · 210 ms");
  assert.equal(summary({ ...result, edits: edits.slice(0, 1), stats: undefined }), "1 edit");
});

test("package.json contributes the next-edit commands, with keys only while a preview is shown", () => {
  const commands: string[] = packageJson.contributes.commands.map((c: { command: string }) => c.command);
  for (const id of Object.values(NEXT_EDIT_COMMANDS)) {
    assert.ok(commands.includes(id), id);
  }
  const keybindings: { command: string; key: string; when: string }[] = packageJson.contributes.keybindings;
  for (const id of [NEXT_EDIT_COMMANDS.accept, NEXT_EDIT_COMMANDS.dismiss]) {
    const binding = keybindings.find((k) => k.command === id);
    assert.ok(binding, id);
    assert.match(binding.when, new RegExp(`\\b${NEXT_EDIT_VISIBLE.replace(".", "\\.")}\\b`));
  }
  const accept = keybindings.find((k) => k.command === NEXT_EDIT_COMMANDS.accept)!;
  assert.match(accept.when, /!inlineSuggestionVisible/); // Tab still accepts a shown inline completion
});

test("a suggestion written ahead is shown only for the document the user sees, at its version, when nothing else is", () => {
  const ready = { textDocument: { uri: "file:///w/a.py", version: 7 }, position: { line: 0, character: 3 } };
  assert.equal(showsReady(ready, "file:///w/a.py", 7, false), true);
  assert.equal(showsReady(ready, "file:///w/a.py", 8, false), false); // typed since
  assert.equal(showsReady(ready, "file:///w/b.py", 7, false), false); // another editor
  assert.equal(showsReady(ready, undefined, undefined, false), false);
  assert.equal(showsReady(ready, "file:///w/a.py", 7, true), false); // a preview or a request in the way
});
