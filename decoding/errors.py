"""Errors the engine raises at its boundary (the server maps them to messages once)."""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded, or a draft does not fit its target."""
