"""Drafters: propose tokens for the target to verify. See :mod:`decoding.drafters.base`."""

from decoding.drafters.base import Draft, DraftContext, Drafter
from decoding.drafters.draft_model import ModelDrafter
from decoding.drafters.ngram import NgramConfig, NgramDrafter
from decoding.drafters.ngram_store import NgramStore
from decoding.drafters.region import RegionDrafter
from decoding.drafters.switching import SwitchingDrafter

__all__ = ["Draft", "DraftContext", "Drafter", "ModelDrafter", "NgramConfig", "NgramDrafter", "NgramStore",
           "RegionDrafter", "SwitchingDrafter"]
