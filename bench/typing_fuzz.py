"""``speclsp bench fuzz``: an interleaving fuzz of the typing path against a reference document model.

A seeded random client types into several documents of one ``speclsp serve`` (the starter pair, float32):
keys at the cursor (and keys along the suggestion shown), deletes, pastes, undo-like reverts, cursor
jumps, automatic and invoked inline requests, next-edit requests, ``$/cancelRequest``, saves, closes and
reopens, and configuration changes, without waiting for answers, so requests stay in flight while the
text changes under them. The client's own copy of each document (text, version) is the reference; every
answer is judged against the copy as it was when the request went out (:mod:`bench.fuzz_check`, which
says what counts as stale), and ``speclsp/documentState`` checks the server's copy now and then.

Settings that cut an answer by wall-clock time (``completion.timeBudgetMs``, ``answerByMs``,
``coldPromptMs``) are off, the choices made from measured figures are named (the quantization, the completion model, the
drafter), and the prompt layout is PSM (the typed-tail layout's prompt depends on where
the anchor was set, earlier in the session, so no fresh server can reproduce it): with those, a greedy
float32 answer is a function of the text, the cursor and the settings, and a fresh server must agree.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz_check import Asked, Checker
from bench.fuzz_peer import Peer, utf16_position

#: The fuzzed server's and the reference's settings before any configuration change.
BASE_OPTIONS = {"model.target": "starter", "model.draft": "starter-draft", "model.dtype": "float32",
                "model.quantization": "none", "completion.model": "draft", "decoding.drafter": "ngram",
                "index.enabled": False, "completion.timeBudgetMs": 0, "completion.answerByMs": 0,
                "completion.coldPromptMs": 0, "completion.promptLayout": "psm", "completion.maxNewTokens": 16,
                "nextEdit.regionLines": 8, "nextEdit.maxNewTokens": 160}
#: What a configuration change may set (none reloads the models).
CONFIG_CHOICES = {"completion.maxNewTokens": [8, 16], "completion.ahead": [True, False],
                  "decoding.drafter": ["ngram", "none"], "decoding.maxDraftTokens": [4, 8],
                  "completion.tokenHealing": [True, False], "nextEdit.suggestAhead": [False, True]}
SEED_TEXTS = {
    "file:///fuzz/config.py": ("python", "import os\n\n\ndef read_config(path):\n    with open(path) as handle:\n"
                               "        return handle.read()\n\n\ndef write_"),
    "file:///fuzz/shapes.py": ("python", "class Point:\n    def __init__(self, x, y):\n        self.x = x\n"
                               "        self.y = y\n\n    def norm(self):\n        return "),
    "file:///fuzz/util.js": ("javascript", "function add(a, b) {\n  return a + b;\n}\n\nfunction "),
}
PASTES = ("def scale(self, factor):\n    return Point(self.x * factor, self.y * factor)\n",
          "for name in os.listdir(path):\n    print(name)\n", "    # caf\u00e9 \U0001d518nicode\n", "x = [1, 2, 3]\n")
KEYS = "abcdefghijklmnopqrstuvwxyz_____(),.:= \n\n    \u00e9"
MAX_CHARS = 1000  # a document longer than this loses a piece (prompts stay cheap)
PAUSE_AFTER_REQUEST = 0.3  # how often the client waits for an inline answer before its next step
ANSWER_DEADLINE_S = 60.0  # a request unanswered this long is a crash
#: (action, weight): how often each step does what.
ACTIONS = (("type", 30), ("type_along", 10), ("delete", 8), ("delete_range", 3), ("paste", 4), ("undo", 4),
           ("jump", 6), ("inline_auto", 14), ("inline_invoked", 4), ("next_edit", 3), ("cancel", 3), ("save", 1),
           ("close", 1), ("reopen", 2), ("configure", 1), ("settle", 3), ("state", 3))


@dataclass
class Doc:
    """The client's copy of one document."""

    uri: str
    language: str
    text: str
    version: int = 1
    is_open: bool = True
    opened: int = 0  # how many times it was opened
    cursor: int = 0  # code points
    undo: list = field(default_factory=list)  # (start, end in the new text, old text) per edit, newest last


