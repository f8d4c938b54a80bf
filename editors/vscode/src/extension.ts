// speclsp for VS Code: starts `speclsp serve`, shows inline completions (LSP
// textDocument/inlineCompletion, built into vscode-languageclient 10+), keeps the server's settings
// in sync and shows model state, latency and acceptance in the status bar. Next-edit suggestions
// (`speclsp.nextEdit`, previewed as decorations; accept/dismiss) live in nextEditView.ts.

import * as fs from "fs";
import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";

import { needsRestart, resolveServerCommand, serverSettings } from "./config";
import { NEXT_EDIT_READY_METHOD, NextEditReady } from "./nextEdit";
import { NextEditPreview } from "./nextEditView";
import { ServerStatus, statusView } from "./statusText";

const SECTION = "speclsp";
const STATUS_METHOD = "speclsp/status";

let client: LanguageClient | undefined;
let statusItem: vscode.StatusBarItem;
let preview: NextEditPreview | undefined;

function readSetting(key: string): unknown {
  return vscode.workspace.getConfiguration(SECTION).get(key);
}

/** A setting's value only where the user (or the workspace) wrote one, never its default. */
function readUserSetting(key: string): unknown {
  const seen = vscode.workspace.getConfiguration(SECTION).inspect(key);
  return seen?.workspaceFolderValue ?? seen?.workspaceValue ?? seen?.globalValue;
}

function showStatus(status: ServerStatus): void {
  const view = statusView(status);
  statusItem.text = view.text;
  statusItem.tooltip = view.tooltip;
  statusItem.backgroundColor = view.isError ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
  statusItem.show();
}

/** The server's working folder: the workspace when VS Code trusts it; else the extension's own storage,
 * since `python -m` (and a bare command on Windows) would load code from the working folder first. */
function serverCwd(context: vscode.ExtensionContext, workspaceFolder: string | undefined): string | undefined {
  if (vscode.workspace.isTrusted) {
    return workspaceFolder;
  }
  const storage = context.globalStorageUri.fsPath;
  fs.mkdirSync(storage, { recursive: true });
  return storage;
}

function createClient(context: vscode.ExtensionContext): LanguageClient {
  const workspaceFolder = vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
  const server = resolveServerCommand(readSetting, { workspaceFolder });
  const serverOptions: ServerOptions = {
    command: server.command,
    args: server.args,
    transport: TransportKind.stdio,
    options: { cwd: serverCwd(context, workspaceFolder) },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
    initializationOptions: serverSettings(readSetting, readUserSetting),
    outputChannelName: "speclsp",
    traceOutputChannel: vscode.window.createOutputChannel("speclsp trace", { log: true }),
  };
  return new LanguageClient(SECTION, "speclsp", serverOptions, clientOptions);
}

async function start(context: vscode.ExtensionContext): Promise<void> {
  try {
    client = createClient(context);
  } catch (err) {
    showStatus({ state: "error", message: String(err instanceof Error ? err.message : err) });
    void vscode.window.showErrorMessage(String(err instanceof Error ? err.message : err));
    return;
  }
  const started = client;
  context.subscriptions.push(
    started.onNotification(STATUS_METHOD, (status: ServerStatus) => showStatus(status)),
    started.onNotification(NEXT_EDIT_READY_METHOD, (ready: NextEditReady) => void preview?.ready(ready)),
    started.onDidChangeState((event) => {
      if (event.newState === State.Stopped) {
        showStatus({ state: "stopped", message: "server stopped; run 'speclsp: Restart Server'" });
      }
    }),
  );
  showStatus({ state: "loading", message: "starting the server" });
  try {
    await started.start();
    showStatus(await started.sendRequest<ServerStatus>(STATUS_METHOD, {}));
  } catch (err) {
    showStatus({ state: "error", message: `could not start the server: ${err}` });
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 100);
  statusItem.command = "speclsp.showTrace";
  context.subscriptions.push(
    statusItem,
    (preview = new NextEditPreview(() => client)),
    vscode.commands.registerCommand("speclsp.showTrace", () => {
      client?.outputChannel.show(true);
    }),
    vscode.commands.registerCommand("speclsp.restartServer", async () => {
      if (client !== undefined) {
        await client.stop().catch(() => undefined);
        await client.dispose().catch(() => undefined);
        client = undefined;
      }
      await start(context);
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => vscode.commands.executeCommand("speclsp.restartServer")),
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (!event.affectsConfiguration(SECTION) || client === undefined) {
        return;
      }
      if (needsRestart((section) => event.affectsConfiguration(section))) {
        await vscode.commands.executeCommand("speclsp.restartServer");
      } else if (client.isRunning()) {
        await client.sendNotification(DidChangeConfigurationNotification.type, {
          settings: { [SECTION]: serverSettings(readSetting, readUserSetting) },
        });
      }
    }),
  );
  await start(context);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
