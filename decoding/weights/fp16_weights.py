"""``fp16-weights``: a float32 model's linear weights stored in float16, computed in float32.

On a CPU without bfloat16 instructions (most laptops, Intel Ice Lake, AMD before Zen 4) a model runs in
float32, and every pass reads 4 bytes per weight. PyTorch ships fbgemm's float16 matrix product
(``quantized::linear_prepack_fp16`` packs a float32 weight into float16 panels once;
``quantized::linear_dynamic_fp16`` multiplies float32 activations by it, converting the weights to
float32 in registers and accumulating in float32). It reads half the bytes at every pass size and needs
only x86 F16C for the conversion, so one-token steps, verify passes and prefills all run on it: no dense
copy is kept (unlike :mod:`decoding.weights.hybrid_linear`), and the weights take half the memory. The
embedding table is held in float16 too (:class:`Fp16Embedding`).

What changes in the model: each weight is rounded once to float16 (11 significant bits). The packs'
weights are float16 values already (their GGUF weights are small integers times float16 scales), so
they pass unchanged, and ``quantization: auto`` packs only such weights (:mod:`decoding.choices.float32_weights`,
docs/decisions.md#quantization-auto); for a model whose weights would round, ``speclsp bench agreement
--dtype float32 --quantizations fp16-weights`` measures how often it keeps the float32 model's greedy
token. Activations, accumulation, norms and the KV cache stay float32. Exactness: speculative output equals plain decoding of the same
weights (a pass of several tokens and a one-token step may round a float32 sum differently, as the dense
float32 product does).
"""

from __future__ import annotations

import torch

from decoding.weights.file_pages import release_tensor_pages
from decoding.weights.hybrid_linear import HybridLinear

#: Largest magnitude float16 holds; a weight beyond it would saturate (none of the packs' do).
FP16_MAX = 65504.0
#: The weight dtypes a layer is packed from (each exact in float32).
PACKABLE = (torch.float32, torch.bfloat16, torch.float16)


def available() -> bool:
    """Whether this torch build has fbgemm's float16 product (x86 builds with fbgemm do)."""
    try:
        torch.ops.quantized.linear_prepack_fp16
        torch.ops.quantized.linear_dynamic_fp16
    except (AttributeError, RuntimeError):
        return False
    return "fbgemm" in torch.backends.quantized.supported_engines


class Fp16WeightLinear(torch.nn.Module):
    """A linear layer whose weight is packed as float16 for fbgemm (see the module docstring).

    Args:
        linear: the layer to replace: weight ``(out_features, in_features)`` on the CPU in a
            :data:`PACKABLE` dtype, every value within :data:`FP16_MAX`; bias (if any) in one too (it stays
            float32).
    Raises:
        ValueError: a weight in another dtype or not on the CPU, or one that float16 cannot hold.
    """

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        weight = linear.weight.detach()
        if weight.dtype not in PACKABLE or weight.device.type != "cpu":
            raise ValueError(f"fp16-weights packs float32, bfloat16 or float16 weights on the CPU, not {weight.dtype} "
                             f"on {weight.device}")
        weight = weight.to(torch.float32)  # the kernel packs from float32 (a copy of one layer for a narrow one)
        if weight.abs().max().item() > FP16_MAX:
            raise ValueError("a weight exceeds float16's range")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.packed = torch.ops.quantized.linear_prepack_fp16(weight.contiguous(), bias)
        self.bias = None  # packed with the weights

    @classmethod
    def from_packed(cls, packed: torch.Tensor, in_features: int, out_features: int,
                    bias: torch.Tensor | None = None) -> Fp16WeightLinear:
        """A layer of weights already packed by ``quantized::linear_prepack_fp16`` without a bias, and ``bias``
        (``(out_features,)`` float32, or ``None``) added to the product in float32."""
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer.in_features, layer.out_features, layer.packed, layer.bias = in_features, out_features, packed, bias
        return layer

    @property
    def weight(self) -> torch.Tensor:
        """The float16-rounded weight as float32 ``(out_features, in_features)``, unpacked on each read
        (for code that inspects a layer's weight; the passes never read it)."""
        return torch.ops.quantized.linear_unpack_fp16(self.packed)[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., in_features) float32
        out = fp16_product(x, self.packed, self.out_features)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, float16 weights (fbgemm)"


def fp16_product(x: torch.Tensor, packed: torch.Tensor, out_features: int) -> torch.Tensor:
    """``x`` (``(..., in_features)`` float32) times the weights ``packed`` by ``quantized::linear_prepack_fp16``
    (and their bias, if packed with one): ``(..., out_features)`` float32, by fbgemm's float16 product."""
    rows = x.reshape(-1, x.shape[-1])
    out = torch.ops.quantized.linear_dynamic_fp16(rows if rows.is_contiguous() else rows.contiguous(), packed)
    return out.reshape(*x.shape[:-1], out_features)


