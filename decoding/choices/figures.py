"""The one cache file of figures measured on this machine, and the pin that stands in for it.

The file is ``measured.json`` under :func:`decoding.weights.gguf_models.cache_root`, one JSON object::

    {"version": FIGURES_VERSION,
     "pass_ms": {cost key: {"1": ms, "2": ms, ...}},          # decoding.choices.pass_costs
     "low_bit_bounds": {cost key: {"OUTxIN": tokens, ...}},   # int8-hybrid, int8-fp16-hybrid (float32 key)
     "fp16_speedup": {cost key: {"1": ratio, "128": ratio}}}  # decoding.choices.auto (fp16-weights)

A cost key (:func:`cost_key`) names what a model's timings depend on: the model, how its weights are
held, device, dtype, CPU and threads, torch. A file of another version is read as empty, so a change of
what is measured or how is measured again (and the next write starts the file anew); the files of
earlier releases (``pass-costs.json``, ``weight-choice.json``) are not read. A reader takes a missing or
unreadable file as empty. A writer takes a file lock, reads the file again, changes it and replaces it in
one rename, so processes measuring at the same time keep each other's entries.

The pin: where ``$SPECLSP_MEASURED_FIGURES`` (:data:`PIN_VARIABLE`) names a JSON file of the same layout,
its figures are used instead of the cache's, never checked and never written: the choices then depend on
that file alone (``tests/conftest.py`` pins every test, and every server a test starts, this way). In a
pinned file an entry is looked up by the full cost key, then by the model's name (the key's first
field), then under ``"*"``; in ``low_bit_bounds`` the shape ``"*"`` stands for any shape not named.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Callable

import torch

from decoding.weights.cpu_flags import cpu_name
from decoding.weights.gguf_models import cache_root
from decoding.weights.fp16_weights import Fp16WeightLinear
from decoding.weights.hybrid_linear import HybridLinear

log = logging.getLogger(__name__)

FIGURES_VERSION = 1  # raise when what is measured, or how, changes: older files are measured again
PIN_VARIABLE = "SPECLSP_MEASURED_FIGURES"
PASS_MS = "pass_ms"
LOW_BIT_BOUNDS = "low_bit_bounds"
FP16_SPEEDUP = "fp16_speedup"  # float32 product time over fbgemm's float16-weight product, per pass size
ANY = "*"  # in a pinned file: any model, any weight shape


def cache_file() -> Path:
    """The cache file of measured figures (see the module docstring)."""
    return cache_root() / "measured.json"


def pinned_file() -> Path | None:
    """The pinned figures' file named by :data:`PIN_VARIABLE`, or ``None`` where none is."""
    value = os.environ.get(PIN_VARIABLE)
    return Path(value).expanduser() if value else None


def lookup(section: str, key: str) -> tuple[dict | None, bool]:
    """``(entry, pinned)``: the entry of ``section`` for ``key``, from the pinned file where one is named
    (then ``pinned`` is true; a pinned file without an entry for ``key`` falls through to the cache), else
    from the cache file. ``None`` where neither has one."""
    pin = pinned_file()
    if pin is not None:
        entries = _section(read_json(pin), section)
        for name in (key, key.split("|", 1)[0], ANY):
            if isinstance(entries.get(name), dict):
                return entries[name], True
    entry = _section(read_figures(), section).get(key)
    return (entry if isinstance(entry, dict) else None), False


def read_figures() -> dict:
    """The cache file's object, ``{}`` where it is missing, unreadable or of another version."""
    known = read_json(cache_file())
    return known if known.get("version") == FIGURES_VERSION else {}


def keep_entry(section: str, key: str, change: Callable[[dict | None], dict], what: str) -> bool:
    """Write ``change(the entry the file holds now, or None)`` as ``section``'s entry for ``key``, under
    the file lock (a file of another version starts anew). A file that cannot be written is logged
    (``what``: what was to be kept); returns whether it was written."""

    def put(known: dict) -> None:
        if known.get("version") != FIGURES_VERSION:
            known.clear()
            known["version"] = FIGURES_VERSION
        entries = known.setdefault(section, {})
        earlier = entries.get(key)
        entries[key] = change(earlier if isinstance(earlier, dict) else None)

    return update_json(cache_file(), put, what)


