"""The real tier: Qwen2.5-Coder 1.5B (target) and 0.5B (draft) from the registry model packs.

The packs are converted once (into the user cache, where ``speclsp`` itself finds them later) and
reused by every test here. Without the packs installed these tests are skipped, unless
``SPECLSP_REQUIRE_REAL_MODELS=1`` (CI sets it), which makes them fail instead.

Held-out places are in code written in 2026, after these models were trained: this repository's own
files and the files of installed packages whose copyright line says 2026 (``speclsp bench cuts --corpus 2026``).
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
import torch
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from bench.cuts import cut_points
from decoding.weights.capabilities import FimTokens
from decoding.engine import Engine
from decoding.types import DRAFTER_MODES, EngineConfig
from decoding.types import GenerationConfig
from decoding.weights.gguf_models import MARKER, pack_model_dir
from decoding.weights.loading import load_tokenizer
from decoding.weights.model_names import pack_available
from decoding.weights.model_packs import INSTALL_COMMAND, PACKS
from lsp_server.cli import cut_hole
from lsp_server.backends.local import as_backend
from lsp_server.model.completer import complete
from lsp_server.workspace.documents import Document
from lsp_server.workspace.positions import codec_for
from lsp_server.request import resolve_request
from lsp_server.settings import Settings
from tests.greedy_check import FixedDraftLength
from tests.test_lsp_e2e import capabilities, wait_until_ready

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[1]
TARGET, DRAFT = "qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b"
#: Qwen2.5-Coder's special tokens and their ids (tokenizer of both models).
QWEN_SPECIAL_IDS = {"<|endoftext|>": 151643, "<|im_end|>": 151645, "<|fim_prefix|>": 151659,
                    "<|fim_middle|>": 151660, "<|fim_suffix|>": 151661, "<|fim_pad|>": 151662,
                    "<|repo_name|>": 151663, "<|file_sep|>": 151664}
UTF32 = codec_for(types.PositionEncodingKind.Utf32)


@pytest.fixture(scope="session")
def real_dirs() -> dict[str, Path]:
    """The converted packs (converting them the first time)."""
    missing = [name for name in PACKS if not pack_available(name)]
    if missing:
        message = f"model packs {missing} not installed ({INSTALL_COMMAND})"
        if os.environ.get("SPECLSP_REQUIRE_REAL_MODELS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return {name: pack_model_dir(PACKS[name]) for name in PACKS}


@pytest.fixture(scope="session")
def engine_fp32(real_dirs) -> Engine:
    """The real pair in float32, where speculative and plain greedy must agree token for token."""
    return Engine.load(EngineConfig(model=TARGET, draft_model=DRAFT, device="cpu", dtype="float32"))


def held_out_places() -> list[tuple[Document, types.Position, str]]:
    """(document with a hole, cursor, label): this repository's greedy verification body and two
    seeded cut points in 2026 files of installed packages."""
    path = ROOT / "decoding" / "verify.py"
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    line = lines.index("    k = len(draft_tokens)", next(i for i, l in enumerate(lines) if l.startswith("def greedy_verify")))
    places = [(Document(path.as_uri(), text, 0, "python"), types.Position(line=line, character=4))]
    places += cut_points(2, seed=3, corpus="2026")
    result = []
    for document, position in places:
        holed, _ = cut_hole(document, position, UTF32, 3)
        result.append((holed, position, f"{document.uri.rsplit('/', 2)[-2:]}:{position.line + 1}"))
    return result


def test_conversion_keeps_every_special_token_as_one_id(real_dirs):
    tokenizers = {name: load_tokenizer(str(directory), local_only=True) for name, directory in real_dirs.items()}
    for name, tokenizer in tokenizers.items():
        for token, token_id in QWEN_SPECIAL_IDS.items():
            assert tokenizer.encode(token, add_special_tokens=False) == [token_id], (name, token)
        assert (real_dirs[name] / MARKER).is_file()
    probe = "<|fim_prefix|>def f(x):\n    return x  # é😀\n<|fim_suffix|>\n<|fim_middle|>"
    target, draft = (tokenizers[TARGET], tokenizers[DRAFT])
    assert target.get_vocab() == draft.get_vocab() and len(target.get_vocab()) == 151936
    assert target.encode(probe, add_special_tokens=False) == draft.encode(probe, add_special_tokens=False)


def test_capabilities_are_recorded_at_load(engine_fp32):
    recorded = engine_fp32.target.capabilities
    assert recorded.fim == FimTokens(prefix=151659, suffix=151661, middle=151660)
    assert recorded.repo_prompt and recorded.repo_tokens == (151663, 151664) and recorded.chat_template
    assert set(QWEN_SPECIAL_IDS.values()) <= engine_fp32.completion_stop_ids
    assert engine_fp32.target.model.dtype == torch.float32 and engine_fp32.draft.name == DRAFT


def test_plain_decoding_equals_transformers_generate(engine_fp32):
    document, position, _ = held_out_places()[0]
    request = resolve_request(document, position, UTF32, Settings(drafter="none", max_new_tokens=1))
    prompt = complete(as_backend(engine_fp32), request).prompt.prompt_ids
    engine_fp32.reset_caches()
    ours = engine_fp32.generator.generate(prompt, None, GenerationConfig(max_new_tokens=12, max_draft_tokens=0,
                                                                         stop_token_ids=frozenset()))
    model = engine_fp32.target.model
    expected = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                              max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=151643)
    assert ours.token_ids == expected[0, len(prompt):].tolist()


@pytest.mark.parametrize("index", [0, 1, 2])
def test_every_drafter_equals_plain_greedy_in_float32(engine_fp32, index, monkeypatch):
    """Drafts of a fixed length (FixedDraftLength): the measured policy may stop drafting on held-out code
    on a slow machine, and then no draft would be verified."""
    monkeypatch.setattr(engine_fp32, "policy", FixedDraftLength())
    document, position, label = held_out_places()[index]
    outputs, passes = {}, {}
    for drafter in ("none", *(d for d in DRAFTER_MODES if d != "none")):
        engine_fp32.reset_caches()
        request = resolve_request(document, position, UTF32, Settings(drafter=drafter, max_new_tokens=32, time_budget_ms=0))
        generation = complete(as_backend(engine_fp32), request).generation
        outputs[drafter], passes[drafter] = generation.token_ids, generation.stats.target_passes
    assert outputs["none"], label
    for drafter, tokens in outputs.items():
        assert tokens == outputs["none"], f"{label}: drafter {drafter} parted from plain greedy (float32: no tie excuse)"
    assert passes["none"] == len(outputs["none"])
    assert min(passes[d] for d in outputs if d != "none") < passes["none"], f"{label}: no drafter saved a pass"


def readme_main_command() -> list[str]:
    """The ``speclsp complete`` part of the README's first command."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1)
    command = block.split("&& speclsp ", 1)[1].strip()
    return shlex.split(command)


