"""What a loaded model can do, recorded once at load time from its tokenizer and its directory.

The completer reads these (whether to use the repository prompt, which ids end a completion) instead
of guessing from a model's name; the prompt builder finds the FIM ids in the same tokenizer:

* FIM: the tokenizer has ``<|fim_prefix|>``, ``<|fim_suffix|>`` and ``<|fim_middle|>`` as added tokens
  (Qwen2.5-Coder's names; Bavarian et al. 2022);
* the repository-level prompt: ``<|repo_name|>`` and ``<|file_sep|>`` (Qwen2.5-Coder technical report,
  section 3), unless the model directory's ``speclsp-model.json`` says the model was not trained on it
  (``{"capabilities": {"repo_prompt": false}}``, as the bundled starter target does);
* stop ids: every FIM and repository token, ``<|im_end|>``, ``<|endoftext|>``, the tokenizer's other
  special tokens and the model's end-of-sequence ids: a special token never belongs in inserted code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FIM_PAD = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>"
REPO_NAME, FILE_SEP = "<|repo_name|>", "<|file_sep|>"
STOP_TOKENS = (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, FIM_PAD, REPO_NAME, FILE_SEP, "<|im_end|>", "<|endoftext|>")
MODEL_RECORD = "speclsp-model.json"  # beside config.json: where the model came from, and declared capabilities


@dataclass(frozen=True)
class FimTokens:
    """Ids of the fill-in-the-middle markers."""

    prefix: int
    suffix: int
    middle: int


@dataclass(frozen=True)
class ModelCapabilities:
    """Recorded at load time; see the module docstring."""

    fim: FimTokens | None  # None: the prompt is the prefix alone (left to right)
    repo_prompt: bool  # the repository-level format with other files' snippets
    repo_tokens: tuple[int, int] | None  # (<|repo_name|>, <|file_sep|>) ids when the tokenizer has them
    stop_ids: frozenset[int]  # any of these ends a completion
    chat_template: bool  # the tokenizer carries a chat template (instruct models)


def _declared(model_dir: str | None) -> dict:
    if not model_dir:
        return {}
    try:
        record = json.loads((Path(model_dir) / MODEL_RECORD).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable %s in %s: %s", MODEL_RECORD, model_dir, exc)
        return {}
    declared = record.get("capabilities", {}) if isinstance(record, dict) else {}
    return declared if isinstance(declared, dict) else {}


def read_capabilities(tokenizer, eos_ids: Iterable[int] = (), model_dir: str | None = None) -> ModelCapabilities:
    """The capabilities of a model with this tokenizer, loaded from ``model_dir`` (``None``: a hub model
    whose directory is not ours to read).

    Args:
        tokenizer: a transformers tokenizer.
        eos_ids: the model's end-of-sequence ids (generation config and tokenizer).
    """
    added = tokenizer.get_added_vocab()
    declared = _declared(model_dir)
    fim = None
    if all(t in added for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)):
        fim = FimTokens(added[FIM_PREFIX], added[FIM_SUFFIX], added[FIM_MIDDLE])
    repo_tokens = (added[REPO_NAME], added[FILE_SEP]) if REPO_NAME in added and FILE_SEP in added else None
    repo_prompt = fim is not None and repo_tokens is not None and bool(declared.get("repo_prompt", True))
    stop_ids = (frozenset(added[t] for t in STOP_TOKENS if t in added)
                | frozenset(i for i in tokenizer.all_special_ids if i is not None) | frozenset(eos_ids))
    return ModelCapabilities(fim=fim, repo_prompt=repo_prompt, repo_tokens=repo_tokens, stop_ids=stop_ids,
                             chat_template=bool(getattr(tokenizer, "chat_template", None)))
