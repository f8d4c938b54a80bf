import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import { CLIENT_SETTINGS, RENAMED_SETTINGS, SERVER_SETTINGS, expandPath, needsRestart, resolveServerCommand, serverSettings } from "../config";

const packageJson = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "package.json"), "utf8"));
const properties: Record<string, { default?: unknown; deprecationMessage?: string }> =
  packageJson.contributes.configuration.properties;

function reader(values: Record<string, unknown>) {
  return (key: string) => values[key];
}

test("every contributed setting is either sent to the server or used by the client", () => {
  const contributed = Object.keys(properties).map((key) => key.replace(/^speclsp\./, ""));
  const known = [...SERVER_SETTINGS, ...Object.keys(RENAMED_SETTINGS), ...CLIENT_SETTINGS, "trace.server"];
  assert.deepEqual([...contributed].sort(), [...known].sort());
});

test("serverSettings sends the server's keys only, nested by group, never client settings", () => {
  const values: Record<string, unknown> = {
    "server.command": ["x"], "server.pythonPath": "/py", "model.target": "/m", "decoding.topP": 0.9,
  };
  assert.deepEqual(serverSettings(reader(values)), { model: { target: "/m" }, decoding: { topP: 0.9 } });
});

test("serverSettings forwards a renamed setting only where the user set it, by its old name", () => {
  const user = reader({ maxNewTokens: 7, "server.command": ["x"] });
  assert.deepEqual(serverSettings(reader({ "model.target": "/m" }), user), { maxNewTokens: 7, model: { target: "/m" } });
  assert.equal(RENAMED_SETTINGS.maxNewTokens, "completion.maxNewTokens");
  assert.equal(properties["speclsp.maxNewTokens"].deprecationMessage?.includes("speclsp.completion.maxNewTokens"), true);
});

test("serverSettings with package.json defaults gives every server key", () => {
  const defaults = Object.fromEntries(Object.entries(properties).map(([k, v]) => [k.replace(/^speclsp\./, ""), v.default]));
  const sent = serverSettings(reader(defaults));
  const keys = Object.entries(sent).flatMap(([group, inner]) => Object.keys(inner as object).map((k) => `${group}.${k}`));
  assert.deepEqual(keys.sort(), [...SERVER_SETTINGS].sort());
  const model = sent.model as Record<string, unknown>;
  assert.equal(model.target, "auto");
  assert.equal(model.draft, "auto");
  assert.equal(model.trustRemoteCode, false);
});

test("resolveServerCommand: explicit command wins, with ~ and ${workspaceFolder} expanded", () => {
  const resolved = resolveServerCommand(
    reader({ "server.command": ["~/venv/bin/speclsp", "serve", "${workspaceFolder}/x"], "server.pythonPath": "/usr/bin/python3" }),
    { home: "/home/u", workspaceFolder: "/ws" },
  );
  assert.deepEqual(resolved, { command: path.join("/home/u", "/venv/bin/speclsp"), args: ["serve", "/ws/x"] });
});

test("resolveServerCommand: python path runs the module", () => {
  assert.deepEqual(resolveServerCommand(reader({ "server.command": [], "server.pythonPath": " /opt/py/bin/python " })), {
    command: "/opt/py/bin/python",
    args: ["-P", "-m", "lsp_server.cli", "serve"],
  });
});

test("resolveServerCommand: default is speclsp serve from PATH", () => {
  assert.deepEqual(resolveServerCommand(reader({})), { command: "speclsp", args: ["serve"] });
});

test("resolveServerCommand rejects a malformed command with a message naming the setting", () => {
  assert.throws(() => resolveServerCommand(reader({ "server.command": "speclsp serve" })), /speclsp\.server\.command/);
  assert.throws(() => resolveServerCommand(reader({ "server.command": ["speclsp", ""] })), /non-empty strings/);
});

test("expandPath leaves other text alone", () => {
  assert.equal(expandPath("/a/~b/${workspaceFolder}", { home: "/h" }), "/a/~b/${workspaceFolder}");
  assert.equal(expandPath("${userHome}/m", { home: "/h" }), "/h/m");
});

test("needsRestart only for the client's own settings", () => {
  assert.equal(needsRestart((s) => s === "speclsp.server.pythonPath"), true);
  assert.equal(needsRestart((s) => s === "speclsp.model.target"), false);
});
