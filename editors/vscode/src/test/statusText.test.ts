import * as assert from "node:assert/strict";
import { test } from "node:test";

import { statusView } from "../statusText";

test("ready with figures shows latency and acceptance", () => {
  const view = statusView({ state: "ready", message: "models ready", model: "qwen2.5-coder-1.5b", draftModel: "qwen2.5-coder-0.5b",
    device: "cpu", lastLatencyMs: 41.6, tokensPerPass: 2.5, acceptance: 0.784 });
  assert.equal(view.text, "$(check) speclsp · 42 ms · 78% accepted");
  assert.match(view.tooltip, /tokens per target pass: 2\.50/);
  assert.match(view.tooltip, /target: qwen2.5-coder-1.5b/);
  assert.equal(view.isError, false);
});

test("ready without drafts omits acceptance", () => {
  assert.equal(statusView({ state: "ready", lastLatencyMs: 10, acceptance: null }).text, "$(check) speclsp · 10 ms");
});

test("loading spins and error is flagged", () => {
  assert.match(statusView({ state: "loading" }).text, /sync~spin/);
  const error = statusView({ state: "error", message: "model loading failed: no such directory" });
  assert.equal(error.isError, true);
  assert.match(error.tooltip, /no such directory/);
});
