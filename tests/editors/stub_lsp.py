"""A stub language server for editor-plugin tests: JSON-RPC over stdio that answers ``speclsp/nextEdit``
with canned edits, so a plugin's preview/accept/dismiss can be driven without models.

    python stub_lsp.py SCRIPT.json LOG.jsonl

``SCRIPT.json``: ``{"answers": [ANSWER, ...], "delay_s": 0}``; the n-th ``speclsp/nextEdit`` gets the
n-th answer (the last one repeats): ``null`` or ``{"edits": [...], "range": ..., "text": ...}``, to which
the stub adds ``version`` (the document's version as the client last reported it) and ``stats``. With
``delay_s`` each answer waits that long, and a ``$/cancelRequest`` for it in the meantime gets the
RequestCancelled error instead. ``"inline"`` (optional): the item every ``textDocument/inlineCompletion``
gets (``{"items": [ITEM]}``; without it, no items). ``"ready_lag"`` (optional, an int): after each
``didChange`` the stub sends ``speclsp/nextEditReady`` for the document's version minus ``ready_lag`` (0: as
it is; 1: a version the client has left), at ``{"line": 0, "character": 4}``. Every message received is appended to ``LOG.jsonl``, with the
document's text after each change, so a test can see what the client sent.
"""

from __future__ import annotations

import json
import sys
import threading

REQUEST_CANCELLED = -32800


class Stub:
    def __init__(self, script: dict, log_path: str):
        self.answers = script["answers"]
        self.inline = script.get("inline")
        self.ready_lag = script.get("ready_lag")
        self.delay_s = float(script.get("delay_s", 0))
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
        self.documents: dict[str, dict] = {}  # uri -> {"text", "version"}
        self.cancelled: set = set()
        self.write_lock = threading.Lock()
        self.next_edits = 0

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        with self.write_lock:
            sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            sys.stdout.buffer.flush()

    def record(self, message: dict, **extra) -> None:
        self.log.write(json.dumps({**message, **extra}) + "\n")
        self.log.flush()

    def change(self, params: dict) -> None:
        document = self.documents[params["textDocument"]["uri"]]
        document["version"] = params["textDocument"]["version"]
        for change in params["contentChanges"]:
            if "range" in change:  # the stub keeps only whole-text sync's text; ranges are logged
                document["text"] = None
            else:
                document["text"] = change["text"]

    def next_edit(self, message: dict) -> None:
        answer = self.answers[min(self.next_edits, len(self.answers) - 1)]
        self.next_edits += 1
        uri = message["params"]["textDocument"]["uri"]
        if answer is not None:
            answer = {**answer, "version": self.documents[uri]["version"],
                      "stats": {"tokens": 1, "passes": 1, "tokens_per_pass": 1.0, "accepted": {}, "total_ms": 0.0}}

        def reply() -> None:
            if message["id"] in self.cancelled:
                self.send({"id": message["id"], "error": {"code": REQUEST_CANCELLED, "message": "cancelled"}})
            else:
                self.send({"id": message["id"], "result": answer})

        if self.delay_s > 0:
            threading.Timer(self.delay_s, reply).start()
        else:
            reply()

    def handle(self, message: dict) -> bool:
        """Answer one message; False after ``exit``."""
        method = message.get("method")
        if method == "initialize":
            self.send({"id": message["id"], "result": {"capabilities": {"textDocumentSync": 1},
                                                       "serverInfo": {"name": "stub"}}})
        elif method == "textDocument/didOpen":
            item = message["params"]["textDocument"]
            self.documents[item["uri"]] = {"text": item["text"], "version": item["version"]}
        elif method == "textDocument/didChange":
            self.change(message["params"])
            if self.ready_lag is not None:
                uri = message["params"]["textDocument"]["uri"]
                version = self.documents[uri]["version"] - self.ready_lag
                self.send({"method": "speclsp/nextEditReady", "params": {
                    "textDocument": {"uri": uri, "version": version}, "position": {"line": 0, "character": 4}}})
        elif method == "$/cancelRequest":
            self.cancelled.add(message["params"]["id"])
        elif method == "speclsp/nextEdit":
            self.next_edit(message)
        elif method == "textDocument/inlineCompletion":
            self.send({"id": message["id"], "result": {"items": [self.inline] if self.inline else []}})
        elif method == "shutdown":
            self.send({"id": message["id"], "result": None})
        elif method == "exit":
            return False
        elif "id" in message and method is not None:
            self.send({"id": message["id"], "error": {"code": -32601, "message": f"stub: no {method}"}})
        uri = (message.get("params") or {}).get("textDocument", {}).get("uri") if isinstance(message.get("params"), dict) else None
        self.record(message, document=self.documents.get(uri))
        return True


def read_message(stream) -> dict | None:
    length = None
    while True:
        line = stream.readline()
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return json.loads(stream.read(length))


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        stub = Stub(json.load(handle), sys.argv[2])
    while (message := read_message(sys.stdin.buffer)) is not None and stub.handle(message):
        pass


if __name__ == "__main__":
    main()
