// Settings mapping and server-command resolution: the extension's own logic, kept free of the
// `vscode` module so node's test runner can exercise it without VS Code.

import * as os from "os";
import * as path from "path";

/** Server settings, named as the server reads them (camelCase keys of section `speclsp`). */
export const SERVER_SETTINGS = [
  "model",
  "draftModel",
  "device",
  "dtype",
  "quantization",
  "engine",
  "completionModel",
  "trustRemoteCode",
  "drafter",
  "maxNewTokens",
  "temperature",
  "topK",
  "topP",
  "maxDraftTokens",
  "draftMinConfidence",
  "tokenHealing",
  "promptLayout",
  "promptTailLines",
  "completeAhead",
  "timeBudgetMs",
  "prefixTokens",
  "suffixTokens",
  "traceLevel",
  "traceFile",
  "extraTokens",
  "indexEnabled",
  "indexInclude",
  "indexExclude",
  "maxFileBytes",
  "indexMaxTokens",
  "backend",
  "endpoint",
  "apiKeyEnv",
  "remoteModel",
  "remoteTimeoutSeconds",
  "nextEditRegionLines",
  "nextEditPromptFormat",
  "nextEditPrefill",
  "nextEditSuggestAhead",
  "nextEditModel",
  "nextEditMaxNewTokens",
] as const;

/** Settings the extension itself uses; changing one restarts the server. */
export const CLIENT_SETTINGS = ["server.command", "server.pythonPath"] as const;

/** Reads a setting of section `speclsp` (VS Code's `WorkspaceConfiguration.get`, or a test double). */
export type SettingReader = (key: string) => unknown;

/**
 * The object sent as `initializationOptions` and in `workspace/didChangeConfiguration`
 * (as `{speclsp: ...}`): every server setting that has a value. Client-only settings never go to
 * the server, which would warn about unknown keys.
 */
export function serverSettings(read: SettingReader): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of SERVER_SETTINGS) {
    const value = read(key);
    if (value !== undefined && value !== null) {
      out[key] = value;
    }
  }
  return out;
}

export interface ServerCommand {
  command: string;
  args: string[];
}

export interface ResolveContext {
  workspaceFolder?: string; // first workspace folder's path, for ${workspaceFolder}
  home?: string; // home directory, for a leading ~
  platform?: NodeJS.Platform;
}

/** `~` and `${workspaceFolder}` / `${userHome}` in a path-like setting, expanded. */
export function expandPath(value: string, ctx: ResolveContext = {}): string {
  const home = ctx.home ?? os.homedir();
  let out = value.replace(/\$\{userHome\}/g, home);
  if (ctx.workspaceFolder !== undefined) {
    out = out.replace(/\$\{workspaceFolder\}/g, ctx.workspaceFolder);
  }
  if (out === "~" || out.startsWith("~/") || out.startsWith("~\\")) {
    out = path.join(home, out.slice(1));
  }
  return out;
}

/**
 * How to start the server, in order of precedence:
 * 1. `speclsp.server.command` (non-empty array of strings): run it as given;
 * 2. `speclsp.server.pythonPath`: `<python> -P -m lsp_server.cli serve` (`-P`: not the working folder first on
 *    the module path);
 * 3. `speclsp serve` from PATH.
 *
 * @throws Error when `server.command` is set but is not a list of non-empty strings.
 */
export function resolveServerCommand(read: SettingReader, ctx: ResolveContext = {}): ServerCommand {
  const command = read("server.command");
  if (command !== undefined && command !== null && !(Array.isArray(command) && command.length === 0)) {
    if (!Array.isArray(command) || !command.every((part) => typeof part === "string" && part.length > 0)) {
      throw new Error(
        `speclsp.server.command must be a list of non-empty strings, e.g. ["speclsp", "serve"]; got ${JSON.stringify(command)}`,
      );
    }
    const [head, ...args] = command as string[];
    return { command: expandPath(head, ctx), args: args.map((arg) => expandPath(arg, ctx)) };
  }
  const python = read("server.pythonPath");
  if (typeof python === "string" && python.trim() !== "") {
    return { command: expandPath(python.trim(), ctx), args: ["-P", "-m", "lsp_server.cli", "serve"] };
  }
  return { command: "speclsp", args: ["serve"] };
}

/** Whether a configuration change needs a server restart (true) or just a settings notification. */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return CLIENT_SETTINGS.some((key) => affects(`speclsp.${key}`));
}