def _section(known: dict, section: str) -> dict:
    entries = known.get(section)
    return entries if isinstance(entries, dict) else {}


def read_json(path: Path) -> dict:
    """The object in ``path`` (``{}`` where the file is missing, unreadable or not an object)."""
    try:
        known = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        known = {}
    return known if isinstance(known, dict) else {}


def update_json(path: Path, change: Callable[[dict], None], what: str) -> bool:
    """Apply ``change`` to the object in ``path`` under a file lock and write it back in one rename. A file
    that cannot be written is logged (``what``: what was to be kept, for the message); returns whether it was."""
    from filelock import FileLock, Timeout

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path.with_suffix(".lock")), timeout=30):
            known = read_json(path)
            change(known)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(known, indent=1) + "\n")
            temporary.replace(path)
        return True
    except (OSError, Timeout) as exc:
        log.warning("could not keep the %s in %s: %s", what, path, exc)
        return False


def _weights_kind(model) -> str:
    """How the linear layers hold their weights: ``dense``, or a layer class of ours (``HybridInt4Linear``,
    ``HybridInt8Linear``, ``Fp16WeightLinear``)."""
    if not isinstance(model, torch.nn.Module):
        return "own"  # a llama.cpp model: its GGUF file's types
    for module in model.modules():
        if isinstance(module, (HybridLinear, Fp16WeightLinear)):
            return type(module).__name__
    return "dense"


def cost_key(name: str, model, dtype: torch.dtype | None = None) -> str:
    """What a model's timings depend on: the model, its kind (transformers' class or llama.cpp's), how
    its weights are held, device, dtype (``dtype``: the one it will run in, for a model loaded narrow), the
    CPU (or GPU) and its threads, torch."""
    device = model.device
    hardware = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return "|".join((name, type(model).__name__, _weights_kind(model), str(device), str(dtype or model.dtype), hardware,
                     f"threads={torch.get_num_threads()}", f"torch={torch.__version__}"))


def known_bounds(key: str, shapes: set[tuple[int, int]]) -> dict[tuple[int, int], int] | None:
    """The low-bit bounds pinned or cached for ``key``, where they cover ``shapes`` (a pinned ``"*"``
    covers any shape); else ``None``."""
    entry, _ = lookup(LOW_BIT_BOUNDS, key)
    if entry is None:
        return None
    try:
        default = int(entry[ANY]) if ANY in entry else None
        bounds = {tuple(int(n) for n in shape.split("x")): int(bound) for shape, bound in entry.items() if shape != ANY}
    except (ValueError, AttributeError, TypeError):
        return None
    if default is not None:
        bounds = {shape: bounds.get(shape, default) for shape in shapes}
    return bounds if shapes <= set(bounds) else None


#: Share of the linear weights, in shapes where an int8 kernel is faster for one token, from which auto holds
#: a model's weights as int8 (int8-hybrid for bfloat16, int8-fp16-hybrid for float32).
MIN_FASTER_SHARE = 0.5


def faster_share(linears, bounds: dict[tuple[int, int], int]) -> float:
    """The share of ``linears``' weights (values) in shapes whose low-bit bound in ``bounds`` is at least one
    token; 0.0 without weights."""
    total = sum(m.weight.numel() for m in linears)
    faster = sum(m.weight.numel() for m in linears if bounds.get((m.out_features, m.in_features), 0) >= 1)
    return faster / total if total else 0.0


def listed_bounds(bounds: dict[tuple[int, int], int]) -> str:
    """``bounds`` for a message: ``"OUTxIN: tokens, ..."`` by weight shape."""
    return ", ".join(f"{o}x{i}: {b}" for (o, i), b in sorted(bounds.items()))

