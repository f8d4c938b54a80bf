"""The verbose trace file keeps what a plain replay of each answered completion needs, and
bench/replay.py:check_replays finds an answer equal to plain decoding of its own prompt, and a wrong
one outside the kernel noise (the check `speclsp bench lsp --typist --check-exact` runs)."""

from __future__ import annotations

import copy
import json

import pytest
from lsprotocol import types

from bench.replay import check_replays
from decoding.engine import Engine, EngineConfig
from lsp_server.backends.local import as_backend
from lsp_server.completer import complete
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
    """The record holds the answer's pass shapes, and a wrong answer stays outside the noise although the
    measure recomputes it in a verify pass that kept it."""
    import bench.noise

    measured = []
    real = bench.noise.divergence_within_noise
    monkeypatch.setattr(bench.noise, "divergence_within_noise",
                        lambda *args: measured.append(args[-1]) or real(*args))
    replay = json.loads(json.dumps(_record(answered, tmp_path)))
    assert len(replay["output_ids"]) >= 2
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
    assert (bad["checked"], bad["identical"], bad["outside_noise"]) == (1, 0, 1)
    assert bad["partings"][0]["token"] == 1
    assert measured == [[tuple(shape) for shape in wrong["passes"]]]
    assert len(shaped) == 1 and shaped[0] is not None and shaped[0].shape[0] == 2


def _record(completion, tmp_path) -> dict:
    path = tmp_path / "one.jsonl"
    tracer = Tracer(trace_value=lambda: VERBOSE)
    tracer.set_trace_file(str(path))
    tracer.request(1, "inlineCompletion", "file:///shapes.py", types.Position(line=0, character=0), "ok",
                   completion=completion)
    tracer.set_trace_file("")
    return json.loads(path.read_text())["replay"]
