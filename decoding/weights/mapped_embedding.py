"""The input embedding table read from the checkpoint file in place, not copied into memory.

A pass looks up one row of the embedding table per token, and a session of code touches a few thousand of
the 151,936 rows of a Qwen2.5-Coder vocabulary. Held in memory, the table of the 1.5B model takes
466 MB in float16 (the 0.5B's 272 MB). Mapped from the safetensors file instead (a private, read-only
mapping), only the pages of rows looked up become resident, and those are file pages the system can
drop and read again. The rows are the stored values (bfloat16 or float16) widened to float32, which is
exact, so a model whose table float16 holds exactly (:mod:`decoding.choices.float32_weights`) computes
the same with either.

The safetensors format (https://github.com/huggingface/safetensors#format): an 8-byte little-endian
header length, a JSON header naming each tensor's dtype, shape and ``data_offsets`` into the byte buffer
that follows. ``torch.from_file`` maps the file; nothing is read until a row is looked up. The cached
model directories are written once and never rewritten in place (a new conversion gets a new
directory), so the mapping stays valid while the server runs.
"""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_INDEX = "model.safetensors.index.json"
_SINGLE = "model.safetensors"
_ROWS_COMPARED = 64  # rows compared with the loaded table before the mapping replaces it


class MappedEmbedding(torch.nn.Module):
    """An embedding whose table ``(num_embeddings, embedding_dim)`` (bfloat16, float16 or float32) is a
    mapped file region; rows come out float32.

    Args:
        table: the mapped table (:func:`checkpoint_tensor`).
        padding_idx: as the replaced layer's (it changes nothing at inference).
    """

    def __init__(self, table: torch.Tensor, padding_idx: int | None = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = table.shape
        self.padding_idx = padding_idx
        self.table = table  # not a buffer: ``model.to`` must not copy it into memory

    @property
    def weight(self) -> torch.Tensor:
        """The table as float32 (a copy, made on each read, that reads the whole file region; the passes
        never read it)."""
        return self.table.to(torch.float32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: (...) int64 -> (..., embedding_dim) float32
        return torch.nn.functional.embedding(ids, self.table).to(torch.float32)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, {self.table.dtype} mapped from the checkpoint file"


def checkpoint_tensor(directory: str | Path, name: str) -> torch.Tensor | None:
    """Tensor ``name`` of the safetensors checkpoint in ``directory`` (one file, or shards with an index),
    mapped from its file, not read; ``None`` where there is no such file or tensor, or its dtype is not
    bfloat16, float16 or float32."""
    directory = Path(directory)
    path = directory / _SINGLE
    index = directory / _INDEX
    try:
        if index.is_file():
            path = directory / json.loads(index.read_text(encoding="utf-8"))["weight_map"][name]
        if not path.is_file():
            return None
        with path.open("rb") as file:
            (header_length,) = struct.unpack("<Q", file.read(8))
            entry = json.loads(file.read(header_length)).get(name)
        size = path.stat().st_size
    except (OSError, KeyError, ValueError, struct.error):
        return None
    if not entry or entry.get("dtype") not in _DTYPES:
        return None
    start, end = (8 + header_length + offset for offset in entry["data_offsets"])
    if end > size:
        return None
    whole = torch.from_file(str(path), shared=False, size=size, dtype=torch.uint8)
    return whole[start:end].view(_DTYPES[entry["dtype"]]).view(*entry["shape"])


def map_input_embedding(model: torch.nn.Module, directory: str | Path) -> bool:
    """Replace ``model``'s input embedding (loaded from the checkpoint in ``directory``) by a
    :class:`MappedEmbedding` of its tensor in the file, where that tensor is found, has the table's shape
    and its sampled rows equal the loaded table's; returns whether it did. Call before the loaded table
    is changed (packed or converted): the comparison is with the values as loaded."""
    layer = model.get_input_embeddings()
    names = [name for name, module in model.named_modules() if module is layer]
    if not names or not isinstance(layer, torch.nn.Module) or not hasattr(layer, "weight"):
        return False
    table = checkpoint_tensor(directory, f"{names[0]}.weight")
    loaded = layer.weight.detach()
    if table is None or tuple(table.shape) != tuple(loaded.shape):
        return False
    rows = torch.linspace(0, loaded.shape[0] - 1, _ROWS_COMPARED).long()
    if not torch.equal(table[rows].to(torch.float32), loaded[rows].to(torch.float32)):
        log.info("the checkpoint's %s differs from the loaded table: kept in memory", names[0])
        return False
    model.set_input_embeddings(MappedEmbedding(table, getattr(layer, "padding_idx", None)))
    return True
