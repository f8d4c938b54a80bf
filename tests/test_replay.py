"""The verbose trace file keeps what a plain replay of each answered completion needs, and
bench/replay.py:check_replays finds an answer equal to plain decoding of its own prompt, and a wrong
one outside the kernel noise (the check `speclsp bench lsp --typist --check-exact` runs)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from lsprotocol import types

from bench.noise import measure_parting
from bench.replay import check_replays
from decoding.engine import Engine
from decoding.types import EngineConfig
from lsp_server.backends.local import as_backend
from lsp_server.model.completer import complete
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.tracing import VERBOSE, Tracer
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for

pytestmark = pytest.mark.model

TEXT = "def area(width, height):\n    return width * height\n\n\ndef perimeter(width, height):\n    return 2 * (wid"


@pytest.fixture(scope="module")
def answered():
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32"))
    document = Document("file:///shapes.py", TEXT, 1, "python")
    position = types.Position(line=5, character=len(TEXT.split("\n")[5]))
    request = resolve_request(document, position, codec_for("utf-32"), Settings(max_new_tokens=24, drafter="ngram"))
    return complete(as_backend(engine), request)


def test_the_verbose_trace_file_holds_the_replay_and_the_clients_request_id(answered, tmp_path):
    path = tmp_path / "trace.jsonl"
    for level in ("messages", VERBOSE):
        tracer = Tracer(trace_value=lambda level=level: level)
        assert tracer.set_trace_file(str(path)) is None
        tracer.request(7, "inlineCompletion", "file:///shapes.py", types.Position(line=4, character=3), "ok",
                       completion=answered, msg_id="typist-3")
        tracer.set_trace_file("")
    plain, verbose = [json.loads(line) for line in path.read_text().splitlines()]
    assert plain["msg_id"] == verbose["msg_id"] == "typist-3"
    assert "replay" not in plain  # token ids are code: verbose only
    replay = verbose["replay"]
    assert replay["model"] == "starter" and replay["output_ids"] == answered.generation.token_ids
    assert replay["prompt_ids"] == answered.prompt.prompt_ids and replay["required_prefix"] == answered.config.required_prefix != ""
    shapes = [[fed, kept, tree] for fed, kept, tree in answered.generation.stats.passes]
    assert replay["passes"] == shapes and len(shapes) == answered.generation.stats.target_passes > 0


def test_a_plain_replay_matches_and_a_wrong_answer_is_caught(answered, tmp_path, monkeypatch):
    """A wrong answer is a fault both ways: its token trails in the server's own computation replayed
    (the record holds how the cache computed the prompt), and, from a trace without that, it stays
    outside the noise although the measure recomputes it in a verify pass that kept it."""
    import bench.noise

    replay = json.loads(json.dumps(_record(answered, tmp_path)))
    assert len(replay["output_ids"]) >= 2
    assert sum(kept for _, kept, _ in replay["prompt_passes"]) == len(replay["prompt_ids"]) - 1
    good = check_replays([replay], device="cpu", dtype="float32")
    assert (good["checked"], good["identical"], good["outside_noise"]) == (1, 1, 0)
    wrong = copy.deepcopy(replay)
    wrong["output_ids"][1] = (wrong["output_ids"][1] + 1) % 40  # another token the target did not choose
    # as if a verify pass of 4 tokens had kept the wrong token: the measure recomputes it in that shape
    wrong["passes"] = [[4, 3, False]] + [[1, 1, False]] * (len(wrong["output_ids"]) - 3)
    shaped = []
    real_shaped = bench.noise.run_shaped_logits
    monkeypatch.setattr(bench.noise, "run_shaped_logits", lambda *args: shaped.append(real_shaped(*args)) or shaped[-1])
    bad = check_replays([wrong], device="cpu", dtype="float32")
    assert (bad["checked"], bad["identical"], bad["outside_noise"], bad["own_computation"]) == (1, 0, 1, 1)
    assert bad["partings"][0]["token"] == 1 and bad["partings"][0]["served_lead"] < 0
    assert bad["partings"][0]["faithful"] is True  # token 0 is the top token under the healing mask
    # the server's own computation alone decides: the run's shapes over a one-pass prompt are not replayed
    assert len(shaped) == 1 and shaped[0] is not None and shaped[0].shape[0] == 2
    engine = Engine.load(EngineConfig(model="starter", draft_model="none", device="cpu", dtype="float32"))
    passes, prompt_passes = [tuple(p) for p in wrong["passes"]], [tuple(p) for p in wrong["prompt_passes"]]
    unmasked = measure_parting(engine.target.model, wrong["prompt_ids"], replay["output_ids"], wrong["output_ids"], 5,
                               (), passes, prompt_passes)
    assert unmasked.faithful is False  # without the mask token 0 is not the top token: the check needs it
    del wrong["prompt_passes"]  # a trace written before the server recorded them
    shaped.clear()
    old = check_replays([wrong], device="cpu", dtype="float32")
    assert (old["checked"], old["outside_noise"], old["own_computation"]) == (1, 1, 0)
    assert old["partings"][0]["served_lead"] is None and len(shaped) == 1 and shaped[0] is not None


def test_the_record_replays_the_servers_own_logits_bit_for_bit():
    """In bfloat16 the logits depend on how the cache was computed. Over requests that share a cache (the
    prompt grows, prefilled in pieces, over earlier answers' verify passes), the recorded pass shapes
    recompute every verify pass's kept rows bit for bit; the prompt in one pass does not."""
    from bench.noise import run_shaped_logits
    from decoding.kv_cache import KVCacheState
    from decoding.types import GenerationConfig

    engine = Engine.load(EngineConfig(model="starter", draft_model="none", device="cpu", dtype="bfloat16"))
    rows = []
    real_forward = KVCacheState.forward

    def forward(self, new_ids, *args, **kwargs):
        out = real_forward(self, new_ids, *args, **kwargs)
        rows.append(out.clone())
        return out

    ids = engine.target.tokenizer(TEXT * 4)["input_ids"]
    config = GenerationConfig(max_new_tokens=16, prefill_chunk_tokens=16)
    bitwise, one_pass = [], []
    for cut in (40, 52, 55, 70):
        rows.clear()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(KVCacheState, "forward", forward)
            run = engine.generate(ids[:cut], config, "ngram", cache_key="doc", should_stop=lambda: False)
        stats, last = run.stats, len(run.token_ids) - 1
        served = torch.cat([out[:kept] for out, (_, kept, _) in zip(rows[-len(stats.passes):], stats.passes)])
        own = run_shaped_logits(engine.target.model, ids[:cut], run.token_ids, stats.passes, last, stats.prompt_passes)
        one = run_shaped_logits(engine.target.model, ids[:cut], run.token_ids, stats.passes, last)
        bitwise.append(torch.equal(own, served.float()[:last + 1]))
        one_pass.append(torch.equal(one, served.float()[:last + 1]))
        assert sum(kept for _, kept, _ in stats.prompt_passes) == cut - 1
    assert len(stats.prompt_passes) > 3  # pieces of 16 and earlier answers' passes
    assert all(bitwise) and not all(one_pass)


def _record(completion, tmp_path) -> dict:
    path = tmp_path / "one.jsonl"
    tracer = Tracer(trace_value=lambda: VERBOSE)
    tracer.set_trace_file(str(path))
    tracer.request(1, "inlineCompletion", "file:///shapes.py", types.Position(line=0, character=0), "ok",
                   completion=completion)
    tracer.set_trace_file("")
    return json.loads(path.read_text())["replay"]
