"""The ``speclsp`` command: ``serve`` (the language server on stdio) and ``complete``, plus the commands
that other packages register under the ``speclsp.commands`` entry point (``bench``, ``eval``,
``train-starter``; see :func:`register_commands`). This module is the composition root: it imports
none of those packages, only their entry points.

``speclsp complete FILE:LINE:COL`` takes a 1-based line and a 1-based column counted in characters
(code points), as compilers print them, and prints the completion there. Logs and statistics go to
stderr; stdout carries only the completion (or the JSON with ``--json``).
"""

from __future__ import annotations

import os

# PyTorch's OpenMP runtime on Linux (libgomp) keeps an idle thread spinning after each parallel region,
# by default long enough to hold a CPU core for milliseconds after the model is done: on a 2-core
# machine that delays the server's event loop answering. 30,000 spins still bridge the gaps between
# a forward pass's operations (a verify pass takes as long either way), and the hop back from the model
# thread gets its core sooner (docs/decisions.md#gomp-spincount). Set before torch is imported; a value
# from the environment wins.
os.environ.setdefault("GOMP_SPINCOUNT", "30000")
# transformers (>= 5.2x) swaps layers for Hugging Face Hub kernels by default, fetched over the network on
# a GPU, and on CUDA without the `kernels` package refuses to load a model at all (seen on an H200,
# docs/bench/gpu-h200-883fc48). No network unless the user names a hub model: off unless set.
os.environ.setdefault("USE_HUB_KERNELS", "NO")

import argparse  # noqa: E402
import importlib.metadata  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from lsprotocol import types  # noqa: E402

from decoding.errors import ModelLoadError  # noqa: E402
from lsp_server.backends.base import BackendError  # noqa: E402
from lsp_server.workspace.documents import Document  # noqa: E402
from lsp_server.workspace.positions import PositionError, codec_for  # noqa: E402
from lsp_server.settings import add_setting_flags, settings_from_flags  # noqa: E402

#: Settings ``speclsp serve`` takes as flags: where generation happens (the editor's settings still apply on top).
SERVE_SETTINGS = ("backend", "endpoint", "api_key_env", "remote_model", "remote_timeout_seconds", "model")


class UsageError(ValueError):
    """A command-line argument that cannot be used; printed without a trace."""


def parse_location(spec: str) -> tuple[Path, int, int]:
    """``FILE:LINE:COL`` -> (path, 0-based line, 0-based column in code points)."""
    try:
        path, line, column = spec.rsplit(":", 2)
        line_no, column_no = int(line), int(column)
    except ValueError:
        raise UsageError(f"expected FILE:LINE:COL with 1-based numbers, got {spec!r}") from None
    if line_no < 1 or column_no < 1:
        raise UsageError(f"line and column are 1-based, got {line_no}:{column_no}")
    return Path(path), line_no - 1, column_no - 1


