"""Settings from what an editor sends (:func:`parse_settings`): invalid values and unknown keys become
warnings for the user, and the previous value is kept; nothing here raises on user input."""

from __future__ import annotations

from dataclasses import Field, replace
from typing import Any

from lsp_server.settings.spec import BY_KEY, BY_OLD_KEY, GROUPS, Settings, setting_key
from lsp_server.settings.values import check_value


def parse_settings(options: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Settings from a JSON object, and a warning per rejected, unknown or deprecated key.

    Args:
        options: ``initializationOptions`` or a ``workspace/didChangeConfiguration`` payload; either
            the settings themselves or ``{"speclsp": {...}}``. A setting is a group's object member
            (``{"completion": {"maxNewTokens": 64}}``), a dotted key (``"completion.maxNewTokens"``) or,
            deprecated for one release, its flat name of the release before (``"maxNewTokens"``).
            ``None`` means no settings.
        base: values to start from (defaults when ``None``).
    """
    settings = base or Settings()
    if options is None or options == []:  # Lua's empty table arrives as an empty JSON array
        return settings, []
    if isinstance(options, dict) and isinstance(options.get("speclsp"), dict):
        options = options["speclsp"]
    if not isinstance(options, dict):
        return settings, [f"settings must be a JSON object, got {type(options).__name__}; using defaults"]
    given, warnings = _given(options)
    changes: dict[str, Any] = {}
    for name, (key, spec, value) in given.items():
        if isinstance(spec.default, tuple) and isinstance(value, list):
            value = tuple(value)  # JSON arrays
        if isinstance(spec.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if check_value(spec, value) is not None:
            warnings.append(f"invalid value {value!r} for speclsp.{key}; keeping {getattr(settings, name)!r}")
            continue
        changes[name] = value
    settings, more = _consistent(replace(settings, **changes))
    return settings, warnings + more


def _given(options: dict[str, Any]) -> tuple[dict[str, tuple[str, Field, Any]], list[str]]:
    """``{field name: (the key as written, spec, value)}`` of ``options``, and a warning per unknown or
    deprecated key. A key of the grouped form wins over the flat name of the same setting."""
    new: dict[str, tuple[str, Field, Any]] = {}
    old: dict[str, tuple[str, Field, Any]] = {}
    warnings = []
    for name, value in options.items():
        if name in GROUPS and isinstance(value, dict):  # "model" names a group here, a flat name below
            for inner, item in value.items():
                key = f"{name}.{inner}"
                if key in BY_KEY:
                    new[BY_KEY[key].name] = (key, BY_KEY[key], item)
                else:
                    warnings.append(f"unknown setting speclsp.{key} ignored")
        elif name in BY_KEY:
            new[BY_KEY[name].name] = (name, BY_KEY[name], value)
        elif name in BY_OLD_KEY:
            old[BY_OLD_KEY[name].name] = (name, BY_OLD_KEY[name], value)
        elif name in GROUPS:
            warnings.append(f"speclsp.{name} must be an object of the {name}.* settings; ignored")
        else:
            warnings.append(f"unknown setting speclsp.{name} ignored")
    for field_name, (key, spec, value) in old.items():
        warning = f"speclsp.{key} is deprecated: the setting is now speclsp.{setting_key(spec)}"
        if field_name in new:
            warnings.append(warning + f" (both are set: {key} is ignored)")
            continue
        warnings.append(warning + " (the flat name is read until the next release)")
        new[field_name] = (key, spec, value)
    return new, warnings


def _consistent(settings: Settings) -> tuple[Settings, list[str]]:
    """``settings`` with the combinations that cannot run replaced, and a warning for each."""
    warnings = []
    if settings.drafter in ("model", "staged") and settings.draft_model == "none":
        warnings.append(f"decoding.drafter {settings.drafter!r} needs a draft model but model.draft is 'none'; "
                        "using drafter 'ngram'")
        settings = replace(settings, drafter="ngram")
    if settings.drafter == "tree" and settings.engine == "llama.cpp":
        warnings.append("decoding.drafter 'tree' needs per-position attention masks, which model.engine "
                        "'llama.cpp' does not take; using drafter 'ngram'")
        settings = replace(settings, drafter="ngram")
    return settings, warnings
