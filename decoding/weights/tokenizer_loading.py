"""Loading a model's tokenizer as it was trained.

Its own module (not :mod:`decoding.weights.loading`) because both model loading and the one-time GGUF
conversion (:mod:`decoding.weights.gguf_models`, which :mod:`decoding.weights.loading` imports) need it: no import cycle.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

# tokenizer_config.json classes meaning "exactly what tokenizer.json says"
_GENERIC_TOKENIZER_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})
#: Classes whose own pre-tokenizer gives the same tokens as their model's tokenizer.json, so that file alone
#: may stand in for them where torch must not load (transformers' auto classes import it): checked on the
#: Qwen2.5-Coder packs (tests/test_real_models.py).
_SAME_AS_TOKENIZER_JSON = frozenset({"Qwen2Tokenizer", "Qwen2TokenizerFast"})


def load_tokenizer(location: str, local_only: bool, trust_remote_code: bool = False,
                   without_torch: bool = False) -> PreTrainedTokenizerBase:
    """The tokenizer a model was trained with.

    ``AutoTokenizer`` picks the class registered for the config's ``model_type`` over a generic class
    declared in ``tokenizer_config.json`` for some model types (transformers 5 lists ``qwen2`` among
    "incorrect hub tokenizer classes"), and ``Qwen2Tokenizer`` brings its own pre-tokenizer: digits one
    by one, a newline split from the indentation after it. A model with its own ``tokenizer.json`` (the
    starter pair, trained on ``tokenizers`` output) would then see token sequences it never saw in
    training. So a declared generic class loads ``tokenizer.json`` as it is; any other goes through
    ``AutoTokenizer``.

    Args:
        without_torch: never import torch (a remote backend's prompts): a local directory whose declared
            class tokenises as its ``tokenizer.json`` does (:data:`_SAME_AS_TOKENIZER_JSON`) loads that file
            too, not through ``AutoTokenizer`` (whose module imports torch); any other class still does.
    Raises:
        OSError, ValueError: as ``from_pretrained`` does (no tokenizer files, bad JSON).
    """
    declared = _declared_class(location, local_only)
    plain = declared in _GENERIC_TOKENIZER_CLASSES or (
        without_torch and local_only and declared in _SAME_AS_TOKENIZER_JSON
        and (Path(location) / "tokenizer.json").is_file())
    if plain:
        return PreTrainedTokenizerFast.from_pretrained(location, local_files_only=local_only)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(location, local_files_only=local_only, trust_remote_code=trust_remote_code)


def _declared_class(location: str, local_only: bool) -> str | None:
    """The ``tokenizer_class`` of ``tokenizer_config.json`` (read as JSON for a local directory, which
    imports nothing of transformers' auto classes; through transformers for a hub id)."""
    if local_only:
        config = Path(location) / "tokenizer_config.json"
        return json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class") if config.is_file() else None
    from transformers.models.auto.tokenization_auto import get_tokenizer_config

    return get_tokenizer_config(location, local_files_only=local_only).get("tokenizer_class")
