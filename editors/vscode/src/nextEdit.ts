// Next-edit suggestions: the shapes of a `speclsp/nextEdit` answer and what the preview shows of it,
// kept free of the `vscode` module so node's test runner can exercise them without VS Code.
// Positions are LSP positions in UTF-16 code units, which are VS Code's and JavaScript's string indices.

/** Commands the extension registers for next edits (package.json contributes them). */
export const NEXT_EDIT_COMMANDS = {
  request: "speclsp.nextEdit",
  accept: "speclsp.acceptNextEdit",
  dismiss: "speclsp.dismissNextEdit",
} as const;

/** Context key that is true while a preview is shown; the accept/dismiss keybindings need it. */
export const NEXT_EDIT_VISIBLE = "speclsp.nextEditVisible";

export const NEXT_EDIT_METHOD = "speclsp/nextEdit";

/** Server to client: a suggestion written ahead (setting `nextEdit.suggestAhead`) is ready at `position`. */
export const NEXT_EDIT_READY_METHOD = "speclsp/nextEditReady";

export interface NextEditReady {
  textDocument: { uri: string; version: number };
  position: LspPosition;
}

/** Whether a ready suggestion is for the document the user sees, as it is now, with no preview or request in the way. */
export function showsReady(ready: NextEditReady, activeUri: string | undefined, activeVersion: number | undefined,
                           busy: boolean): boolean {
  return !busy && activeUri === ready.textDocument.uri && activeVersion === ready.textDocument.version;
}

export interface LspPosition {
  line: number; // 0-based
  character: number; // UTF-16 code units
}

export interface LspRange {
  start: LspPosition;
  end: LspPosition;
}

export interface LspTextEdit {
  range: LspRange;
  newText: string;
}

/** The server's answer to `speclsp/nextEdit` (null when nothing should change). */
export interface NextEditResult {
  edits: LspTextEdit[];
  range: LspRange; // the region the server rewrote
  text: string; // the region as it reads after the edits
  version: number; // the document version the edits apply to
  stats?: { tokens?: number; passes?: number; tokens_per_pass?: number; accepted?: Record<string, number>; total_ms?: number };
}

/** What the preview draws: the text the edits replace (struck through) and, at each edit's end, its new text. */
export interface PreviewPlan {
  deletions: LspRange[];
  insertions: { at: LspPosition; label: string }[];
}

function before(a: LspPosition, b: LspPosition): boolean {
  return a.line < b.line || (a.line === b.line && a.character < b.character);
}

/** The edits sorted by start; throws when two overlap (a server answer never has such). */
export function sortedEdits(edits: LspTextEdit[]): LspTextEdit[] {
  const sorted = [...edits].sort((a, b) => (before(a.range.start, b.range.start) ? -1 : before(b.range.start, a.range.start) ? 1 : 0));
  for (let i = 1; i < sorted.length; i++) {
    if (before(sorted[i].range.start, sorted[i - 1].range.end)) {
      throw new Error(`next-edit answer has overlapping edits at line ${sorted[i].range.start.line + 1}`);
    }
  }
  return sorted;
}

/**
 * The display form of inserted text for an `after` decoration, which renders one line: line breaks
 * shown as "⏎", tabs as two spaces, cut to `maxChars` with "…".
 */
export function insertionLabel(text: string, maxChars = 120): string {
  const flat = text.replace(/\r\n|\r|\n/g, "⏎").replace(/\t/g, "  ");
  return flat.length > maxChars ? flat.slice(0, maxChars - 1) + "…" : flat;
}

/** The preview of `edits`: non-empty replaced ranges, and one insertion label per edit that inserts text. */
export function previewPlan(edits: LspTextEdit[]): PreviewPlan {
  const plan: PreviewPlan = { deletions: [], insertions: [] };
  for (const edit of sortedEdits(edits)) {
    if (before(edit.range.start, edit.range.end)) {
      plan.deletions.push(edit.range);
    }
    if (edit.newText !== "") {
      plan.insertions.push({ at: edit.range.end, label: insertionLabel(edit.newText) });
    }
  }
  return plan;
}

/** Whether an answer still applies: the document is at the version the server answered for. */
export function isCurrent(result: NextEditResult, documentVersion: number): boolean {
  return result.version === documentVersion;
}

function offsetAt(text: string, lineStarts: number[], position: LspPosition): number {
  if (position.line >= lineStarts.length) {
    return text.length;
  }
  const start = lineStarts[position.line];
  let end = position.line + 1 < lineStarts.length ? lineStarts[position.line + 1] - 1 : text.length;
  if (end > start && text[end - 1] === "\r") {
    end -= 1; // a position past the line's end is its end, before the line break
  }
  return Math.min(start + position.character, end);
}

/** `text` with `edits` applied (what accepting does to the document's text). */
export function applyEdits(text: string, edits: LspTextEdit[]): string {
  const lineStarts = [0];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "\n") {
      lineStarts.push(i + 1);
    }
  }
  let out = text;
  for (const edit of sortedEdits(edits).reverse()) {
    const start = offsetAt(text, lineStarts, edit.range.start);
    const end = offsetAt(text, lineStarts, edit.range.end);
    out = out.slice(0, start) + edit.newText + out.slice(end);
  }
  return out;
}

/** A one-line summary of an answer for the status bar, e.g. "3 edits · 40 tokens · 6.7 tokens/pass · 210 ms". */
export function summary(result: NextEditResult): string {
  const parts = [`${result.edits.length} edit${result.edits.length === 1 ? "" : "s"}`];
  const stats = result.stats ?? {};
  if (stats.tokens !== undefined) {
    parts.push(`${stats.tokens} tokens`);
  }
  if (stats.tokens_per_pass !== undefined) {
    parts.push(`${stats.tokens_per_pass.toFixed(1)} tokens/pass`);
  }
  if (stats.total_ms !== undefined) {
    parts.push(`${Math.round(stats.total_ms)} ms`);
  }
  return parts.join(" · ");
}
