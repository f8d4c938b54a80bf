"""Model names: what users type (CLI, settings, editors) and where each one loads from.

A model is named by

* ``auto``: the default: as target, ``qwen2.5-coder-1.5b`` when its pack is installed (or already
  converted), else the bundled starter target; as draft, the target's registered partner, else none;
* a pack name, ``qwen2.5-coder-1.5b`` or ``qwen2.5-coder-0.5b`` (:mod:`decoding.weights.model_packs`);
* ``starter`` / ``starter-draft``: the bundled tiny pair (tests and demos);
* a path to a ``.gguf`` file (converted once, cached by its hash);
* a local model directory, or a Hugging Face hub id (the only name that may use the network);
* ``none`` (draft only): no draft model; n-gram drafting still runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from decoding.errors import ModelLoadError
from decoding.weights.gguf_models import Stage, gguf_model_dir, is_converted, pack_dir, pack_model_dir
from decoding.weights.model_packs import INSTALL_COMMAND, PACKS, QWEN_CODER_1_5B
from decoding.weights.starter import DRAFT_DIR, TARGET_DIR

AUTO = "auto"
STARTER_TARGET = "starter"
STARTER_DRAFT = "starter-draft"
NO_DRAFT = "none"
#: A target's draft when the draft is ``auto``: its registered partner.
PARTNERS = {STARTER_TARGET: STARTER_DRAFT, **{name: pack.partner for name, pack in PACKS.items() if pack.partner}}


@dataclass(frozen=True)
class ResolvedPair:
    """The target and draft names ``auto`` settled on, and a note for the user when the result is not
    what they would want (the real models are missing)."""

    target: str
    draft: str
    notice: str | None = None


def pack_available(name: str) -> bool:
    """Whether a pack can load without installing anything: converted already, or its parts installed."""
    pack = PACKS[name]
    return is_converted(pack_dir(pack), pack.sha256, verify=False) or pack.installed()


def resolve_pair(target: str, draft: str) -> ResolvedPair:
    """Settle ``auto`` names (reads package metadata and the cache, loads nothing).

    The draft for ``auto`` is never a model with another tokenizer: the registered partner of the
    target, else ``none`` (n-gram drafting only).
    """
    notice = None
    if target == AUTO:
        if pack_available(QWEN_CODER_1_5B.name):
            target = QWEN_CODER_1_5B.name
        else:
            target = STARTER_TARGET
            notice = (f"the real code models ({QWEN_CODER_1_5B.name} and its draft) are not installed, so speclsp "
                      f"runs the tiny starter models, which write poor code. Install them with: {INSTALL_COMMAND}")
    if draft == AUTO:
        partner = PARTNERS.get(target)
        if partner in PACKS and not pack_available(partner):
            notice = notice or (f"the draft model {partner} is not installed; drafting from n-grams only. "
                                f"Install it with: {INSTALL_COMMAND}")
            partner = None
        draft = partner or NO_DRAFT
    return ResolvedPair(target, draft, notice)


def check_model_name(name: str) -> None:
    """Check, without loading or converting anything, that ``name`` names a model that can load here:
    a pack installed or converted, an existing ``.gguf`` file, a directory with a ``config.json``. A hub
    id passes (only a download can tell). Reads package metadata and the file system.

    Raises:
        ModelLoadError: the same error :func:`model_location` would raise for it.
    """
    if name in (AUTO, STARTER_TARGET, STARTER_DRAFT, NO_DRAFT):
        return
    if name in PACKS:
        if not pack_available(name):
            PACKS[name].part_paths()  # raises PackMissingError, which names the install command
        return
    _local_location(name)


def _local_location(name: str) -> tuple[str, bool]:
    """``(path or hub id, local_only)`` of a name that is no pack and no bundled model; a ``.gguf`` file as is.

    Raises:
        ModelLoadError: a missing file or directory, a directory without ``config.json``, an unknown bare name.
    """
    path = Path(name).expanduser()
    if name.lower().endswith(".gguf"):
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {name!r} does not exist")
        return str(path), True
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelLoadError(f"{path} is not a model directory: it has no config.json")
        return str(path), True
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelLoadError(f"model directory {name!r} does not exist")
    if "/" not in name:
        known = ", ".join([AUTO, *PACKS, STARTER_TARGET, STARTER_DRAFT])
        raise ModelLoadError(f"unknown model {name!r}: use one of {known}, a .gguf file, a model directory "
                             "or a hub id (owner/name)")
    return name, False


def model_location(name: str, on_stage: Stage | None = None) -> tuple[str, bool]:
    """``(path or hub id, local_only)`` for a model name; packs and GGUF files are converted first if needed.

    Raises:
        ModelLoadError: a missing directory or file, a pack that is not installed, a failed conversion,
            or ``auto`` (settle it with :func:`resolve_pair` first).
    """
    if name == AUTO:
        raise ModelLoadError("model name 'auto' must be resolved with resolve_pair before loading")
    if name == STARTER_TARGET:
        return str(TARGET_DIR), True
    if name == STARTER_DRAFT:
        return str(DRAFT_DIR), True
    if name in PACKS:
        return str(pack_model_dir(PACKS[name], on_stage)), True
    location, local_only = _local_location(name)
    if name.lower().endswith(".gguf"):
        return str(gguf_model_dir(Path(location), on_stage)), True
    return location, local_only
