"""What transformers >= 5.2x does with the bundled starter model on a GPU when the ``kernels`` package is
installed (transformers 5.25 lists it as a dependency, and ``from_pretrained`` defaults to
``use_kernels=True`` unless ``USE_HUB_KERNELS=NO``): which layers it swaps for hub kernels, whether
that needs the network, and how far the logits move from plain PyTorch layers.

Run (repository root, ``kernels`` importable, ``USE_HUB_KERNELS`` unset)::

    python bench/device/kernels_probe.py [--device cuda] [--code-root DIR]

Prints one line per finding; never raises (a failure is a finding).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--code-root", default=str(Path(__file__).resolve().parents[2]))
    args = parser.parse_args()
    sys.path.insert(0, str(Path(args.code_root).resolve()))
    import torch
    import transformers
    from transformers.utils import is_kernels_available

    print(f"[kernels] transformers {transformers.__version__}, kernels available {is_kernels_available()}, "
          f"USE_HUB_KERNELS={os.environ.get('USE_HUB_KERNELS')!r}, HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')!r}",
          flush=True)
    from decoding.loading import load_model

    prompt = torch.tensor([[5, 17, 300, 41, 7, 99, 1024, 12]])
    logits = {}
    for setting in ("default", "NO"):
        if setting == "NO":
            os.environ["USE_HUB_KERNELS"] = "NO"
        t0 = time.perf_counter()
        try:
            loaded = load_model("starter", args.device, "bfloat16")
            model = loaded.model
            layer = model.model.layers[0]
            kinds = {"use_kernels": getattr(model, "use_kernels", None)}
            for label, module in (("norm", model.model.norm), ("act", layer.mlp.act_fn), ("attn", layer.self_attn),
                                  ("mlp", layer.mlp)):
                forward = getattr(module, "forward", None)
                kinds[label] = (f"{type(module).__name__}.forward="
                                f"{getattr(forward, '__module__', '?')}.{getattr(forward, '__qualname__', '?')}")
            with torch.no_grad():
                logits[setting] = model(input_ids=prompt.to(model.device)).logits.float().cpu()
            print(f"[kernels] USE_HUB_KERNELS={setting}: loaded and ran in {time.perf_counter() - t0:.1f}s; {kinds}",
                  flush=True)
        except BaseException as exc:  # noqa: BLE001 - a failure is a finding
            text = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:600]
            print(f"[kernels] USE_HUB_KERNELS={setting}: FAILED after {time.perf_counter() - t0:.1f}s: {text}",
                  flush=True)
            traceback.print_exc(limit=4)
    if len(logits) == 2:
        diff = (logits["default"] - logits["NO"]).abs().max().item()
        print(f"[kernels] max |logit difference| default vs USE_HUB_KERNELS=NO (bfloat16): {diff:.4g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
