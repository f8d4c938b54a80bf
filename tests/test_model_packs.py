"""Model packs without the real weights: finding parts by metadata, the hash check, the conversion cache,
the ``auto`` names and the pinned requirements. The real packs are converted in ``test_real_models``."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

from decoding.weights import gguf_models, model_names
from decoding.weights.capabilities import read_capabilities
from decoding.errors import ModelLoadError
from decoding.weights.gguf_models import MARKER, is_converted, pack_dir, pack_model_dir
from decoding.weights.loading import load_tokenizer
from decoding.weights.model_names import AUTO, NO_DRAFT, STARTER_DRAFT, STARTER_TARGET, model_location, resolve_pair
from decoding.weights.model_packs import INSTALL_COMMAND, PACKS, ModelPack, PackMissingError, assemble
from decoding.weights.starter import TARGET_DIR

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PARTS = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]


def fake_pack(parts: list[bytes], version: str = "1.0") -> ModelPack:
    whole = b"".join(parts)
    return ModelPack(name="fake-coder", title="Fake Coder", distribution="fake-speclsp-pack-part", version=version,
                     num_parts=len(parts), size=len(whole), sha256=hashlib.sha256(whole).hexdigest())


def install_fake_parts(root: Path, parts: list[bytes], version: str = "1.0", skip: int | None = None) -> None:
    """Install parts as a wheel would (dist-info with a RECORD), on a path added to ``sys.path``."""
    for n, data in enumerate(parts, 1):
        if n == skip:
            continue
        module = f"fake_speclsp_pack_part{n}"
        (root / module / "data").mkdir(parents=True)
        (root / module / "data" / f"part{n:02d}.bin").write_bytes(data)
        info = root / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: fake-speclsp-pack-part{n}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{module}/data/part{n:02d}.bin,,\n{info.name}/METADATA,,\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_parts_are_found_by_metadata_and_assemble_to_the_pinned_hash(site, tmp_path):
    install_fake_parts(site, PARTS)
    pack = fake_pack(PARTS)
    paths = pack.part_paths()
    assert [p.read_bytes() for p in paths] == PARTS and pack.installed()
    assert not any(name.startswith("fake_speclsp") for name in sys.modules), "parts must not be imported"
    seen = []
    assemble(paths, tmp_path / "whole.gguf", pack.size, pack.sha256, pack.name, lambda done, total: seen.append(done))
    assert (tmp_path / "whole.gguf").read_bytes() == b"".join(PARTS)
    assert seen[-1] == pack.size


@pytest.mark.parametrize("damage,message", [
    (lambda parts: [parts[0][:-1] + b"X", *parts[1:]], "sha256 is"),  # tampered: same size, other bytes
    (lambda parts: parts[:-1] + [parts[-1][:2]], "truncated or altered"),
    (lambda parts: parts + [b"extra"], "more than"),
])
def test_a_tampered_truncated_or_padded_upload_is_refused_and_leaves_no_file(tmp_path, damage, message):
    pack = fake_pack(PARTS)
    paths = []
    for n, data in enumerate(damage(PARTS)):
        paths.append(tmp_path / f"p{n}")
        paths[-1].write_bytes(data)
    dest = tmp_path / "whole.gguf"
    with pytest.raises(ModelLoadError, match=message) as caught:
        assemble(paths, dest, pack.size, pack.sha256, pack.name)
    assert INSTALL_COMMAND in str(caught.value) and not dest.exists()


def test_missing_part_or_wrong_version_names_the_install_command(site):
    install_fake_parts(site, PARTS, skip=2)
    with pytest.raises(PackMissingError, match="fake-speclsp-pack-part2 is missing") as caught:
        fake_pack(PARTS).part_paths()
    assert INSTALL_COMMAND in str(caught.value)
    assert not fake_pack(PARTS).installed()
    with pytest.raises(PackMissingError, match="part1 is version 1.0, speclsp needs 2.0"):
        fake_pack(PARTS, version="2.0").part_paths()


def test_conversion_is_cached_atomic_and_keyed_by_the_hash(site, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_parts(site, PARTS)
    pack = fake_pack(PARTS)
    calls = []

    def failing(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise ModelLoadError("dequantisation failed")

    monkeypatch.setattr(gguf_models, "convert_gguf", failing)
    with pytest.raises(ModelLoadError, match="dequantisation failed"):
        pack_model_dir(pack)
    assert not pack_dir(pack).exists(), "a failed conversion must leave nothing that looks like a model"
    assert [p.name for p in pack_dir(pack).parent.iterdir() if not p.name.endswith(".lock")] == []

    def converting(gguf: Path, out: Path) -> None:
        calls.append(gguf.read_bytes())
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(gguf_models, "convert_gguf", converting)
    stages = []
    first = pack_model_dir(pack, stages.append)
    assert calls == [b"".join(PARTS)] and first == pack_dir(pack)
    assert is_converted(first, pack.sha256) and not is_converted(first, "0" * 64)
    assert json.loads((first / MARKER).read_text())["packages"] == pack.requirements()
    assert any("assembling fake-coder" in s and "100%" in s for s in stages)
    assert pack_model_dir(pack) == first and len(calls) == 1, "a converted pack is not converted again"
    recorded = json.loads((first / MARKER).read_text())["files"]
    assert list(recorded) == ["config.json"] and recorded["config.json"]["bytes"] == 2
    assert recorded["config.json"]["sha256"] == hashlib.sha256(b"{}").hexdigest()
    (first / "config.json").write_text("{")  # a file cut short (e.g. a crash before it reached the disk)
    assert not is_converted(first, pack.sha256)
    (pack_dir(pack).parent / f".{pack_dir(pack).name}-killed").mkdir()  # left by a killed conversion
    assert pack_model_dir(pack) == first and len(calls) == 2 and is_converted(first, pack.sha256)
    assert not list(first.parent.glob(".*-killed")), "a killed conversion's leftovers are removed"
    (first / MARKER).unlink()  # e.g. a copy interrupted by hand: converted again, not trusted
    assert pack_model_dir(pack) == first and len(calls) == 3


def test_a_converted_file_altered_afterwards_is_refused_and_converted_again(site, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "cache"))
    install_fake_parts(site, PARTS)
    pack = fake_pack(PARTS)
    calls = []

    def converting(gguf: Path, out: Path) -> None:
        calls.append(1)
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(gguf_models, "convert_gguf", converting)
    converted = pack_model_dir(pack)
    config = converted / "config.json"
    os.utime(config, ns=(1, 1))  # the same bytes, other times (a copied cache): hashed again, accepted
    assert is_converted(converted, pack.sha256)
    assert json.loads((converted / MARKER).read_text())["files"]["config.json"]["signature"][1] == 1
    config.write_text("[]")  # the same size, other bytes
    assert is_converted(converted, pack.sha256, verify=False), "the cheap check compares sizes only"
    assert not is_converted(converted, pack.sha256)
    assert pack_model_dir(pack) == converted and len(calls) == 2 and config.read_text() == "{}"


def test_an_unwritable_cache_is_a_clear_error(site, tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    install_fake_parts(site, PARTS)
    with pytest.raises(ModelLoadError, match="SPECLSP_CACHE_DIR"):
        pack_model_dir(fake_pack(PARTS))


def test_gguf_files_are_converted_once_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLSP_CACHE_DIR", str(tmp_path / "cache"))
    converted = []
    monkeypatch.setattr(gguf_models, "convert_gguf", lambda gguf, out: converted.append(gguf.read_bytes()))
    one, two = tmp_path / "a.gguf", tmp_path / "b.GGUF"
    one.write_bytes(b"GGUF one")
    two.write_bytes(b"GGUF one")
    first, _ = model_location(str(one))
    assert model_location(str(two))[0] == first and converted == [b"GGUF one"], "same content, one conversion"
    one.write_bytes(b"GGUF two")
    later = one.stat().st_mtime_ns + 2_000_000_000
    os.utime(one, ns=(later, later))  # as a replacement made later would be (timestamps can be coarse)
    assert model_location(str(one))[0] != first and len(converted) == 2
    with pytest.raises(ModelLoadError, match="does not exist"):
        model_location(str(tmp_path / "missing.gguf"))


def test_models_extra_pins_exactly_the_packs_parts():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["models"]
    pinned = [r for r in extra if "==" in r]
    assert pinned == [r for pack in PACKS.values() for r in pack.requirements()]
    assert any(r.startswith("gguf") for r in extra) and any(r.startswith("accelerate") for r in extra)


@pytest.mark.parametrize("installed,target,draft,expected", [
    (True, AUTO, AUTO, ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", False)),
    (False, AUTO, AUTO, (STARTER_TARGET, STARTER_DRAFT, True)),
    (True, "qwen2.5-coder-0.5b", AUTO, ("qwen2.5-coder-0.5b", NO_DRAFT, False)),
    (True, "/models/some-dir", AUTO, ("/models/some-dir", NO_DRAFT, False)),  # never a draft of another vocabulary
    (False, STARTER_TARGET, AUTO, (STARTER_TARGET, STARTER_DRAFT, False)),
    (True, AUTO, "none", ("qwen2.5-coder-1.5b", NO_DRAFT, False)),
])
def test_auto_names_resolve_to_a_compatible_pair(monkeypatch, installed, target, draft, expected):
    monkeypatch.setattr(model_names, "pack_available", lambda name: installed)
    pair = resolve_pair(target, draft)
    assert (pair.target, pair.draft, pair.notice is not None) == expected
    if pair.notice:
        assert INSTALL_COMMAND in pair.notice


def test_target_without_its_draft_installed_drafts_from_ngrams_and_says_so(monkeypatch):
    monkeypatch.setattr(model_names, "pack_available", lambda name: name == "qwen2.5-coder-1.5b")
    pair = resolve_pair(AUTO, AUTO)
    assert (pair.target, pair.draft) == ("qwen2.5-coder-1.5b", NO_DRAFT)
    assert "qwen2.5-coder-0.5b is not installed" in pair.notice


def test_unknown_bare_name_and_unresolved_auto_are_clear_errors():
    with pytest.raises(ModelLoadError, match="unknown model 'qwen-coder'.*qwen2.5-coder-1.5b"):
        model_location("qwen-coder")
    with pytest.raises(ModelLoadError, match="resolve_pair"):
        model_location(AUTO)


def test_starter_records_that_it_does_not_know_the_repository_prompt():
    tokenizer = load_tokenizer(str(TARGET_DIR), local_only=True)
    recorded = read_capabilities(tokenizer, (), str(TARGET_DIR))
    assert recorded.fim is not None and recorded.repo_tokens is not None and not recorded.repo_prompt
    assert read_capabilities(tokenizer, (), None).repo_prompt, "a model with the tokens and no record knows it"
    vocab = tokenizer.get_vocab()
    assert {vocab[t] for t in ("<|fim_prefix|>", "<|fim_middle|>", "<|file_sep|>", "<|endoftext|>")} <= recorded.stop_ids