class Fp16Embedding(torch.nn.Module):
    """An embedding table held in float16 (a buffer, so the model's parameters still say float32), its rows
    returned as float32: half the memory of the float32 table, the same values where they are float16 values.

    Args:
        embedding: the layer to replace (weight ``(num_embeddings, embedding_dim)`` in a :data:`PACKABLE`
            dtype, within :data:`FP16_MAX`; no ``max_norm``).
    Raises:
        ValueError: a weight in another dtype, one float16 cannot hold, or a ``max_norm``.
    """

    def __init__(self, embedding: torch.nn.Embedding):
        super().__init__()
        weight = embedding.weight.detach()
        if weight.dtype not in PACKABLE or embedding.max_norm is not None:
            raise ValueError("Fp16Embedding takes a float32, bfloat16 or float16 table without max_norm")
        if weight.abs().max().item() > FP16_MAX:
            raise ValueError("an embedding value exceeds float16's range")
        self.num_embeddings, self.embedding_dim = embedding.num_embeddings, embedding.embedding_dim
        self.padding_idx = embedding.padding_idx
        self.register_buffer("table", weight.to(torch.float16), persistent=False)

    @property
    def weight(self) -> torch.Tensor:
        """The table as float32 (a copy, made on each read; the passes never read it)."""
        return self.table.to(torch.float32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:  # ids: (...) int64 -> (..., embedding_dim) float32
        return torch.nn.functional.embedding(ids, self.table).to(torch.float32)


def fits(linear: torch.nn.Linear) -> bool:
    """Whether ``linear`` can be packed: a weight on the CPU in a :data:`PACKABLE` dtype."""
    return linear.weight.dtype in PACKABLE and linear.weight.device.type == "cpu"


def narrow_load_dtype(stored: torch.dtype | None, run: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype to load a model in that will run as ``fp16-weights``: its ``stored`` dtype where that is
    bfloat16 or float16 and the model is to run in float32 on the CPU (packed from there, the rest widened
    by :func:`widen_to_float32`); else ``run``."""
    if run == torch.float32 and device.type == "cpu" and stored in (torch.bfloat16, torch.float16) and available():
        return stored
    return run


def widen_to_float32(model: torch.nn.Module) -> int:
    """Turn every floating parameter and buffer of ``model`` not held by a packed or hybrid layer of ours into
    float32, one tensor at a time (a model loaded narrow, after :func:`make_fp16_weights`, or one that
    stays unpacked). Returns the tensors widened."""
    widened = 0
    for module in model.modules():
        if isinstance(module, (Fp16WeightLinear, Fp16Embedding, HybridLinear)):  # they hold their own dtypes
            continue
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if tensor is not None and tensor.is_floating_point() and tensor.dtype != torch.float32:
                tensor.data = tensor.data.to(torch.float32)
                widened += 1
    if getattr(model, "config", None) is not None and hasattr(model.config, "dtype"):
        model.config.dtype = torch.float32
    return widened


def make_fp16_weights(model: torch.nn.Module) -> tuple[int, int]:
    """Replace every linear layer of ``model`` that :func:`fits` by a :class:`Fp16WeightLinear` and every
    embedding table in a :data:`PACKABLE` dtype by a :class:`Fp16Embedding`, freeing the weights they were
    made from, then widen the rest to float32 (:func:`widen_to_float32`). Returns ``(linear layers
    replaced, linear layers)``.

    One layer at a time, holding no reference to a replaced layer: each float32 weight is freed as soon as
    its float16 copy exists, so memory peaks at the model plus one layer's copy, not at 1.5 times it.
    """
    places = [(parent_name, name, type(child)) for parent_name, parent in model.named_modules()
              for name, child in parent.named_children() if isinstance(child, (torch.nn.Linear, torch.nn.Embedding))]
    replaced, total = 0, 0
    for parent_name, name, kind in places:
        parent = model.get_submodule(parent_name)
        if issubclass(kind, torch.nn.Embedding):
            if getattr(parent, name).weight.dtype in PACKABLE:
                setattr(parent, name, Fp16Embedding(getattr(parent, name)))
            continue
        total += 1
        if fits(getattr(parent, name)):
            original = getattr(parent, name).weight
            setattr(parent, name, Fp16WeightLinear(getattr(parent, name)))
            release_tensor_pages(original)  # read from the mapped checkpoint; no longer needed
            del original
            replaced += 1
    widen_to_float32(model)
    return replaced, total
