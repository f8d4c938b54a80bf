"""The held-out code that measurements run on: code nobody here wrote.

* The running interpreter's standard library (``sysconfig.get_paths()["stdlib"]``) without tests,
  site-packages, IDLE and the like. Its held-out packages (``json/`` and ``email/`` by default) are
  never trained on by the starter pair; :mod:`training.data` trains on the rest.
* ``2026``: files first written in 2026, by their copyright line, of the installed transformers and
  huggingface_hub, outside ``transformers/models`` whose model files copy each other: code the
  Qwen2.5-Coder models, trained in 2024, cannot have seen.
* ``2026-ts``, ``2026-js``, ``2026-rust``: TypeScript, JavaScript and Rust files of packages first released
  in 2026, pinned in ``bench/data/corpora-2026.json`` and fetched into a corpus directory on request
  (:mod:`bench.corpus_fetch`). Several corpora are named with commas: ``2026,2026-ts,2026-js,2026-rust``.
* Any directory of ``.py`` files.

A file's language (an LSP language id) follows from its extension: :func:`language_of`.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sysconfig
from pathlib import Path

from bench.corpus_fetch import DEFAULT_CORPUS_DIR, EXTENSION_LANGUAGES, fetch, load_manifest, manifest_files

DEFAULT_HELD_OUT = ("json", "email")  # top-level standard-library packages kept out of training
#: Directories never read: tests, vendored or generated code, the IDE.
SKIP_DIRS = frozenset({"test", "tests", "idlelib", "site-packages", "__pycache__", "turtledemo", "lib2to3"})
_COPYRIGHT_HEAD_CHARS = 600  # where a file's copyright line is looked for


def stdlib_root() -> Path:
    """The standard-library directory of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(held_out: tuple[str, ...] = DEFAULT_HELD_OUT, *, want_held_out: bool = False) -> list[Path]:
    """Sorted ``.py`` files of the standard library, excluding tests.

    Args:
        held_out: top-level package names kept out of training.
        want_held_out: return only the held-out packages' files instead of the training files.
    """
    root = stdlib_root()
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("test"))
        rel = Path(dirpath).relative_to(root)
        top = rel.parts[0] if rel.parts else ""
        if (top in held_out) != want_held_out:
            continue
        for name in sorted(filenames):
            if name.endswith(".py") and not name.startswith("test_"):
                found.append(Path(dirpath) / name)
    return found


def read_texts(paths: list[Path]) -> list[str]:
    """Decoded file texts (UTF-8, undecodable files skipped), line endings normalised to ``\\n``."""
    texts = []
    for path in paths:
        try:
            texts.append(path.read_text(encoding="utf-8").replace("\r\n", "\n"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def held_out_texts(held_out: tuple[str, ...] = DEFAULT_HELD_OUT) -> list[str]:
    """Texts of the held-out packages' files, sorted by path, blank-only files dropped."""
    return [t for t in read_texts(stdlib_files(held_out, want_held_out=True)) if t.strip()]


def rename_identifier(text: str, name: str, new_name: str) -> str:
    """``text`` with every whole-word occurrence of ``name`` replaced by ``new_name``."""
    return re.sub(rf"\b{re.escape(name)}\b", new_name, text)


def language_of(path: Path) -> str:
    """The LSP language id of a source file, by its extension (``python`` for an unknown one)."""
    return EXTENSION_LANGUAGES.get(path.suffix.lower(), "python")


def corpus_names(corpora: str) -> list[str]:
    """The corpora of a comma-separated ``--corpus`` value, in order, each once."""
    names = list(dict.fromkeys(name.strip() for name in corpora.split(",") if name.strip()))
    if not names:
        raise ValueError("--corpus names no corpus")
    return names


def corpus_files(corpus: str, corpus_dir: Path = DEFAULT_CORPUS_DIR, fetch_missing: bool = False) -> list[Path]:
    """The files of a corpus (``stdlib``: the held-out packages, ``2026``, a manifest corpus such as
    ``2026-ts``, or a directory of ``.py`` files; see the module docstring), sorted.

    Args:
        corpus_dir: where manifest corpora are extracted.
        fetch_missing: download a manifest corpus that is not there yet (the only network use).
    Raises:
        ValueError: an unknown corpus, one with no files, or a manifest corpus not fetched
            (:class:`bench.corpus_fetch.CorpusError`).
    """
    if corpus in load_manifest():
        return fetch(corpus, corpus_dir) if fetch_missing else manifest_files(corpus, corpus_dir)
    if corpus == "stdlib":
        return stdlib_files(DEFAULT_HELD_OUT, want_held_out=True)
    if corpus == "2026":
        roots = [Path(spec.origin).parent for name in ("transformers", "huggingface_hub")
                 if (spec := importlib.util.find_spec(name)) is not None and spec.origin]
        paths = []
        for root in roots:
            for path in sorted(root.rglob("*.py")):
                if "models" in path.relative_to(root).parts[:1] or "__pycache__" in path.parts:
                    continue
                with open(path, encoding="utf-8", errors="replace") as source:
                    if "Copyright 2026" in source.read(_COPYRIGHT_HEAD_CHARS):
                        paths.append(path)
    else:
        root = Path(corpus).expanduser()
        if not root.is_dir():
            raise ValueError(f"--corpus must be stdlib, 2026, {', '.join(load_manifest())} or a directory of .py files; "
                             f"{corpus!r} is none of them")
        paths = sorted(root.rglob("*.py"))
    if not paths:
        raise ValueError(f"corpus {corpus!r} has no .py files here")
    return paths
