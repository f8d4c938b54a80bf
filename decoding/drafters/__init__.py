"""Drafters: propose tokens for the target to verify. See :mod:`decoding.drafters.base`."""

from decoding.drafters.adaptive import AdaptiveDrafter
from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramConfig, NgramDrafter
from decoding.drafters.ngram_store import NgramStore

__all__ = ["AdaptiveDrafter", "Draft", "DraftContext", "Drafter", "ModelDrafter", "NgramConfig", "NgramDrafter",
           "NgramStore"]
