"""A GGUF file of another weight type (Q8_0, Q4_0, BF16) for a model pack, written from the pack's
bfloat16 safetensors (the torch engine's weights, themselves converted from the pack's Q4_K_M GGUF) with
the metadata and tensor layout of that GGUF: llama.cpp runs
batched passes of Q8_0, Q4_0 and BF16 weights through other kernels than Q4_K's, and the cost of a pass
of M tokens (``speclsp bench decode --step-cost --engine llama.cpp --model FILE.gguf``) decides between them.

Matrices take the chosen type; vectors (norms, biases) stay float32, as llama.cpp's own quantizer leaves
them. Q8_0 and BF16 hold the Q4_K_M weights almost unchanged; Q4_0 rounds them again.
Outside the runtime (needs ``gguf``, ``safetensors`` and ``tqdm``).

    python -m bench.gguf_requant --model qwen2.5-coder-0.5b --type q8_0 --out /tmp/0.5b-q8_0.gguf
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TYPES = {"q8_0": ("Q8_0", "MOSTLY_Q8_0"), "q4_0": ("Q4_0", "MOSTLY_Q4_0"), "bf16": ("BF16", "MOSTLY_BF16")}


def _hf_names(gguf, arch: str, blocks: int, hf_names: list[str]) -> dict[str, str]:
    """``{GGUF tensor name: safetensors name}`` through gguf's own name map."""
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], blocks)
    found = {}
    for hf_name in hf_names:
        gguf_name = name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is not None:
            found[gguf_name] = hf_name
    return found


def write_gguf(reader, out: Path, tensors, file_type: int | None = None) -> None:
    """Write ``out`` with the metadata of ``reader`` (a ``gguf.GGUFReader``; ``general.file_type`` set to
    ``file_type`` when given) and ``tensors``, an iterable of ``(name, data, gguf.GGMLQuantizationType)``,
    ``data`` a numpy array already in that type's bytes (see ``gguf.quants.quantize``)."""
    import gguf

    writer = gguf.GGUFWriter(str(out), reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue
        value = file_type if field.name == gguf.Keys.General.FILE_TYPE and file_type is not None else field.contents()
        sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub_type)
    for name, data, kind in tensors:
        writer.add_tensor(name, data, raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file(progress=False)
    writer.close()


def requantize(model: str, qtype: str, out: Path) -> dict:
    """Write ``out``; returns a summary (tensors per type, bytes).

    Raises:
        KeyError: a tensor of the pack's GGUF has no counterpart in its safetensors.
        ValueError: shapes differ, or ``qtype`` is unknown.
    """
    import gguf
    import torch
    from safetensors import safe_open
    from tqdm import tqdm

    from decoding.weights.gguf_files import pack_gguf_path
    from decoding.weights.gguf_models import pack_model_dir
    from decoding.weights.model_packs import PACKS

    if qtype not in TYPES:
        raise ValueError(f"unknown type {qtype!r}; use one of {', '.join(TYPES)}")
    quant = gguf.GGMLQuantizationType[TYPES[qtype][0]]
    reader = gguf.GGUFReader(pack_gguf_path(model))
    arch = reader.fields[gguf.Keys.General.ARCHITECTURE].contents()
    blocks = reader.fields[f"{arch}.block_count"].contents()
    weights = safe_open(str(pack_model_dir(PACKS[model]) / "model.safetensors"), framework="pt")
    names = _hf_names(gguf, arch, blocks, list(weights.keys()))
    counts: dict[str, int] = {}

    def tensors():
        for tensor in tqdm(reader.tensors, desc=f"{model} to {qtype}", unit="tensor"):
            data = weights.get_tensor(names[tensor.name]).to(torch.float32).numpy()
            expected = tuple(int(n) for n in reversed(tensor.shape.tolist()))
            if data.shape != expected:
                raise ValueError(f"{tensor.name}: safetensors shape {data.shape}, GGUF shape {expected}")
            kind = quant if data.ndim == 2 and data.shape[-1] % 32 == 0 else gguf.GGMLQuantizationType.F32
            counts[kind.name] = counts.get(kind.name, 0) + 1
            yield tensor.name, gguf.quants.quantize(data, kind) if kind != gguf.GGMLQuantizationType.F32 else data, kind

    write_gguf(reader, out, tensors(), int(gguf.LlamaFileType[TYPES[qtype][1]]))
    return {"model": model, "type": qtype, "out": str(out), "tensors": counts, "bytes": out.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a model pack, e.g. qwen2.5-coder-1.5b")
    parser.add_argument("--type", required=True, choices=sorted(TYPES))
    parser.add_argument("--out", required=True, type=Path, help="the .gguf file to write")
    args = parser.parse_args(argv)
    print(json.dumps(requantize(args.model, args.type, args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
