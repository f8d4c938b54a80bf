// Settings mapping and server-command resolution: the extension's own logic, kept free of the
// `vscode` module so node's test runner can exercise it without VS Code.

import * as os from "os";
import * as path from "path";

/** Server settings, named as the server reads them: `group.key` of section `speclsp` (lsp_server/settings/spec.py). */
export const SERVER_SETTINGS = [
  "model.target",
  "model.draft",
  "model.device",
  "model.dtype",
  "model.quantization",
  "model.engine",
  "model.trustRemoteCode",
  "decoding.drafter",
  "decoding.maxDraftTokens",
  "decoding.draftMinConfidence",
  "decoding.temperature",
  "decoding.topK",
  "decoding.topP",
  "completion.model",
  "completion.maxNewTokens",
  "completion.prefixTokens",
  "completion.suffixTokens",
  "completion.extraTokens",
  "completion.coldPromptMs",
  "completion.answerByMs",
  "completion.tokenHealing",
  "completion.promptLayout",
  "completion.promptTailLines",
  "completion.ahead",
  "completion.timeBudgetMs",
  "nextEdit.model",
  "nextEdit.regionLines",
  "nextEdit.promptFormat",
  "nextEdit.maxNewTokens",
  "nextEdit.prefill",
  "nextEdit.suggestAhead",
  "index.enabled",
  "index.include",
  "index.exclude",
  "index.maxFileBytes",
  "index.maxTokens",
  "trace.level",
  "trace.file",
  "remote.backend",
  "remote.endpoint",
  "remote.apiKeyEnv",
  "remote.model",
  "remote.timeoutSeconds",
] as const;

/**
 * The flat names of the release before and their keys now. Deprecated in the manifest; a value the user
 * still has under one is forwarded by that name, and the server warns with the new key.
 */
export const RENAMED_SETTINGS: Readonly<Record<string, string>> = {
  draftModel: "model.draft",
  device: "model.device",
  dtype: "model.dtype",
  quantization: "model.quantization",
  engine: "model.engine",
  trustRemoteCode: "model.trustRemoteCode",
  drafter: "decoding.drafter",
  maxDraftTokens: "decoding.maxDraftTokens",
  draftMinConfidence: "decoding.draftMinConfidence",
  temperature: "decoding.temperature",
  topK: "decoding.topK",
  topP: "decoding.topP",
  completionModel: "completion.model",
  maxNewTokens: "completion.maxNewTokens",
  prefixTokens: "completion.prefixTokens",
  suffixTokens: "completion.suffixTokens",
  extraTokens: "completion.extraTokens",
  coldPromptMs: "completion.coldPromptMs",
  answerByMs: "completion.answerByMs",
  tokenHealing: "completion.tokenHealing",
  promptLayout: "completion.promptLayout",
  promptTailLines: "completion.promptTailLines",
  completeAhead: "completion.ahead",
  timeBudgetMs: "completion.timeBudgetMs",
  nextEditModel: "nextEdit.model",
  nextEditRegionLines: "nextEdit.regionLines",
  nextEditPromptFormat: "nextEdit.promptFormat",
  nextEditMaxNewTokens: "nextEdit.maxNewTokens",
  nextEditPrefill: "nextEdit.prefill",
  nextEditSuggestAhead: "nextEdit.suggestAhead",
  indexEnabled: "index.enabled",
  indexInclude: "index.include",
  indexExclude: "index.exclude",
  maxFileBytes: "index.maxFileBytes",
  indexMaxTokens: "index.maxTokens",
  traceLevel: "trace.level",
  traceFile: "trace.file",
  backend: "remote.backend",
  endpoint: "remote.endpoint",
  apiKeyEnv: "remote.apiKeyEnv",
  remoteModel: "remote.model",
  remoteTimeoutSeconds: "remote.timeoutSeconds",
};

/** Settings the extension itself uses; changing one restarts the server. */
export const CLIENT_SETTINGS = ["server.command", "server.pythonPath"] as const;

/** Reads a setting of section `speclsp` (VS Code's `WorkspaceConfiguration.get`, or a test double). */
export type SettingReader = (key: string) => unknown;

/**
 * The object sent as `initializationOptions` and in `workspace/didChangeConfiguration` (as
 * `{speclsp: ...}`): every server setting that has a value, nested by group (`{completion: {maxNewTokens:
 * 64}}`), plus the deprecated flat names the user set (`readSet`: only a value the user wrote, never a
 * default). Client-only settings never go to the server, which would warn about unknown keys.
 */
export function serverSettings(read: SettingReader, readSet: SettingReader = () => undefined): Record<string, unknown> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const key of SERVER_SETTINGS) {
    const value = read(key);
    if (value !== undefined && value !== null) {
      const [group, name] = key.split(".");
      out[group] = { ...out[group], [name]: value };
    }
  }
  const flat: Record<string, unknown> = {};
  for (const old of Object.keys(RENAMED_SETTINGS)) {
    const value = readSet(old);
    if (value !== undefined && value !== null) {
      flat[old] = value;
    }
  }
  return { ...flat, ...out };
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