def test_readme_main_command_completes_held_out_code_on_the_real_pair(real_dirs):
    args = readme_main_command()
    assert args[0] == "complete" and "--model" not in args, "the main command runs the defaults"
    done = subprocess.run([sys.executable, "-m", "lsp_server.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"loading target model {TARGET}" in done.stderr and f"loading draft model {DRAFT}" in done.stderr
    assert "note:" not in done.stderr, "with the packs installed nothing falls back"
    completion = done.stdout.rstrip("\n")
    assert completion.strip(), done.stderr[-2000:]
    path, line, column = args[1].rsplit(":", 2)
    text = (ROOT / path).read_text(encoding="utf-8")
    holed, _ = cut_hole(Document("file:///x.py", text, 0, "python"),
                        types.Position(line=int(line) - 1, character=int(column) - 1), UTF32,
                        int(args[args.index("--cut-lines") + 1]))
    offset = holed.lines.offset_at(types.Position(line=int(line) - 1, character=int(column) - 1), UTF32)
    ast.parse(holed.text[:offset] + completion + holed.text[offset:])


SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "lsp_server.cli", "serve"])


@pytest_lsp.fixture(config=SERVER)
async def real_client(lsp_client: LanguageClient, real_dirs):
    lsp_client.initialize_result = await lsp_client.initialize_session(types.InitializeParams(
        capabilities=capabilities(), initialization_options={"completion.maxNewTokens": 48, "index.enabled": False}))
    await wait_until_ready(lsp_client, timeout=300)
    yield
    await lsp_client.shutdown_session()


async def test_lsp_inline_completion_on_held_out_code_parses_when_inserted(real_client: LanguageClient):
    ready = [m.message for m in real_client.log_messages if "models ready" in m.message]
    if "next edits:" in ready[0]:  # completionModel auto chose the 0.5B for completions (a slow CPU)
        assert f"target={DRAFT}" in ready[0] and f"next edits: target={TARGET}, draft={DRAFT}" in ready[0]
    else:
        assert f"target={TARGET}" in ready[0] and f"draft={DRAFT}" in ready[0]
    assert not real_client.messages, f"no warning with the packs installed: {real_client.messages}"
    document, position, label = held_out_places()[0]
    real_client.text_document_did_open(types.DidOpenTextDocumentParams(text_document=types.TextDocumentItem(
        uri="file:///workspace/verify.py", language_id="python", version=1, text=document.text)))
    answer = await asyncio.wait_for(real_client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri="file:///workspace/verify.py"), position=position,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))), 300)
    assert answer is not None and len(answer.items) == 1, label
    inserted = answer.items[0].insert_text
    assert inserted.strip()
    offset = document.lines.offset_at(position, UTF32)
    ast.parse(document.text[:offset] + inserted + document.text[offset:])


def test_the_torch_free_tokenizer_of_a_remote_backend_tokenises_as_the_engines(real_dirs):
    """A remote backend loads the model's tokenizer.json without transformers' auto classes (they import
    torch); on the Qwen2.5-Coder packs it must give the engine's tokens and text (held-out code)."""
    from bench.corpus import corpus_files

    for directory in real_dirs.values():
        engine = load_tokenizer(str(directory), local_only=True)
        remote = load_tokenizer(str(directory), local_only=True, without_torch=True)
        assert type(engine).__name__ == "Qwen2Tokenizer" and type(remote).__name__ != type(engine).__name__
        texts = [path.read_text(encoding="utf-8") for path in corpus_files("2026")[:40]]
        texts += ["x = 123456789\n\n    \t  y\r\n", "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "é😀日本語"]
        for text in texts:
            ids = engine.encode(text, add_special_tokens=False)
            assert remote.encode(text, add_special_tokens=False) == ids
            assert remote.decode(ids) == engine.decode(ids)
        assert remote.all_special_tokens == engine.all_special_tokens and remote.eos_token_id == engine.eos_token_id
