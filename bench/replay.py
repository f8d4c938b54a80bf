"""Plain replays of the completions a server answered: is each one plain decoding of its own prompt?

The server's trace file at ``trace.level: verbose`` holds, per answered completion, what a replay needs
(``replay``: the target, the prompt and output token ids, the stops, the length cap and the token-healing
text; :func:`lsp_server.tracing.replay_record`). :func:`check_replays` decodes each prompt again with
``--drafter none`` (the target alone, one token a step, under the same healing constraint, from a cold
cache: the prompt in one prefill) and compares token for token. Where the two part, it measures whether that
lies within the kernel noise of the target's dtype (:func:`bench.noise.measure_parting`: a verify pass over
several tokens and one-token steps compute the logits differently, and so does a prompt prefilled in the
server's pieces; in bfloat16 by up to whole logits, docs/exactness.md), the answer's own verify passes
included where the record holds their shapes. Where it also holds how the server's cache computed the
prompt over earlier requests (``prompt_passes``), the server's whole computation is replayed pass for pass
and decides: the served token must lead there, as greedy verification commits the top token of its own
pass. A parting outside the noise, or a served token that trails in the server's own computation, is a
fault of ours.

Greedy answers only: a sampled answer has no single plain output to equal (the statistical tier,
``tests/test_sampling_exactness.py``, checks sampling).
"""

from __future__ import annotations

import sys
from collections import defaultdict

from decoding.types import (DEFAULT_MAX_DRAFT_TOKENS, DEFAULT_PREFILL_CHUNK_TOKENS, REWRITE_PREFILL_CHUNK_TOKENS,
                            EngineConfig, GenerationConfig)
from lsp_server.backends.local import SPARE_CHUNK_TOKENS

#: The pieces a server prefills a prompt in (a request's prefill, and work ahead in idle time), whose KV
#: differs from one pass's by the kernel noise; the verify pass's length is added (a prompt that holds
#: earlier output, the typed tail, was computed in verify passes).
SERVER_PIECES = (DEFAULT_PREFILL_CHUNK_TOKENS, SPARE_CHUNK_TOKENS, REWRITE_PREFILL_CHUNK_TOKENS)


def plain_config(replay: dict) -> GenerationConfig:
    """The generation ``replay`` recorded, capped at its own output's length (a deadline or a cancelled
    round cut it there; plain decoding must agree up to that point)."""
    stop_ids = replay.get("stop_token_ids")
    return GenerationConfig(max_new_tokens=max(1, len(replay["output_ids"])),
                            stop_strings=tuple(replay.get("stop_strings") or ()),
                            stop_token_ids=frozenset(stop_ids) if stop_ids is not None else None,
                            required_prefix=replay.get("required_prefix", ""))


def check_replays(replays: list[dict], device: str = "auto", dtype: str = "auto",
                  chunk: int = DEFAULT_MAX_DRAFT_TOKENS + 1, engine: str = "torch", quantization: str = "auto") -> dict:
    """Replay every greedy ``replay`` record with plain decoding of its target.

    Args:
        replays: ``replay`` records of a verbose trace file.
        device, dtype, engine, quantization: as the server ran (``auto``: the same choice the server made
            on this machine).
        chunk: the verify pass length the noise is measured with (the longest draft plus the bonus token).
    Returns:
        ``{"checked", "identical", "within_noise", "outside_noise", "own_computation", "skipped",
        "max_noise_logits", "partings": [{"model", "token", "lead", "noise", "served_lead", "faithful",
        "within_noise"}]}``;
        ``outside_noise`` must be 0. ``own_computation`` counts the partings decided by the server's own
        computation replayed (:func:`bench.noise.measure_parting`: the record holds how the server's cache
        computed the prompt, ``prompt_passes``).
    Raises:
        decoding.errors.ModelLoadError: a recorded target cannot be loaded here.
    """
    from bench.noise import measure_parting
    from decoding.engine import Engine

    engine_kind = engine
    by_model: dict[str, list[dict]] = defaultdict(list)
    summary = {"checked": 0, "identical": 0, "within_noise": 0, "outside_noise": 0, "own_computation": 0,
               "skipped": 0, "max_noise_logits": 0.0, "partings": []}
    for replay in replays:
        if replay.get("temperature", 0.0) > 0 or not replay.get("output_ids"):
            summary["skipped"] += 1
        else:
            by_model[replay["model"]].append(replay)
    for model, records in by_model.items():
        engine = Engine.load(EngineConfig(model=model, draft_model="none", device=device, dtype=dtype,
                                          engine=engine_kind, quantization=quantization))
        for number, replay in enumerate(records, 1):
            prompt, output = replay["prompt_ids"], replay["output_ids"]
            engine.reset_caches()  # plain decoding of this prompt alone: another record's cached prefix would
            # prefill it in pieces of any size (a suffix of a few tokens runs int8-hybrid's int8 kernel)
            plain = engine.generate(prompt, plain_config(replay), "none", cache_key="replay").token_ids
            summary["checked"] += 1
            if plain == output:
                summary["identical"] += 1
                continue
            passes = [(fed, kept, tree) for fed, kept, tree in replay.get("passes") or ()]
            prompt_passes = replay.get("prompt_passes")
            parting = measure_parting(engine.target.model, prompt, plain, output, chunk, SERVER_PIECES + (chunk,),
                                      passes or None,
                                      [tuple(p) for p in prompt_passes] if prompt_passes is not None else None,
                                      engine.generator.healing(plain_config(replay)))
            within, lead, noise = parting.within, parting.lead, parting.noise
            summary["within_noise" if within else "outside_noise"] += 1
            summary["own_computation"] += parting.served_lead is not None
            if noise == noise:  # not NaN
                summary["max_noise_logits"] = max(summary["max_noise_logits"], noise)
            token = next((i for i, (a, b) in enumerate(zip(plain, output)) if a != b), min(len(plain), len(output)))
            summary["partings"].append({"model": model, "token": token, "lead": lead, "noise": noise,
                                        "served_lead": parting.served_lead, "faithful": parting.faithful,
                                        "within_noise": within})
            own = ("" if parting.served_lead is None else "; the replayed server computation is NOT the server's: its "
                   "top tokens before the parting differ" if not parting.faithful else
                   f"; in the server's own passes, replayed, the served token is {'' if within else 'NOT '}the top "
                   f"token (lead over plain's {parting.served_lead:+.3f})")
            print(f"[replay] {model} {number}/{len(records)}: parts at token {token} (lead {lead:.3f}, noise "
                  f"{noise:.3f}{own}): {'within' if within else 'OUTSIDE'} the noise", file=sys.stderr)
        del engine
    return summary