class Fuzz:
    """One seeded run against ``server``, judged by ``checker``."""

    def __init__(self, server: Peer, checker: Checker, seed: int, record=None):
        self.server, self.checker, self.rng = server, checker, random.Random(seed)
        self.record = record  # a text file: one JSON line per answer judged (None: none)
        self.docs = {uri: Doc(uri, lang, text, cursor=len(text)) for uri, (lang, text) in SEED_TEXTS.items()}
        self.settings = dict(BASE_OPTIONS)
        self.pending: dict[int, tuple[Asked | tuple, float]] = {}  # msg id -> (what was asked, when sent)
        self.last_shown: dict[str, tuple[int, str]] = {}  # uri -> (cursor, suggestion) last answered
        self.actions = [name for name, _ in ACTIONS]
        self.weights = [weight for _, weight in ACTIONS]
        for doc in self.docs.values():
            self._open(doc)

    def run(self, steps: int) -> None:
        """Take ``steps`` random steps, then wait for every answer and check every document once."""
        for _ in range(steps):
            if not self.server.alive():
                self.checker.fault("crash", None, why=f"the server exited ({self.server.process.returncode})")
                return
            getattr(self, "_" + self.rng.choices(self.actions, self.weights)[0])()
            self.collect()
        for doc in self.docs.values():
            self._state(doc)
        self.collect(wait=True)

    # Answers
    def collect(self, wait: bool = False) -> None:
        """Judge the answers that came, in the order they came (an answer from the type-through cache comes
        after the one it continues), and count a request unanswered past the deadline as a crash;
        ``wait``: wait for every answer first, up to the deadline."""
        if wait:
            for msg_id, (_, sent) in list(self.pending.items()):
                self.server.wait(msg_id, max(ANSWER_DEADLINE_S - (time.monotonic() - sent), 0.0))
        for msg_id in self.server.arrived():
            if msg_id in self.pending:
                self._judge(msg_id, self.server.responses[msg_id])
        for msg_id, (_, sent) in list(self.pending.items()):
            if wait or time.monotonic() - sent > ANSWER_DEADLINE_S or not self.server.alive():
                self._judge(msg_id, None)

    def _judge(self, msg_id: int, response: dict | None) -> None:
        asked, _ = self.pending.pop(msg_id)
        if isinstance(asked, Asked):
            self.checker.answered(asked, response)
            self._remember(asked, response)
        else:
            self.checker.state(*asked, response)
        if self.record is not None:  # what was asked and answered, and the verdict, for a fault's diagnosis
            self.record.write(json.dumps({"id": msg_id, "asked": asked if not isinstance(asked, Asked) else
                                          asked.__dict__, "response": response, "verdict": self.checker.verdict},
                                         default=str) + "\n")

    def _remember(self, asked: Asked, response: dict | None) -> None:
        items = ((response or {}).get("result") or {}).get("items") if asked.method != "nextEdit" else None
        if items and items[0]["range"]["start"] == items[0]["range"]["end"]:
            self.last_shown[asked.uri] = (asked.offset, asked.text, items[0]["insertText"])

    # Edits
    def _open(self, doc: Doc) -> None:
        doc.is_open, doc.opened = True, doc.opened + 1
        self.server.notify("textDocument/didOpen", {"textDocument": {"uri": doc.uri, "languageId": doc.language,
                                                                     "version": doc.version, "text": doc.text}})

    def _doc(self, need_open: bool = True) -> Doc | None:
        docs = [d for d in self.docs.values() if d.is_open == need_open]
        return self.rng.choice(docs) if docs else None

    def edit(self, doc: Doc, start: int, end: int, new: str, undoable: bool = True) -> None:
        """Replace ``doc.text[start:end]`` with ``new`` (one incremental ``didChange``); the cursor after it."""
        change = {"range": {"start": utf16_position(doc.text, start), "end": utf16_position(doc.text, end)},
                  "text": new}
        if undoable:
            doc.undo = (doc.undo + [(start, start + len(new), doc.text[start:end])])[-32:]
        doc.text = doc.text[:start] + new + doc.text[end:]
        doc.version += 1
        doc.cursor = start + len(new)
        self.server.notify("textDocument/didChange", {"textDocument": {"uri": doc.uri, "version": doc.version},
                                                      "contentChanges": [change]})
        if len(doc.text) > MAX_CHARS:  # a piece far from the cursor goes (the cursor stays on its text)
            cursor, at_start = doc.cursor, doc.cursor > MAX_CHARS // 2
            cut = 0 if at_start else len(doc.text) - 200
            self.edit(doc, cut, cut + 200, "", undoable=False)
            doc.undo.clear()
            doc.cursor = cursor - 200 if at_start else cursor

    def _keys(self, doc: Doc, keys: str) -> None:
        self.edit(doc, doc.cursor, doc.cursor, keys)
        if self.rng.random() < 0.7:  # editors ask after a key
            self._inline(doc, automatic=True)

    def _type(self) -> None:
        doc = self._doc()
        if doc is not None:
            self._keys(doc, "".join(self.rng.choice(KEYS) for _ in range(self.rng.randint(1, 3))))
            time.sleep(self.rng.random() * 0.03)

    def _type_along(self) -> None:
        """Type the next few characters of the suggestion last shown in a document, while what was typed
        since it was shown still matches it (else an ordinary key)."""
        doc = self._doc()
        shown = self.last_shown.get(doc.uri) if doc is not None else None
        if shown is None:
            return self._type()
        offset, text, suggestion = shown
        typed = doc.text[offset:doc.cursor] if doc.cursor >= offset else None
        if typed is None or doc.text != text[:offset] + typed + text[offset:] or \
                not suggestion.startswith(typed) or len(typed) >= len(suggestion):
            return self._type()
        self._keys(doc, suggestion[len(typed):][:self.rng.randint(1, 3)])

    def _delete(self) -> None:
        doc = self._doc()
        if doc is not None and doc.cursor > 0:
            self.edit(doc, max(0, doc.cursor - self.rng.randint(1, 3)), doc.cursor, "")
            if self.rng.random() < 0.5:
                self._inline(doc, automatic=True)

    def _delete_range(self) -> None:
        doc = self._doc()
        if doc is not None and doc.text:
            start = self.rng.randrange(len(doc.text))
            self.edit(doc, start, min(len(doc.text), start + self.rng.randint(1, 40)), "")

    def _paste(self) -> None:
        doc = self._doc()
        if doc is not None:
            self._keys(doc, self.rng.choice(PASTES))

    def _undo(self) -> None:
        doc = self._doc()
        if doc is not None and doc.undo:
            start, end, old = doc.undo.pop()
            self.edit(doc, start, end, old, undoable=False)
            if self.rng.random() < 0.5:
                self._inline(doc, automatic=True)

    def _jump(self) -> None:
        doc = self._doc()
        if doc is not None:
            doc.cursor = self.rng.randint(0, len(doc.text))
            if self.rng.random() < 0.5:
                self._inline(doc, automatic=True)

    # Requests
    def _asked(self, doc: Doc, method: str, automatic: bool) -> Asked:
        return Asked(method, doc.uri, doc.language, doc.text, doc.version, doc.cursor, automatic,
                     tuple(sorted(self.settings.items())), doc.opened)

    def _inline(self, doc: Doc, automatic: bool) -> None:
        asked = self._asked(doc, "inlineCompletion", automatic)
        msg_id = self.server.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": doc.uri}, "position": asked.position,
            "context": {"triggerKind": 2 if automatic else 1}})
        self.pending[msg_id] = (asked, time.monotonic())
        if self.rng.random() < PAUSE_AFTER_REQUEST:  # the user pauses: the answer comes before the next key
            started = time.monotonic()
            self.server.wait(msg_id, ANSWER_DEADLINE_S)
            self.checker.counts["paused_ms"] += round(1000 * (time.monotonic() - started))
            self.collect()

    def _inline_auto(self) -> None:
        doc = self._doc()
        if doc is not None:
            self._inline(doc, automatic=True)

    def _inline_invoked(self) -> None:
        doc = self._doc()
        if doc is not None:
            self._inline(doc, automatic=False)

    def _next_edit(self) -> None:
        doc = self._doc()
        if doc is not None:
            asked = self._asked(doc, "nextEdit", False)
            msg_id = self.server.request("speclsp/nextEdit", {"textDocument": {"uri": doc.uri},
                                                              "position": asked.position})
            self.pending[msg_id] = (asked, time.monotonic())

    def _cancel(self) -> None:
        if self.pending:
            msg_id = self.rng.choice(list(self.pending))
            self.server.notify("$/cancelRequest", {"id": msg_id})

    def _state(self, doc: Doc | None = None) -> None:
        doc = doc or self.rng.choice(list(self.docs.values()))
        msg_id = self.server.request("speclsp/documentState", {"textDocument": {"uri": doc.uri}})
        expected = (doc.uri, doc.text, doc.version) if doc.is_open else (doc.uri, None, None)
        self.pending[msg_id] = (expected, time.monotonic())

    # Other events
    def _save(self) -> None:
        doc = self._doc()
        if doc is not None:
            self.server.notify("textDocument/didSave", {"textDocument": {"uri": doc.uri}})

    def _close(self) -> None:
        doc = self._doc()
        if doc is not None and sum(d.is_open for d in self.docs.values()) > 1:
            doc.is_open = False
            doc.undo.clear()
            self.last_shown.pop(doc.uri, None)
            self.server.notify("textDocument/didClose", {"textDocument": {"uri": doc.uri}})
            self.checker.closed(doc.uri, doc.opened)

    def _reopen(self) -> None:
        """Reopen a closed document, sometimes changed meanwhile on disk (a line appended)."""
        doc = self._doc(need_open=False)
        if doc is not None:
            if self.rng.random() < 0.5:
                doc.text += "\n# changed on disk\n"
            doc.version += 1
            doc.cursor = min(doc.cursor, len(doc.text))
            self._open(doc)

    def _configure(self) -> None:
        name = self.rng.choice(sorted(CONFIG_CHOICES))
        self.settings[name] = self.rng.choice(CONFIG_CHOICES[name])
        self.server.notify("workspace/didChangeConfiguration", {"settings": {name: self.settings[name]}})

    def _settle(self) -> None:
        """A pause: the answers in flight come in (the model thread catches up, work ahead runs)."""
        time.sleep(self.rng.random() * 0.5)
        self.collect()


