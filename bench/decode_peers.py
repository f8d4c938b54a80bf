"""llama.cpp rows of ``speclsp bench decode``: its server (:mod:`bench.llama_cpp`) on the GGUF files the
real pair was converted from, given the very token ids our methods get.

One ``llama-server`` per configuration (one slot, ``-np 1``; prompt cache off per request), all started
before the first prompt so that runs interleave with ours; greedy (temperature 0), end of text ignored,
as our rows run. A configuration's output is compared with llama.cpp's own plain greedy output (its
Q4_K_M arithmetic is not our bfloat16 conversion of the same file), and its speedup is reported over
its own plain decoding as well as over ours.
"""

from __future__ import annotations

import contextlib
import sys

from bench import llama_cpp
from decoding.weights.model_packs import PACKS

#: bench decode method -> llama-server flags ({draft}: the draft model's GGUF)
LLAMA_METHODS: dict[str, tuple[str, ...]] = {
    "llama_plain": (),
    "llama_ngram": ("--spec-type", "ngram-simple"),
    "llama_ngram_mod": ("--spec-type", "ngram-mod"),
    "llama_draft": ("-md", "{draft}", "--spec-type", "draft-simple", "--spec-draft-n-max", "16"),
}
LLAMA_PLAIN = "llama_plain"


class LlamaPeers(contextlib.AbstractContextManager):
    """Running ``llama-server`` s, one per method asked for, on the target's and draft's GGUF files.

    Raises:
        ValueError: the target (or, for ``llama_draft``, the draft) is not a model pack (no GGUF to serve).
        RuntimeError: llama.cpp is not built (``speclsp bench peers --build``).
    """

    def __init__(self, methods: list[str], target: str, draft: str | None, threads: int = 2):
        self.servers: dict[str, llama_cpp.LlamaServer] = {}
        if not methods:
            return
        if target not in PACKS or ("llama_draft" in methods and draft not in PACKS):
            raise ValueError(f"llama.cpp rows need model packs as target and draft (their GGUF files); "
                             f"got {target} and {draft}")
        if llama_cpp.server_binary() is None:
            raise RuntimeError(f"llama.cpp is not built; run: speclsp bench peers --build ({llama_cpp.build_dir()})")
        target_gguf = llama_cpp.gguf_path(target)
        draft_gguf = llama_cpp.gguf_path(draft) if "llama_draft" in methods else None
        try:
            for method in methods:
                flags = [flag.format(draft=draft_gguf) for flag in LLAMA_METHODS[method]]
                print(f"starting llama-server ({method})", file=sys.stderr, flush=True)
                self.servers[method] = llama_cpp.LlamaServer(target_gguf, ["-np", "1", *flags], threads=threads).start()
        except BaseException:
            self.close()
            raise

    def run(self, method: str, prompt: list[int], new_tokens: int):
        """One greedy completion: (token ids, seconds, target passes or None, drafted, accepted), as the
        other runners of bench decode return. Passes are derived (each pass commits its accepted draft
        tokens and one more), so only where the server reports its drafting."""
        result = llama_cpp.complete(self.servers[method], prompt, new_tokens, ignore_eos=True)
        drafted, accepted = result.draft_n or 0, result.draft_n_accepted or 0
        passes = result.num_tokens - accepted if method != LLAMA_PLAIN else result.num_tokens
        return list(result.token_ids), result.wall_ms / 1000, passes, drafted, accepted

    def close(self) -> None:
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                server.stop()
        self.servers.clear()

    def __exit__(self, *exc_info) -> None:
        self.close()