def read_source(path: Path, max_bytes: int = 4_000_000) -> str:
    """A source file's text (UTF-8).

    Raises:
        UsageError: missing, too large, binary or not UTF-8.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise UsageError(f"{path} is {len(data)} bytes; files over {max_bytes} bytes are not completed")
    if b"\0" in data:
        raise UsageError(f"{path} looks binary (it contains NUL bytes)")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark is not a column of line 1
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text: {exc}") from None


def cut_hole(document: Document, position: types.Position, codec, num_lines: int) -> tuple[Document, str]:
    """Remove the text from ``position`` to the end of its line and the next ``num_lines - 1`` lines
    (line breaks after the last one kept); returns the new document and the removed text.

    Raises:
        UsageError: ``num_lines`` < 1.
    """
    if num_lines < 1:
        raise UsageError(f"a hole spans at least 1 line, got {num_lines}")
    lines = document.lines
    start = lines.offset_at(position, codec)
    last_line = min(position.line + num_lines - 1, len(lines.starts) - 1)
    end = lines.line_end(last_line)
    text = document.text[:start] + document.text[end:]
    return Document(document.uri, text, document.version + 1, document.language_id), document.text[start:end]


def run_complete(args: argparse.Namespace) -> int:
    from lsp_server.backends.loading import load_backend
    from lsp_server.request import resolve_request
    from lsp_server.model.session import ModelSession

    path, line, column = parse_location(args.location)
    text = read_source(path)
    document = Document(uri=path.resolve().as_uri(), text=text, version=0, language_id="")
    codec = codec_for(types.PositionEncodingKind.Utf32)  # columns are characters
    position = types.Position(line=line, character=column)
    try:
        line_text = document.lines.line_text(line) if line < len(document.lines.starts) else None
        document.lines.offset_at(position, codec)
    except PositionError as exc:
        raise UsageError(f"{args.location}: {exc}") from None
    if line_text is not None and column > len(line_text):
        raise UsageError(f"{args.location}: column {column + 1} is past the end of line {line + 1} "
                         f"({len(line_text)} characters)")
    removed = ""
    if args.cut_lines:  # cut_hole refuses a negative count
        document, removed = cut_hole(document, position, codec, args.cut_lines)
    # One completion, asked for: its whole answer from the whole prompt, by the target (not a typist's
    # model, completion.model; no prompt cut for time, completion.coldPromptMs: nothing follows it).
    settings = settings_from_flags(args, time_budget_ms=0, cold_prompt_ms=0, completion_model="target")
    backend = load_backend(settings.backend_config(), lambda stage: logging.getLogger("speclsp").info("%s", stage))
    notice = backend.describe().notice
    if notice:
        print(f"speclsp: note: {notice}", file=sys.stderr)
    request = resolve_request(document, position, codec, settings)
    session = ModelSession(backend)
    results = []
    for i in range(args.num_samples):
        seed = None if args.seed is None else args.seed + i
        completion = session.complete(request, seed=seed)
        results.append(completion)
        print(f"[speclsp] sample {i}: {completion.generation.stats.summary()} "
              f"finish={completion.generation.finish_reason}", file=sys.stderr)
    if args.json:
        payload = {
            "location": args.location,
            "removed": removed,
            "settings": {k: v for k, v in vars(settings).items()},
            "completions": [{
                "insert_text": c.insert_text,
                "text": c.generation.text,
                "token_ids": c.generation.token_ids,
                "finish_reason": c.generation.finish_reason,
                "stats": c.generation.stats.to_dict(),
            } for c in results],
        }
        print(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        for completion in results:
            sys.stdout.write(completion.insert_text + "\n")
    return 0


def run_serve(args: argparse.Namespace) -> int:
    from lsp_server.features import create_server
    from lsp_server.protocol.transport import serve_stdio

    # stdout is the LSP transport: give pygls its own handle on it, then send anything else that
    # writes to file descriptor 1 or sys.stdout (a library, a model's remote code) to stderr.
    transport = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    serve_stdio(create_server(base_settings=settings_from_flags(args)), sys.stdin.fileno(), transport)  # ends the process
    return 0


COMMANDS_GROUP = "speclsp.commands"  # entry points: name = the command, value = "module:add_parser"


def _unavailable(name: str, error: Exception):
    """A ``run`` for a command whose entry point failed: it reports the failure, for that command only."""
    hint = " (install speclsp with the extras it needs: pip install 'speclsp[bench,training]')" \
        if isinstance(error, ImportError) else ""

    def run(args: argparse.Namespace) -> int:
        raise UsageError(f"the '{name}' command is not available: {type(error).__name__}: {error}{hint}")
    return run


def register_commands(commands, entry_points=None) -> None:
    """Add the commands registered under the ``speclsp.commands`` entry point group, sorted by name.

    Each entry point names a function ``add_parser(commands)`` that adds its command to ``commands``
    (an argparse subparsers object). One that cannot be imported, or whose ``add_parser`` fails, leaves a
    command of that name that only reports the error (exit status 2), so ``serve`` and the other
    commands still work.

    Args:
        entry_points: ``importlib.metadata.EntryPoint``-like objects (``name``, ``load()``); default:
            those installed in the group.
    """
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=COMMANDS_GROUP)
    for entry_point in sorted(entry_points, key=lambda ep: ep.name):
        name = entry_point.name
        if name in commands.choices:
            continue  # a command is registered once
        try:
            entry_point.load()(commands)
        except Exception as exc:  # a plugin's failure stays with its command
            command = commands.choices.get(name)  # registered before its add_parser failed, or None
            if command is None:
                # No option prefix: every argument after the command, flags included, is left to it.
                command = commands.add_parser(name, help=f"(not available: {type(exc).__name__})", add_help=False,
                                              prefix_chars="\0")
                command.add_argument("ignored", nargs=argparse.REMAINDER)
            command.set_defaults(run=_unavailable(name, exc))


BUILT_IN = ("serve", "complete")


def build_parser(plugins: bool = True) -> argparse.ArgumentParser:
    """The command line; ``plugins``: with the entry points' commands (importing them imports their
    modules: ``bench`` imports the engine, and with it torch)."""
    parser = argparse.ArgumentParser(prog="speclsp", description="Local code completion with exact speculative decoding.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the language server on stdio")
    # LSP clients name the transport (vscode-languageclient appends --stdio to a stdio server's command).
    serve.add_argument("--stdio", action="store_true", help="the transport, stdio (the only one; accepted "
                       "because clients pass it)")
    add_setting_flags(serve, SERVE_SETTINGS)
    serve.set_defaults(run=run_serve)

    comp = commands.add_parser("complete", help="complete a file at FILE:LINE:COL (1-based, columns in characters)")
    comp.add_argument("location", metavar="FILE:LINE:COL")
    add_setting_flags(comp)
    comp.add_argument("--seed", type=int, default=None)
    comp.add_argument("--num-samples", type=int, default=1)
    comp.add_argument("--cut-lines", type=int, default=0, metavar="N",
                      help="first remove the text from the cursor to the end of the N-th line (try the model on "
                           "existing code: the removed text is what it should write back)")
    comp.add_argument("--json", action="store_true", help="print each completion's text, token ids and stats as JSON")
    comp.set_defaults(run=run_complete)

    if plugins:
        register_commands(commands)
    return parser


#: Third-party loggers' levels, (by default, with ``--verbose``): HTTP and file-lock chatter stays at
#: warnings, pygls shows its debug lines when verbose, and two that warn at import about what cannot matter
#: here stay at errors unless verbose: torchao (imported by transformers whenever it is installed) failing to
#: load its CUDA extensions on a CPU build of torch, and torch's pytree registry.
LOGGER_LEVELS = {
    "httpx": (logging.WARNING, logging.WARNING), "httpcore": (logging.WARNING, logging.WARNING),
    "urllib3": (logging.WARNING, logging.WARNING), "filelock": (logging.WARNING, logging.WARNING),
    "pygls": (logging.WARNING, logging.DEBUG),
    "torchao": (logging.ERROR, logging.NOTSET), "torch.utils._pytree": (logging.ERROR, logging.NOTSET),
}


def set_logger_levels(verbose: bool) -> None:
    """Set :data:`LOGGER_LEVELS` (stderr is what an editor shows as the server's log)."""
    for name, (quiet, loud) in LOGGER_LEVELS.items():
        logging.getLogger(name).setLevel(loud if verbose else quiet)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    set_logger_levels("-v" in argv or "--verbose" in argv)  # before a plugin's imports; again once parsed
    command = next((a for a in argv if not a.startswith("-")), None)
    # serve and complete need no plugin: a server on a remote engine then never imports torch
    args = build_parser(plugins=command not in BUILT_IN).parse_args(argv)
    args.argv = list(argv)  # the command line, for a command that runs itself again (bench --cpu-kind)
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    set_logger_levels(args.verbose)
    if not args.verbose:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # weight-loading bars; training keeps its own tqdm bar
    try:
        if getattr(args, "num_samples", 1) < 1:
            raise UsageError("--num-samples must be >= 1")
        return args.run(args)
    except (UsageError, ModelLoadError, ValueError, BackendError) as exc:
        print(f"speclsp: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
