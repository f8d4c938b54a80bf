"""``speclsp bench peers``: build llama.cpp (the benchmark peer), say what is built, and a smoke run.

``--build`` builds it once into the cache (or reports the cached build) and installs llama-cpp-python
(the ``model.engine: llama.cpp`` setting's kernels) when it is not installed; ``--status`` lists the build
and the assembled GGUF files; ``--smoke`` runs one greedy completion of a fixed code prompt on the
1.5B pack with llama.cpp plain, with its n-gram speculation and with the 0.5B as draft model, and
prints tokens/s and drafted/accepted tokens. Results go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from bench import llama_cpp
from bench.llama_cpp_build import BINDING, install_binding
from bench.decode_peers import LLAMA_METHODS
from decoding.weights.model_packs import PACKS

TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
#: A function, then the start of its sibling: n-gram lookup has something to copy.
SMOKE_PROMPT = '''def mean(values):
    """The arithmetic mean of a non-empty sequence."""
    total = 0.0
    for value in values:
        total += value
    return total / len(values)


def mean_of_squares(values):
    """The arithmetic mean of the squares of a non-empty sequence."""
'''
#: name -> llama-server flags beside the target; ``{draft}`` is the draft model's GGUF file.
SMOKE_CONFIGS = {"plain": LLAMA_METHODS["llama_plain"], "ngram-simple": LLAMA_METHODS["llama_ngram"],
                 "draft-simple": LLAMA_METHODS["llama_draft"]}


def add_parser(kinds) -> None:
    """Register ``speclsp bench peers`` on the ``bench`` command's subparsers object."""
    peers = kinds.add_parser("peers", help="llama.cpp, the benchmark peer: build it, its status, a smoke run")
    action = peers.add_mutually_exclusive_group(required=True)
    action.add_argument("--build", action="store_true",
                        help=f"build llama.cpp {llama_cpp.VERSION} once (cached), and install {BINDING} (the "
                             "llama.cpp engine's kernels) into this Python with the same instruction-set flags")
    action.add_argument("--status", action="store_true", help="what is built and which GGUF files are assembled")
    action.add_argument("--smoke", action="store_true",
                        help=f"one greedy completion on {TARGET}: plain, ngram-simple, draft-simple ({DRAFT})")
    peers.add_argument("--force", action="store_true", help="with --build: rebuild even when cached")
    peers.add_argument("--threads", type=int, default=2, help="with --smoke: llama-server threads")
    peers.add_argument("--max-tokens", type=int, default=48, help="with --smoke: tokens to generate")
    peers.add_argument("--json", action="store_true", help="print JSON instead of text")
    peers.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.build:
        directory = llama_cpp.build(force=args.force)
        binding = install_binding()
        _print({"built": str(directory), "stamp": json.loads((directory / llama_cpp.STAMP).read_text()),
                "binding": binding}, args.json)
        return 0
    if args.status:
        _print(status(), args.json)
        return 0
    return smoke(args.threads, args.max_tokens, args.json)


def status() -> dict:
    """The pinned version, where its build is (or would be), whether it is complete, the assembled GGUF files."""
    directory = llama_cpp.build_dir()
    stamp = None
    if llama_cpp.is_built(directory):
        stamp = json.loads((directory / llama_cpp.STAMP).read_text())
    ggufs = {}
    for pack in PACKS.values():
        path = llama_cpp.gguf_cache_path(pack)
        ready = path.is_file() and path.stat().st_size == pack.size
        ggufs[pack.name] = str(path) if ready else None
    return {"version": llama_cpp.VERSION, "build_dir": str(directory), "built": stamp is not None,
            "build_s": stamp and stamp.get("build_s"), "server": stamp and str(llama_cpp.server_binary()),
            "gguf": ggufs}


def smoke(threads: int, max_tokens: int, as_json: bool) -> int:
    """Run :data:`SMOKE_PROMPT` through every :data:`SMOKE_CONFIGS` entry; 1 when an output differs from plain."""
    if llama_cpp.server_binary() is None:
        print(f"llama.cpp is not built; run: speclsp bench peers --build ({llama_cpp.build_dir()})", file=sys.stderr)
        return 2
    target, draft = llama_cpp.gguf_path(TARGET), llama_cpp.gguf_path(DRAFT)
    rows = []
    for name, flags in SMOKE_CONFIGS.items():
        extra = [flag.format(draft=draft) for flag in flags]
        print(f"[smoke] llama-server {TARGET} {name}", file=sys.stderr, flush=True)
        with llama_cpp.LlamaServer(target, extra, threads=threads) as server:
            result = llama_cpp.complete(server, SMOKE_PROMPT, max_tokens, ignore_eos=True)
        rows.append({"config": name, "tokens": result.num_tokens, "tokens_per_s": round(result.predicted_per_second, 2),
                     "prompt_ms": round(result.prompt_ms, 1), "wall_ms": round(result.wall_ms, 1),
                     "drafted": result.draft_n, "accepted": result.draft_n_accepted,
                     "equals_plain": result.text == (rows[0]["text"] if rows else result.text), "text": result.text})
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'config':<14}{'tokens':>7}{'tok/s':>8}{'speedup':>9}{'drafted':>9}{'accepted':>9}  equals plain")
        for row in rows:
            speedup = row["tokens_per_s"] / rows[0]["tokens_per_s"] if rows[0]["tokens_per_s"] else 0.0
            print(f"{row['config']:<14}{row['tokens']:>7}{row['tokens_per_s']:>8.2f}{speedup:>8.2f}x"
                  f"{row['drafted'] or 0:>9}{row['accepted'] or 0:>9}  {row['equals_plain']}")
        print(f"plain output: {rows[0]['text']!r}")
    return 0 if all(row["equals_plain"] for row in rows) else 1


def _print(result: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key}: {json.dumps(value, indent=2) if isinstance(value, dict) else value}")
