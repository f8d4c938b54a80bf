// The next-edit preview in VS Code: `speclsp.nextEdit` asks the server (`speclsp/nextEdit`) for the
// edits that carry the recent changes through the region around the cursor, shows them as
// decorations (replaced text struck through, new text after it), and `speclsp.acceptNextEdit` applies
// them as one WorkspaceEdit while the document is still at the version the server answered for;
// `speclsp.dismissNextEdit`, editing the document or switching editors drop the preview.

import * as vscode from "vscode";
import { LanguageClient } from "vscode-languageclient/node";

import {
  LspPosition,
  LspRange,
  NEXT_EDIT_COMMANDS,
  NEXT_EDIT_METHOD,
  NEXT_EDIT_VISIBLE,
  NextEditReady,
  NextEditResult,
  isCurrent,
  showsReady,
  previewPlan,
  sortedEdits,
  summary,
} from "./nextEdit";

interface Shown {
  editor: vscode.TextEditor;
  result: NextEditResult;
}

function asPosition(position: LspPosition): vscode.Position {
  return new vscode.Position(position.line, position.character);
}

function asRange(range: LspRange): vscode.Range {
  return new vscode.Range(asPosition(range.start), asPosition(range.end));
}

export class NextEditPreview implements vscode.Disposable {
  private readonly deleted = vscode.window.createTextEditorDecorationType({
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
    textDecoration: "line-through",
  });
  private readonly inserted = vscode.window.createTextEditorDecorationType({});
  private shown: Shown | undefined;
  private pending: vscode.CancellationTokenSource | undefined;
  private readonly subscriptions: vscode.Disposable[];

  constructor(private readonly client: () => LanguageClient | undefined) {
    this.subscriptions = [
      vscode.commands.registerCommand(NEXT_EDIT_COMMANDS.request, () => this.request()),
      vscode.commands.registerCommand(NEXT_EDIT_COMMANDS.accept, () => this.accept()),
      vscode.commands.registerCommand(NEXT_EDIT_COMMANDS.dismiss, () => this.dismiss()),
      vscode.workspace.onDidChangeTextDocument((event) => {
        if (this.shown && event.document === this.shown.editor.document && event.contentChanges.length > 0) {
          this.dismiss(); // the preview no longer shows what accepting would do
        }
      }),
      vscode.window.onDidChangeActiveTextEditor(() => this.dismiss()),
    ];
  }

  /** The server wrote a suggestion ahead (`speclsp/nextEditReady`): preview it while the user still sees
   * that document as it was, and nothing else is shown or asked (the request is answered from it at once). */
  async ready(ready: NextEditReady): Promise<void> {
    const client = this.client();
    const editor = vscode.window.activeTextEditor;
    if (client === undefined || editor === undefined) {
      return;
    }
    const uri = client.code2ProtocolConverter.asUri(editor.document.uri);
    if (showsReady(ready, uri, editor.document.version, this.shown !== undefined || this.pending !== undefined)) {
      await this.request();
    }
  }

  /** Ask for the next edit at the active editor's cursor (cancelling a request in flight) and preview it. */
  async request(): Promise<void> {
    const client = this.client();
    const editor = vscode.window.activeTextEditor;
    if (client === undefined || !client.isRunning() || editor === undefined) {
      void vscode.window.showWarningMessage("speclsp: no server running for this editor");
      return;
    }
    this.dismiss();
    const source = new vscode.CancellationTokenSource();
    this.pending = source;
    const document = editor.document;
    const version = document.version;
    let result: NextEditResult | null;
    try {
      result = await client.sendRequest<NextEditResult | null>(NEXT_EDIT_METHOD, {
        textDocument: { uri: client.code2ProtocolConverter.asUri(document.uri) },
        position: client.code2ProtocolConverter.asPosition(editor.selection.active),
      }, source.token);
    } catch (err) {
      if (!source.token.isCancellationRequested) {
        void vscode.window.showWarningMessage(`speclsp: next edit failed: ${err instanceof Error ? err.message : err}`);
      }
      return;
    } finally {
      if (this.pending === source) {
        this.pending = undefined;
      }
      source.dispose();
    }
    if (source.token.isCancellationRequested || vscode.window.activeTextEditor !== editor) {
      return; // superseded or dismissed
    }
    if (result === null || result.edits.length === 0) {
      vscode.window.setStatusBarMessage("speclsp: no edit to suggest here", 3000);
      return;
    }
    if (document.version !== version || !isCurrent(result, document.version)) {
      return; // the document changed while the server worked
    }
    this.show(editor, result);
  }

  private show(editor: vscode.TextEditor, result: NextEditResult): void {
    const plan = previewPlan(result.edits);
    editor.setDecorations(this.deleted, plan.deletions.map(asRange));
    editor.setDecorations(this.inserted, plan.insertions.map((insertion) => ({
      range: new vscode.Range(asPosition(insertion.at), asPosition(insertion.at)),
      renderOptions: {
        after: {
          contentText: insertion.label,
          backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
        },
      },
    })));
    this.shown = { editor, result };
    void vscode.commands.executeCommand("setContext", NEXT_EDIT_VISIBLE, true);
    vscode.window.setStatusBarMessage(`speclsp: next edit: ${summary(result)} (Tab to accept, Esc to dismiss)`, 5000);
  }

  /** Apply the shown edits; refused (and the preview dropped) when the document changed since. */
  async accept(): Promise<boolean> {
    const shown = this.shown;
    this.dismiss();
    if (shown === undefined) {
      return false;
    }
    const document = shown.editor.document;
    if (!isCurrent(shown.result, document.version)) {
      void vscode.window.showWarningMessage("speclsp: the document changed since the suggestion; not applied");
      return false;
    }
    const edit = new vscode.WorkspaceEdit();
    edit.set(document.uri, sortedEdits(shown.result.edits).map((e) => vscode.TextEdit.replace(asRange(e.range), e.newText)));
    return vscode.workspace.applyEdit(edit);
  }

  /** Drop the preview and stop a request in flight. */
  dismiss(): void {
    this.pending?.cancel();
    this.pending = undefined;
    if (this.shown !== undefined) {
      this.shown.editor.setDecorations(this.deleted, []);
      this.shown.editor.setDecorations(this.inserted, []);
      this.shown = undefined;
      void vscode.commands.executeCommand("setContext", NEXT_EDIT_VISIBLE, false);
    }
  }

  dispose(): void {
    this.dismiss();
    this.deleted.dispose();
    this.inserted.dispose();
    for (const subscription of this.subscriptions) {
      subscription.dispose();
    }
  }
}