def run_fuzz(seed: int, steps: int, log_dir: Path | None = None, check_fraction: float = 1.0) -> dict:
    """One run: a fuzzed server and a reference server started, ``steps`` steps, both shut down; returns
    the checker's summary with the run's figures (seed, steps, seconds). ``check_fraction``: the share of
    suggestions compared with the reference (:class:`bench.fuzz_check.Checker`)."""
    started = time.monotonic()
    logs = (log_dir / "server.log", log_dir / "reference.log") if log_dir else (None, None)
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    traced = {"trace.file": str(log_dir / "trace.jsonl")} if log_dir else {}
    server, reference = Peer({**BASE_OPTIONS, **traced}, logs[0]), Peer(BASE_OPTIONS, logs[1])
    try:
        server.wait_ready()
        reference.wait_ready()
        checker = Checker(reference, check_fraction, seed, _reference_settings=tuple(sorted(BASE_OPTIONS.items())))
        with open(log_dir / "answers.jsonl", "w") if log_dir else open("/dev/null", "w") as record:
            Fuzz(server, checker, seed, record if log_dir else None).run(steps)
        summary = checker.summary()
        if summary["faults"]:
            summary["server_log_tail"] = server.log_tail(4000)
    finally:
        server.close()
        reference.close()
    return {"seed": seed, "steps": steps, "check_fraction": check_fraction, "seconds": round(time.monotonic() - started, 1), **summary}


def report_lines(result: dict) -> list[str]:
    """The run's counts as lines for the terminal."""
    counts = result["counts"]
    lines = [f"seed {result['seed']}, {result['steps']} steps, {result['seconds']} s: {result['faults']} faults"]
    lines += [f"  {name}: {value}" for name, value in counts.items()]
    lines += [f"  fault: {json.dumps(detail)[:400]}" for detail in result["details"]]
    return lines


def run(args) -> int:
    result = run_fuzz(args.seed, args.steps, args.log_dir, args.check_fraction)
    print("\n".join(report_lines(result)))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    return 1 if result["faults"] else 0


def add_parser(kinds) -> None:
    parser = kinds.add_parser("fuzz", help="interleaving fuzz of the typing path against a reference document "
                                           "model (stale suggestions, next-edit ranges, desyncs, crashes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--check-fraction", type=float, default=1.0,
                        help="share of suggestions compared with the fresh server (1: all; less for long runs)")
    parser.add_argument("--out", type=Path, help="write the counts and the first faults as JSON here")
    parser.add_argument("--log-dir", type=Path, help="keep both servers' logs here")
    parser.set_defaults(run=run)
