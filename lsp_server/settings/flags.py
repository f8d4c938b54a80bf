"""The settings as command-line flags (``speclsp complete``, ``speclsp serve``): ``--kebab-case`` of the
Python name (``--max-new-tokens``), listed under the setting's group, default and help from the spec."""

from __future__ import annotations

import argparse
from dataclasses import fields
from typing import Any

from lsp_server.settings.spec import GROUPS, Settings, setting_key


def add_setting_flags(parser: argparse.ArgumentParser, names: tuple[str, ...] | None = None) -> None:
    """Add a flag per setting to ``parser``, in one argument group per settings group.

    Args:
        names: field names; ``None``: the ones marked for ``speclsp complete``.
    """
    groups: dict[str, Any] = {}
    for spec in fields(Settings):
        if (spec.name not in names) if names is not None else not spec.metadata["cli"]:
            continue
        group = spec.metadata["group"]
        if group not in groups:
            groups[group] = parser.add_argument_group(f"settings {group}.*", GROUPS[group])
        flag, schema = "--" + spec.name.replace("_", "-"), spec.metadata["schema"]
        text = f"{spec.metadata['description']} (setting {setting_key(spec)})".replace("%", "%%")
        if isinstance(spec.default, bool):
            groups[group].add_argument(flag, action="store_true", help=text)
            continue
        groups[group].add_argument(flag, type=type(spec.default), default=spec.default, choices=schema.get("enum"),
                                   help=text)


def settings_from_flags(args: argparse.Namespace, **overrides: Any) -> Settings:
    """The settings named by the flags of :func:`add_setting_flags` in ``args`` (others: defaults).

    Raises:
        ValueError: a value outside its setting's spec.
    """
    given = {spec.name: getattr(args, spec.name) for spec in fields(Settings) if hasattr(args, spec.name)}
    return Settings(**{**given, **overrides})
