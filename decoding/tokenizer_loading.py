"""Loading a model's tokenizer as it was trained.

Its own module (not :mod:`decoding.loading`) because both model loading and the one-time GGUF
conversion (:mod:`decoding.gguf_models`, which :mod:`decoding.loading` imports) need it: no import cycle.
"""

from __future__ import annotations

from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast
from transformers.models.auto.tokenization_auto import get_tokenizer_config

# tokenizer_config.json classes meaning "exactly what tokenizer.json says"
_GENERIC_TOKENIZER_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def load_tokenizer(location: str, local_only: bool, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """The tokenizer a model was trained with.

    ``AutoTokenizer`` picks the class registered for the config's ``model_type`` over a generic class
    declared in ``tokenizer_config.json`` for some model types (transformers 5 lists ``qwen2`` among
    "incorrect hub tokenizer classes"), and ``Qwen2Tokenizer`` brings its own pre-tokenizer: digits one
    by one, a newline split from the indentation after it. A model with its own ``tokenizer.json`` (the
    starter pair, trained on ``tokenizers`` output) would then see token sequences it never saw in
    training. So a declared generic class loads ``tokenizer.json`` as it is; any other goes through
    ``AutoTokenizer``.

    Raises:
        OSError, ValueError: as ``from_pretrained`` does (no tokenizer files, bad JSON).
    """
    declared = get_tokenizer_config(location, local_files_only=local_only).get("tokenizer_class")
    if declared in _GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(location, local_files_only=local_only)
    return AutoTokenizer.from_pretrained(location, local_files_only=local_only, trust_remote_code=trust_remote_code)
