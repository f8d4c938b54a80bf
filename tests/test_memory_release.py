"""Memory that loading holds and no pass needs, handed back.

* The checkpoint's file pages that loading read (``decoding/weights/file_pages.py``): a mapped file, every
  page read, is resident; after :func:`release_file_pages` its pages are not, and a tensor mapped from it
  still reads the same values (read again from the file).
* A target that writes next edits only keeps its hybrid layers' long-pass weights alone
  (:meth:`Engine.keep_long_pass_weights`): its low-bit weights are freed, every pass computes as the hybrid's
  long passes did, and greedy speculative output still equals plain greedy output of the model kept.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from decoding.engine import Engine
from decoding.types import EngineConfig
from decoding.weights.file_pages import file_mappings, release_file_pages, release_tensor_pages
from decoding.weights.hybrid_linear import HybridLinear, keep_long_pass_weights
from tests.test_quantization import assert_speculative_equals_plain

_MB = 1 << 20


def _resident_bytes(start: int, end: int) -> int:
    """Resident bytes of this process's mapping ``start-end`` (``/proc/self/smaps``)."""
    wanted, inside = f"{start:x}-{end:x}", False
    with open("/proc/self/smaps", encoding="utf-8") as lines:
        for line in lines:
            if "-" in line.split(maxsplit=1)[0] and ":" not in line.split(maxsplit=1)[0]:
                inside = line.startswith(wanted)
            elif inside and line.startswith("Rss:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"mapping {wanted} not found")


@pytest.mark.unit
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT and /proc are Linux's")
def test_a_mapped_checkpoint_read_whole_is_resident_until_released_and_reads_the_same_after(tmp_path):
    path = tmp_path / "model.safetensors"
    values = torch.arange(16 * _MB // 4, dtype=torch.float32)
    with open(path, "wb") as file:
        file.write(values.numpy().tobytes())
        file.flush()
        os.fsync(file.fileno())  # clean pages: reclaimable without writeback
    mapped = torch.from_file(str(path), shared=False, size=values.numel(), dtype=torch.float32)
    assert torch.equal(mapped, values)  # reads every page, as loading does
    (start, end), = file_mappings({path})
    assert _resident_bytes(start, end) >= 15 * _MB
    assert release_file_pages(tmp_path) == end - start
    assert _resident_bytes(start, end) < 2 * _MB, "the pages read while loading are still resident"
    assert torch.equal(mapped[-1000:], values[-1000:])  # read again from the file
    assert release_file_pages(tmp_path, suffix=".gguf") == 0  # no mapping of such a file
    assert release_file_pages(None) == 0


@pytest.mark.unit
def test_file_mappings_finds_a_path_in_maps_lines_only_where_it_is_mapped(tmp_path):
    path = tmp_path / "a.safetensors"
    path.write_bytes(b"x")
    maps = tmp_path / "maps"
    maps.write_text(f"7f00-7f10 r--p 00000000 00:10 5  {path.resolve()}\n"
                    f"7f20-7f30 r--p 00000000 00:10 6  {path.resolve()}.other\n"
                    "7f40-7f50 rw-p 00000000 00:00 0 \n", encoding="utf-8")
    assert file_mappings({path}, str(maps)) == [(0x7F00, 0x7F10)]
    assert file_mappings({path}, str(tmp_path / "missing")) == []


@pytest.mark.model
def test_a_target_that_keeps_its_dense_weights_alone_frees_the_int8_and_still_decodes_exactly():
    engine = Engine.load(EngineConfig(model="starter", draft_model="starter-draft", device="cpu", dtype="float32",
                                      quantization="int8-hybrid"))
    hybrids = [m for m in engine.target.model.modules() if isinstance(m, HybridLinear)]
    low_bit_bytes = sum(t.numel() * t.element_size() for m in hybrids for n, t in m.named_parameters(recurse=False)
                        if n not in ("dense", "bias"))
    x = torch.randn(1, 3, hybrids[0].in_features)
    with torch.inference_mode():
        by_dense = hybrids[0].dense_product(x)
    first_name = next(name for name, m in engine.target.model.named_modules() if m is hybrids[0])
    assert engine.keep_long_pass_weights() == low_bit_bytes > 0
    assert not any(isinstance(m, HybridLinear) for m in engine.target.model.modules())
    assert engine.target.quantization == "none"
    assert any(isinstance(m, HybridLinear) for m in engine.draft.model.modules()), "the draft model is not changed"
    kept = engine.target.model.get_submodule(first_name)
    assert type(kept) is torch.nn.Linear
    with torch.inference_mode():
        assert torch.equal(kept(x), by_dense)  # every pass computes as the hybrid's long passes did
    assert engine.keep_long_pass_weights() == 0  # nothing left to free
    assert_speculative_equals_plain(engine, "ngram")


@pytest.mark.unit
def test_keep_long_pass_weights_leaves_layers_without_a_dense_copy():
    class NoDense(HybridLinear):
        pass

    model = torch.nn.Sequential(NoDense(torch.nn.Linear(8, 4)), torch.nn.Linear(4, 2))
    assert keep_long_pass_weights(model) == 0
    assert isinstance(model[0], NoDense)


@pytest.mark.unit
@pytest.mark.skipif(not torch.backends.quantized.supported_engines or "fbgemm" not in
                    torch.backends.quantized.supported_engines, reason="needs fbgemm's float16 product")
def test_an_int8_fp16_hybrid_layer_keeps_its_float16_panels_and_bias_and_computes_as_its_long_passes():
    from decoding.weights.fp16_weights import Fp16WeightLinear
    from decoding.weights.int8_fp16_hybrid import HybridInt8Fp16Linear

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.Linear(48, 8, bias=False))
    model[0] = HybridInt8Fp16Linear(model[0])
    x = torch.randn(1, 3, 64)
    with torch.inference_mode():
        by_long_pass = model[0].dense_product(x)
    low_bit_bytes = 48 * 64 + 48 * 2  # int8 weights and bfloat16 scales
    assert keep_long_pass_weights(model) == low_bit_bytes
    assert type(model[0]) is Fp16WeightLinear and model[0].bias is not None
    with torch.inference_mode():
        assert torch.equal(model[0](x), by_long_pass)
    assert type(model[1]) is torch.nn.Linear


@pytest.mark.unit
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_PAGEOUT and /proc are Linux's")
def test_a_weight_read_from_a_mapped_file_hands_back_its_own_pages_only(tmp_path):
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as file:
        file.write(torch.arange(8 * _MB // 4, dtype=torch.float32).numpy().tobytes())
        file.flush()
        os.fsync(file.fileno())
    mapped = torch.from_file(str(path), shared=False, size=8 * _MB // 4, dtype=torch.float32)
    first, second = mapped[: 4 * _MB // 4], mapped[4 * _MB // 4:]
    total = float(first.sum() + second.sum())  # both halves read
    (start, end), = file_mappings({path})
    assert _resident_bytes(start, end) >= 8 * _MB - 4096
    assert release_tensor_pages(first) == 4 * _MB
    assert 4 * _MB - 4096 <= _resident_bytes(start, end) < 5 * _MB  # the second half stays
    assert float(first.sum() + second.sum()) == total  # read again from the file
    assert release_tensor_pages(torch.empty(0)) == 0
