"""The bundled starter pair: a small target and draft code model with one shared tokenizer.

The weights live in ``decoding/weights/starter/models/{target,draft}`` as ordinary Hugging Face model
directories (``config.json``, ``model.safetensors``, ``tokenizer.json``), so they load with the same
code path as any hub model. ``python -m training.train`` (or ``speclsp train-starter``)
reproduces them.
"""

from __future__ import annotations

from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "models"
TARGET_DIR = MODELS_DIR / "target"
DRAFT_DIR = MODELS_DIR / "draft"

#: Special tokens, named as Qwen2.5-Coder names them so one prompt builder serves both.
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
)

__all__ = ["DRAFT_DIR", "MODELS_DIR", "SPECIAL_TOKENS", "TARGET_DIR"]
