"""Typed, defaulted server settings from ``initializationOptions`` (section ``speclsp`` or top level).

Keys are camelCase as editors write them. An invalid value is reported back as a warning and the
default is kept; unknown keys are reported too. Nothing here raises on user input.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from decoding.engine import DRAFTER_MODES, EngineConfig
from decoding.generate import DEFAULT_MAX_DRAFT_TOKENS
from decoding.model_names import AUTO
from lsp_server.repo_index import IndexConfig


@dataclass(frozen=True)
class Settings:
    """Everything a user can set. Defaults run the real pair when installed (else the starter pair), greedy."""

    model: str = AUTO  # auto | qwen2.5-coder-1.5b | qwen2.5-coder-0.5b | starter | FILE.gguf | a directory | a hub id
    draft_model: str = AUTO  # same forms, or "none"; auto: the target's registered partner, else none
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto | float32 | float16 | bfloat16
    trust_remote_code: bool = False  # run model repositories' own code; off unless you trust them
    drafter: str = "auto"  # auto | ngram | model | none
    max_new_tokens: int = 64  # tokens per completion at most
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    max_draft_tokens: int = DEFAULT_MAX_DRAFT_TOKENS  # draft length cap per verify round
    draft_min_confidence: float = 0.0  # the draft model stops at a token it gives less probability (0 = off)
    prefix_tokens: int = 1024  # prompt budget before the cursor
    suffix_tokens: int = 256  # prompt budget after the cursor
    extra_tokens: int = 512  # prompt budget for snippets of other files (models that know the repo format)
    index_enabled: bool = True  # index the workspace folders (draft source and context)
    index_include: tuple[str, ...] = ()  # gitignore-style patterns; empty: every file not excluded
    index_exclude: tuple[str, ...] = ()  # gitignore-style patterns, on top of .gitignore and the defaults
    max_file_bytes: int = 1_000_000  # files larger than this are not indexed
    index_max_tokens: int = 2_000_000  # memory budget of the index, in estimated tokens
    trace_level: str = "off"  # off | messages | verbose: $/logTrace when the client leaves its trace off
    trace_file: str = ""  # append one JSON line per request here ("" = no file)

    def engine_config(self) -> EngineConfig:
        """What the models depend on; a change here reloads them, any other setting applies at once."""
        return EngineConfig(model=self.model, draft_model=self.draft_model, device=self.device, dtype=self.dtype,
                            trust_remote_code=self.trust_remote_code)

    def index_config(self) -> IndexConfig | None:
        """What the repository index depends on (``None``: no index); a change here re-indexes."""
        if not self.index_enabled:
            return None
        return IndexConfig(max_file_bytes=self.max_file_bytes, max_tokens=self.index_max_tokens,
                           include=self.index_include, exclude=self.index_exclude)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_CHECKS = {
    "drafter": lambda v: v in DRAFTER_MODES,
    "device": lambda v: v == "auto" or v == "cpu" or v == "mps" or v.startswith("cuda"),
    "dtype": lambda v: v in ("auto", "float32", "fp32", "float16", "fp16", "bfloat16", "bf16"),
    "model": lambda v: bool(v.strip()),
    "draft_model": lambda v: bool(v.strip()),
    "max_new_tokens": lambda v: 1 <= v <= 4096,
    "temperature": lambda v: 0 <= v <= 10,
    "top_k": lambda v: v >= 0,
    "top_p": lambda v: 0 < v <= 1,
    "max_draft_tokens": lambda v: 0 <= v <= 64,
    "draft_min_confidence": lambda v: 0 <= v <= 1,
    "prefix_tokens": lambda v: 1 <= v <= 32768,
    "suffix_tokens": lambda v: 0 <= v <= 32768,
    "extra_tokens": lambda v: 0 <= v <= 32768,
    "max_file_bytes": lambda v: v >= 1,
    "index_max_tokens": lambda v: v >= 0,
    "trace_level": lambda v: v in ("off", "messages", "verbose"),
}


def parse_settings(options: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a JSON object, and a warning per rejected or unknown key.

    Args:
        options: ``initializationOptions`` or a ``workspace/didChangeConfiguration`` payload; either
            the settings themselves or ``{"speclsp": {...}}``. ``None`` means no settings.
        base: values to start from (defaults when ``None``).
    """
    settings = base or Settings()
    if options is None or options == []:  # Lua's empty table arrives as an empty JSON array
        return settings, []
    if isinstance(options, dict) and isinstance(options.get("speclsp"), dict):
        options = options["speclsp"]
    if not isinstance(options, dict):
        return settings, [f"settings must be a JSON object, got {type(options).__name__}; using defaults"]
    by_key = {_camel(f.name): f for f in fields(Settings)}
    changes: dict[str, Any] = {}
    warnings = []
    for key, value in options.items():
        field = by_key.get(key)
        if field is None:
            warnings.append(f"unknown setting speclsp.{key} ignored")
            continue
        default = getattr(Settings(), field.name)
        kind = type(default)
        if kind is tuple and isinstance(value, list) and all(isinstance(item, str) for item in value):
            value = tuple(value)  # JSON arrays of strings
        ok_type = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok_type = float(value), True
        if not ok_type or not _CHECKS.get(field.name, lambda v: True)(value):
            warnings.append(f"invalid value {value!r} for speclsp.{key}; keeping {getattr(settings, field.name)!r}")
            continue
        changes[field.name] = value
    settings = replace(settings, **changes)
    if settings.drafter == "model" and settings.draft_model == "none":
        warnings.append("drafter 'model' needs a draft model but draftModel is 'none'; using drafter 'ngram'")
        settings = replace(settings, drafter="ngram")
    return settings, warnings
