"""Whether a value fits its setting's spec (:func:`check_value`); nothing here raises on user input."""

from __future__ import annotations

import math
import re
from dataclasses import Field
from typing import Any

import pathspec

_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}


def check_value(spec: Field, value: Any) -> str | None:
    """What is wrong with ``value`` for the setting ``spec`` (``None``: nothing). Types are exact
    (``bool`` is no number, an ``int`` is a valid ``float``); a tuple setting holds gitignore-style patterns."""
    kind = type(spec.default)
    if kind is tuple:
        if not (isinstance(value, tuple) and all(isinstance(item, str) for item in value)):
            return f"expected a list of strings, got {value!r}"
        try:  # every list setting holds gitignore-style patterns
            pathspec.GitIgnoreSpec.from_lines(value)
        except (ValueError, TypeError) as exc:  # pathspec's GitWildMatchPatternError is a ValueError
            return f"not valid gitignore-style patterns: {exc}"
        return None
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, (int, float) if kind is float else kind):
        return f"expected {_TYPE_NAMES[kind]}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    schema = spec.metadata["schema"]
    if "enum" in schema and value not in schema["enum"]:
        return f"{value!r} is not one of {', '.join(map(str, schema['enum']))}"
    if "pattern" in schema and not re.match(schema["pattern"], value):
        return f"{value!r} does not match {schema['pattern']}"
    if "minLength" in schema and len(value.strip()) < schema["minLength"]:
        return "must not be empty"
    if value < schema.get("minimum", value) or value > schema.get("maximum", value):
        return f"{value!r} is outside [{schema.get('minimum', '-inf')}, {schema.get('maximum', 'inf')}]"
    if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        return f"{value!r} must be more than {schema['exclusiveMinimum']}"
    return None
