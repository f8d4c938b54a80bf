// The status bar's text and tooltip from the server's `speclsp/status` payload (no `vscode` import).

/** The payload of the server's `speclsp/status` notification and request. */
export interface ServerStatus {
  state: "idle" | "loading" | "ready" | "error" | "stopped";
  message?: string;
  model?: string | null;
  draftModel?: string | null;
  device?: string | null;
  lastLatencyMs?: number;
  tokensPerPass?: number;
  acceptance?: number | null;
}

export interface StatusView {
  text: string; // with VS Code codicons, e.g. "$(check)"
  tooltip: string;
  isError: boolean;
}

/** What the status bar shows for `status`. */
export function statusView(status: ServerStatus): StatusView {
  const lines = [`speclsp: ${status.message ?? status.state}`];
  if (status.model) {
    lines.push(`target: ${status.model}`, `draft: ${status.draftModel ?? "none"}`);
  }
  if (status.device) {
    lines.push(`device: ${status.device}`);
  }
  switch (status.state) {
    case "loading":
      return { text: "$(sync~spin) speclsp: loading", tooltip: lines.join("\n"), isError: false };
    case "error":
      return { text: "$(error) speclsp", tooltip: lines.join("\n"), isError: true };
    case "stopped":
      return { text: "$(circle-slash) speclsp", tooltip: lines.join("\n"), isError: true };
    case "idle":
      return { text: "$(circle-outline) speclsp", tooltip: lines.join("\n"), isError: false };
  }
  const parts = ["$(check) speclsp"];
  if (status.lastLatencyMs !== undefined) {
    parts.push(`${Math.round(status.lastLatencyMs)} ms`);
    lines.push(`last completion: ${status.lastLatencyMs.toFixed(1)} ms`);
  }
  if (status.acceptance !== undefined && status.acceptance !== null) {
    parts.push(`${Math.round(status.acceptance * 100)}% accepted`);
    lines.push(`draft acceptance: ${(status.acceptance * 100).toFixed(1)}%`);
  }
  if (status.tokensPerPass !== undefined) {
    lines.push(`tokens per target pass: ${status.tokensPerPass.toFixed(2)}`);
  }
  return { text: parts.join(" · "), tooltip: lines.join("\n"), isError: false };
}
