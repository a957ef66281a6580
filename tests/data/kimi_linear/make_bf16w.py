#!/usr/bin/env python3
"""Makes expected-bf16w.safetensors in tiny-tf5/ and tiny-f16/: transformers' logits for the
fixture prompts with the model's weight matrices rounded to bf16 (round to nearest even) and
everything else as stored, computed in fp32. This is the function clmoe computes with
`clmoe-generate --weights bf16` on these fp32 and fp16 checkpoints (matrices stored in bf16,
activations and sums in fp32), so tests/apps/test_hf.sh holds it to the fp32 tolerance.

Rounded: every parameter of two or more dimensions that feeds a product as a weight: the
attention and gate projections, the router, the dense and shared FFN matrices, the routed
experts' stacks and lm_head. Kept: the embedding (a lookup), the norms' gains, A_log,
dt_bias, the short-convolution taps and e_score_correction_bias (clmoe keeps those in fp32:
clmoe__param_is_weight_matrix in lib/model/params.c).

Not run by CI or the build. Needs what make_fixtures.py needs (transformers 5.25, torch,
safetensors); run after it: /work/tmp/hfvenv/bin/python tests/data/kimi_linear/make_bf16w.py
Deterministic (CPU, fp32, one thread).
"""
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import KimiLinearForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
KEPT = ("embed_tokens.", "conv1d.", "A_log", "dt_bias", "e_score_correction_bias")


def fail(msg):
    print("make_bf16w.py:", msg, file=sys.stderr)
    sys.exit(1)


def round_matrices(model):
    """Rounds the weight matrices in place; returns (rounded, kept) parameter counts."""
    rounded = kept = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2 and not any(k in name for k in KEPT):
                p.copy_(p.to(torch.bfloat16).float())
                rounded += p.numel()
            else:
                kept += p.numel()
    return rounded, kept


def make(name):
    d = os.path.join(HERE, name)
    model = KimiLinearForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    with safe_open(os.path.join(d, "expected.safetensors"), "pt") as f:
        keys = sorted(k for k in f.keys() if k.startswith("prompt."))
        prompts = [f.get_tensor(k) for k in keys]
        exact = [f.get_tensor("logits." + k.split(".")[1]) for k in keys]
    rounded, kept = round_matrices(model)
    out = {}
    for i, p in enumerate(prompts):
        with torch.no_grad():
            logits = model(input_ids=p.long().view(1, -1), use_cache=False).logits[0].float()
        if not torch.isfinite(logits).all():
            fail("%s: non-finite logits" % name)
        moved = float((logits - exact[i]).abs().max() / exact[i].abs().max())
        print("%s prompt %d (T=%d): rounding the matrices moves the logits by %.3g of the largest"
              % (name, i, p.numel(), moved))
        if moved < 1e-4:
            fail("%s: rounding made no difference: the comparison could not tell the two apart" % name)
        out["prompt.%d" % i] = p.contiguous()
        out["logits.%d" % i] = logits.contiguous()
    save_file(out, os.path.join(d, "expected-bf16w.safetensors"))
    print("%s: %d parameters rounded, %d kept" % (name, rounded, kept))


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    for name in ("tiny-tf5", "tiny-f16"):
        make(name)


if __name__ == "__main__":
    main()
