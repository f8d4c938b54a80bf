"""Hand back the pages of a checkpoint file that loading read and the model no longer needs.

transformers loads a safetensors checkpoint through a memory mapping of the whole file. Loading reads
every byte (to copy, quantise or pack the weights), so every page of the file becomes part of the
server's resident memory, and stays: the mapping lives as long as any tensor still points into it (the
embedding table, the norms and biases that are used as stored). A bfloat16 Qwen2.5-Coder 1.5B checkpoint
is 2.9 GiB of such pages, though after ``int8-hybrid`` only its 0.5 GiB embedding table and a few small
tensors are read from it again.

:func:`release_file_pages` asks the kernel to reclaim the pages of those mappings
(``madvise(MADV_PAGEOUT)``, Linux 5.4 and later; man madvise(2)). They are clean file pages: reclaiming
loses nothing, and a tensor that still points into the file reads its page again from the file (or the page
cache) on its next access, so only the rows a session looks up come back. A page written since the mapping
(a private copy) is never dropped: without swap the kernel keeps it. Elsewhere (not Linux, an older kernel)
the call does nothing.
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import sys
from pathlib import Path

import torch

log = logging.getLogger(__name__)

MADV_PAGEOUT = 21  # linux/mman.h
_MAPS = "/proc/self/maps"


def file_mappings(paths: set[Path], maps: str = _MAPS) -> list[tuple[int, int]]:
    """``(start, end)`` addresses (page-aligned, end exclusive) of this process's mappings of ``paths``
    (resolved), from ``maps`` (``/proc/self/maps`` lines); ``[]`` where it cannot be read."""
    wanted = {str(path.resolve()) for path in paths}
    ranges = []
    try:
        with open(maps, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].strip() in wanted:
                    start, end = (int(address, 16) for address in fields[0].split("-"))
                    ranges.append((start, end))
    except OSError:
        return []
    return ranges


def _madvise():
    """libc's ``madvise`` (argtypes set), or ``None`` off Linux or without it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return madvise


def release_tensor_pages(tensor: torch.Tensor) -> int:
    """Ask the kernel to reclaim the whole pages that ``tensor``'s bytes (a CPU tensor) lie on, for a weight
    read once from a mapped checkpoint and then replaced (quantised, packed): with the checkpoint still mapped,
    they would stay resident until loading ends. Pages of memory that is not a file's are kept (no swap).
    Returns the bytes advised; never raises."""
    madvise = _madvise()
    if madvise is None or tensor.device.type != "cpu" or tensor.numel() == 0:
        return 0
    page = mmap.PAGESIZE
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    start, end = -(-start // page) * page, end // page * page  # whole pages inside the tensor
    if end <= start:
        return 0
    return end - start if madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_PAGEOUT) == 0 else 0


def release_file_pages(directory: str | os.PathLike | None, suffix: str = ".safetensors") -> int:
    """Ask the kernel to reclaim the resident pages of this process's mappings of the ``suffix`` files in
    ``directory`` (see the module docstring). Returns the bytes of mappings advised (0: none found, not
    Linux, or refused); never raises."""
    madvise = _madvise()
    if directory is None or madvise is None:
        return 0
    try:
        paths = {path for path in Path(directory).iterdir() if path.name.endswith(suffix)}
    except OSError:
        return 0
    advised = 0
    ranges = file_mappings(paths)
    for start, end in ranges:
        if madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_PAGEOUT) == 0:
            advised += end - start
        else:
            log.debug("madvise(MADV_PAGEOUT) refused for %#x-%#x: %s", start, end, os.strerror(ctypes.get_errno()))
    return advised
