#!/usr/bin/env python3
"""Makes the tiny Kimi-Linear checkpoints and their expected outputs in tests/data/kimi_linear.

Not run by CI or the build. It needs torch, safetensors and transformers 5.25 (the reference:
KimiLinearForCausalLM, eager attention, its torch KDA fallback); run it with
/work/tmp/hfvenv/bin/python from anywhere. It is deterministic (fixed seeds, CPU, fp32) and
writes next to itself:

  tiny-hub/   config.json in the form of the hub's moonshotai/Kimi-Linear-48B-A3B-Instruct
              (linear_attn_config, first_k_dense_replace, ...), weights under the hub's tensor
              names in bf16 (A_log, dt_bias in fp32) in two shards with
              model.safetensors.index.json; grouped top-k (4 groups, best 2), renormalized
              routing; tiktoken.model and tokenizer_config.json (a 496-rank cut of
              ../tokenizer/tiktoken.model and 16 Kimi-style special tokens)
  tiny-tf5/   config.json as transformers 5 writes KimiLinearConfig (layer_types,
              mlp_layer_types, linear_*), one model.safetensors in fp32 under the same hub
              names; plain top-k, routing weights not renormalized
  tiny-f16/   as tiny-tf5 with its own weights in fp16 (A_log, dt_bias in fp32), 2 groups with
              the best one kept, renormalized routing
  */expected.safetensors  prompt.i (I32 [T]) and logits.i (F32 [T, 512]) for three prompts
              (T = 5, 37, 70), one uncached forward; greedy_logits.i (F32 [8, 512]) the
              logits of the 8 cached greedy steps
  */expected.json         {"prompts": [[ids]...], "greedy": [[8 ids]...], "greedy_min_margin":
              [...]} from generate(use_cache=True, greedy, EOS ignored)

Checks made here (it stops with an error if one fails): transformers loads each directory
back with from_pretrained to the same weights and bit-identical logits (so the names, shapes
and configs are read as intended); the float64 forward of reference.py, which reads only the
files, agrees with transformers' logits, and each deliberate error it can be given is caught;
the cached greedy tokens equal the argmax of an uncached forward over prompt + continuation;
the gates, routing and conv taps have the spread the C tests need (see check_spread).
"""
import json
import math
import os
import sys

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import KimiLinearConfig, KimiLinearForCausalLM

sys.dont_write_bytecode = True  # nothing but the fixtures lands in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402  (the float64 forward beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "..", "tokenizer")

VOCAB, HIDDEN, LAYERS = 512, 64, 5
MLA_LAYERS = [2, 5]                      # 1-based, as the hub's linear_attn_config
KDA_LAYERS = [i for i in range(1, LAYERS + 1) if i not in MLA_LAYERS]
KDA_HEADS, KDA_DIM, CONV = 2, 16, 4
MLA_HEADS, KV_RANK, QK_NOPE, QK_ROPE, V_DIM = 2, 32, 16, 8, 16
EXPERTS, TOP_K, SHARED, MOE_FF, DENSE_FF = 8, 2, 1, 16, 96
ROUTED_SCALE, EPS = 2.446, 1e-6
PROMPT_LENS, GREEDY_STEPS = (5, 37, 70), 8
MIN_MARGIN = 0.05
# Tokenizer of tiny-hub: ranks 0..495 of ../tokenizer/tiktoken.model, then 16 special ids
# 496..511 laid out as the hub's 163584.. (bos [BOS], eos <|im_end|>, pad last)
TOK_BASE = VOCAB - 16
SPECIAL_NAMES = {0: "[BOS]", 1: "[EOS]", 2: "<|im_end|>", 3: "<|im_user|>", 4: "<|im_assistant|>",
                 6: "<|start_header_id|>", 7: "<|end_header_id|>", 9: "[EOT]", 10: "<|im_system|>",
                 13: "<|im_middle|>", 14: "[UNK]", 15: "[PAD]"}
BOS, EOS, PAD = TOK_BASE + 0, TOK_BASE + 2, TOK_BASE + 15

MODELS = {
    # name: seed, groups, topk_groups, renormalize, weight dtype (None: fp32), the hub's form
    # (config, two shards, tokenizer) or transformers 5's (one file)
    "tiny-hub": dict(seed=1101, groups=4, topk_groups=2, renormalize=True, half=torch.bfloat16, hub=True),
    "tiny-tf5": dict(seed=2202, groups=1, topk_groups=1, renormalize=False, half=None, hub=False),
    "tiny-f16": dict(seed=3303, groups=2, topk_groups=1, renormalize=True, half=torch.float16, hub=False),
}


def fail(msg):
    sys.exit("make_fixtures.py: " + msg)


def tf5_config(spec):
    """The reference's own configuration object for one model."""
    types = ["full_attention" if i + 1 in MLA_LAYERS else "linear_attention" for i in range(LAYERS)]
    return KimiLinearConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=DENSE_FF, moe_intermediate_size=MOE_FF,
        num_hidden_layers=LAYERS, num_attention_heads=MLA_HEADS, num_key_value_heads=MLA_HEADS,
        q_lora_rank=None, kv_lora_rank=KV_RANK, qk_nope_head_dim=QK_NOPE, qk_rope_head_dim=QK_ROPE,
        v_head_dim=V_DIM, n_group=spec["groups"], topk_group=spec["topk_groups"],
        num_experts_per_tok=TOP_K, num_local_experts=EXPERTS, n_shared_experts=SHARED,
        norm_topk_prob=spec["renormalize"], routed_scaling_factor=ROUTED_SCALE, rms_norm_eps=EPS,
        linear_head_dim=KDA_DIM, linear_num_heads=KDA_HEADS, linear_conv_kernel_dim=CONV,
        layer_types=types, mlp_layer_types=["dense"] + ["sparse"] * (LAYERS - 1),
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, tie_word_embeddings=False)


def hub_config(spec):
    """config.json with the keys and spelling of the hub's Kimi-Linear-48B-A3B-Instruct."""
    return {
        "architectures": ["KimiLinearForCausalLM"],
        "model_type": "kimi_linear",
        "torch_dtype": "bfloat16",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": DENSE_FF,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": MLA_HEADS,
        "num_key_value_heads": MLA_HEADS,
        "head_dim": QK_ROPE,
        "hidden_act": "silu",
        "initializer_range": 0.02,
        "rms_norm_eps": EPS,
        "use_cache": True,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": False,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "model_max_length": 1048576,
        "q_lora_rank": None,
        "kv_lora_rank": KV_RANK,
        "qk_nope_head_dim": QK_NOPE,
        "qk_rope_head_dim": QK_ROPE,
        "v_head_dim": V_DIM,
        "mla_use_nope": True,
        "num_experts": EXPERTS,
        "num_experts_per_token": TOP_K,
        "num_shared_experts": SHARED,
        "moe_intermediate_size": MOE_FF,
        "moe_renormalize": spec["renormalize"],
        "moe_router_activation_func": "sigmoid",
        "routed_scaling_factor": ROUTED_SCALE,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "use_grouped_topk": True,
        "num_expert_group": spec["groups"],
        "topk_group": spec["topk_groups"],
        "num_nextn_predict_layers": 0,
        "linear_attn_config": {
            "full_attn_layers": MLA_LAYERS,
            "kda_layers": KDA_LAYERS,
            "head_dim": KDA_DIM,
            "num_heads": KDA_HEADS,
            "short_conv_kernel_size": CONV,
        },
    }


def init_weights(model, seed, half):
    """Random weights that make every sub-layer matter, set by name in a fixed order."""
    gen = torch.Generator().manual_seed(seed)

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float64) * std

    state = {}
    for name, p in sorted(model.state_dict().items()):
        shape = tuple(p.shape)
        if name.endswith("forget_gate.A_log"):
            # exp(A) per head: head 0 near 1 (slow decay), head 1 near 5 (fast)
            a = torch.tensor([0.8, 5.0], dtype=torch.float64) * (1 + 0.25 * torch.rand(2, generator=gen, dtype=torch.float64))
            w = a.log().view(shape)
        elif name.endswith("forget_gate.dt_bias"):
            # per channel: a shuffled ramp so softplus(z + dt_bias) spans ~3e-4 .. ~7
            ramp = torch.linspace(-8.0, 6.5, KDA_DIM, dtype=torch.float64)
            w = torch.cat([ramp[torch.randperm(KDA_DIM, generator=gen)] for _ in range(KDA_HEADS)])
            w = w + normal(w.shape, 0.2)
        elif name.endswith("conv1d.weight"):
            # [3 HD, 1, K]: random taps, the newest (last) tap strongest, so no channel is symmetric
            w = normal(shape, 0.5) + torch.tensor([0.05, 0.15, 0.3, 0.6], dtype=torch.float64)
            weak = (w - w.flip(-1)).abs().amax(-1) < 0.2
            w[..., -1] += 0.4 * weak
        elif name.endswith("e_score_correction_bias"):
            w = normal(shape, 0.12)
        elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            w = 1.0 + normal(shape, 0.2)
        elif name == "model.embed_tokens.weight":
            w = normal(shape, 1.0)
        elif name == "lm_head.weight":
            w = normal(shape, 3.0 / math.sqrt(shape[1]))
        elif name.endswith("mlp.gate.weight"):
            w = normal(shape, 1.5 / math.sqrt(shape[1]))
        elif name.endswith("experts.gate_up_proj"):
            w = normal(shape, 1.0 / math.sqrt(shape[2]))
        elif name.endswith("experts.down_proj"):
            w = normal(shape, 0.6 / math.sqrt(shape[2]))
        elif name.endswith("f_b_proj.weight"):
            w = normal(shape, 0.8 / math.sqrt(shape[1]))
        elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
            w = normal(shape, 0.8 / math.sqrt(shape[1]))
        elif name.endswith(".weight") and len(shape) == 2:
            w = normal(shape, 1.0 / math.sqrt(shape[1]))
        else:
            fail("no initializer for " + name)
        w = w.to(torch.float32)
        if half is not None and not (name.endswith("A_log") or name.endswith("dt_bias")):
            w = w.to(half).to(torch.float32)  # stored in bf16 (the hub) or fp16
        state[name] = w
    model.load_state_dict(state, strict=True)


def to_hub_names(model, half):
    """transformers' state dict -> the hub's tensor names and shapes, in file order."""
    out = {}
    dense = set(i for i in range(LAYERS) if model.config.mlp_layer_types[i] == "dense")
    for name, t in model.state_dict().items():
        t = t.detach().clone().contiguous()
        parts = name.split(".")
        if name.startswith("model.layers."):
            i = int(parts[2])
            pre = "model.layers.%d." % i
            rest = name[len(pre):]
            if rest == "self_attn.conv1d.weight":
                hd = KDA_HEADS * KDA_DIM
                for j, w in enumerate("qkv"):
                    out[pre + "self_attn.%s_conv1d.weight" % w] = t[j * hd:(j + 1) * hd].contiguous()
                continue
            if rest.startswith("self_attn.forget_gate."):
                rest = "self_attn." + rest[len("self_attn.forget_gate."):]
            elif rest.startswith("mlp.") and i not in dense:
                rest = "block_sparse_moe." + rest[len("mlp."):]
                if rest == "block_sparse_moe.experts.gate_up_proj":
                    for e in range(EXPERTS):
                        out[pre + "block_sparse_moe.experts.%d.w1.weight" % e] = t[e, :MOE_FF].contiguous()
                        out[pre + "block_sparse_moe.experts.%d.w3.weight" % e] = t[e, MOE_FF:].contiguous()
                    continue
                if rest == "block_sparse_moe.experts.down_proj":
                    for e in range(EXPERTS):
                        out[pre + "block_sparse_moe.experts.%d.w2.weight" % e] = t[e].contiguous()
                    continue
            name = pre + rest
        out[name] = t
    if half is not None:
        out = {k: (v if k.endswith("A_log") or k.endswith("dt_bias") else v.to(half)) for k, v in out.items()}
    return out


def dumps(obj, indent=0):
    """JSON with nested objects indented and lists of numbers kept on one line."""
    pad = "  " * (indent + 1)
    if isinstance(obj, dict) and obj:
        items = [pad + json.dumps(k) + ": " + dumps(v, indent + 1) for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (list, dict)) for v in obj):
        return "[\n" + ",\n".join(pad + dumps(v, indent + 1) for v in obj) + "\n" + "  " * indent + "]"
    return json.dumps(obj)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_tensors(path, tensors):
    tmp = path + ".tmp"
    save_file(tensors, tmp, metadata={"format": "pt"})
    os.replace(tmp, path)


def write_checkpoint(d, hub, sharded):
    """The weights: two shards and an index (tiny-hub) or one file (tiny-tf5, tiny-f16)."""
    if not sharded:
        write_tensors(os.path.join(d, "model.safetensors"), hub)
        return
    names = list(hub)
    total = sum(t.numel() * t.element_size() for t in hub.values())
    shards, acc = ([], []), 0
    for n in names:  # cut where half the bytes are written (it falls inside a layer)
        shards[0 if acc < total // 2 else 1].append(n)
        acc += hub[n].numel() * hub[n].element_size()
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    weight_map = {}
    for f, ns in zip(files, shards):
        write_tensors(os.path.join(d, f), {n: hub[n] for n in ns})
        weight_map.update({n: f for n in ns})
    write_json(os.path.join(d, "model.safetensors.index.json"),
               {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def prompts_for(seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, TOK_BASE, (n,), generator=gen) for n in PROMPT_LENS]


def greedy_margin(model, p):
    """The smallest gap between the best and second logit over a prompt's greedy steps."""
    toks, _ = greedy(model, p)
    full = forward_logits(model, torch.cat([p, toks[:-1]]))[p.numel() - 1:]
    top2 = full.topk(2, -1)[0]
    return float((top2[:, 0] - top2[:, 1]).min())


def pick_prompts(model, seed):
    """Prompts (the first seed from `seed` on) whose greedy steps all win by MIN_MARGIN, so an
    implementation within fp32 or bf16-weight tolerance picks the same tokens."""
    for s in range(seed, seed + 200):
        prompts = prompts_for(s)
        if min(greedy_margin(model, p) for p in prompts) >= MIN_MARGIN:
            return s, prompts
    fail("no prompt seed gives greedy margins >= %g" % MIN_MARGIN)


def forward_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids.view(1, -1), use_cache=False).logits[0].float()


def greedy(model, ids):
    """8 cached greedy steps (EOS ignored) and the logits of each step."""
    with torch.no_grad():
        out = model.generate(ids.view(1, -1), max_new_tokens=GREEDY_STEPS, do_sample=False, use_cache=True,
                             eos_token_id=None, pad_token_id=PAD, return_dict_in_generate=True,
                             output_logits=True)
    toks = out.sequences[0, ids.numel():]
    if toks.numel() != GREEDY_STEPS:
        fail("generate returned %d tokens" % toks.numel())
    return toks, torch.stack([l[0].float() for l in out.logits])


def check_spread(model, prompts, name):
    """The properties the C tests rely on, measured on the reference's own intermediates."""
    report = {}
    gs, sel = [], {"differs_without_bias": 0, "differs_without_groups": 0, "tokens": 0}
    hooks = []

    def gate_hook(mod, inp, out):
        gs.append(out.detach().flatten())

    def router_hook(mod, inp, out):
        x = inp[0].reshape(-1, HIDDEN).float()
        s = torch.sigmoid(x @ mod.weight.float().t())
        plain = s.topk(TOP_K, -1)[1].sort(-1)[0]
        ungrouped = (s + mod.e_score_correction_bias).topk(TOP_K, -1)[1].sort(-1)[0]
        got = out[2].sort(-1)[0]
        sel["differs_without_bias"] += int((plain != got).any(-1).sum())
        sel["differs_without_groups"] += int((ungrouped != got).any(-1).sum())
        sel["tokens"] += x.shape[0]

    for m in model.modules():
        if type(m).__name__ == "KimiLinearForgetGate":
            hooks.append(m.register_forward_hook(gate_hook))
        if type(m).__name__ == "KimiLinearTopkRouter":
            hooks.append(m.register_forward_hook(router_hook))
    # each sub-layer's output size against the residual it is added to
    ratios = []

    for layer in model.model.layers:
        hooks.append(layer.self_attn.register_forward_hook(lambda m, i, o: ratios.append(
            float((o[0] if isinstance(o, tuple) else o).norm()))))
        hooks.append(layer.mlp.register_forward_hook(lambda m, i, o: ratios.append(float(o.norm()))))
    resid = []
    for layer in model.model.layers:
        hooks.append(layer.register_forward_hook(lambda m, i, o: resid.append(float(i[0].norm()))))
    forward_logits(model, prompts[2])
    for h in hooks:
        h.remove()
    g = torch.cat(gs)
    report["g_max"], report["g_min"] = float(g.max()), float(g.min())
    report["g_below_-20"] = int((g < -20).sum())
    report["g_above_-2e-3"] = int((g > -2e-3).sum())
    report["routing"] = sel
    # per layer: |attention output| / |residual in|, |ffn output| / |residual in|
    report["sublayer_ratio"] = [[round(ratios[2 * i] / resid[i], 3), round(ratios[2 * i + 1] / resid[i], 3)]
                                for i in range(LAYERS)]
    convs = [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Conv1d)]
    report["conv_min_asymmetry"] = float(min(float((w - w.flip(-1)).abs().amax(-1).min()) for w in convs))
    print(name, json.dumps(report))
    if report["g_min"] > -20 or report["g_max"] < -2e-3:
        fail(name + ": the decay g does not reach both extremes")
    if sel["differs_without_bias"] == 0:
        fail(name + ": e_score_correction_bias never changes the selection")
    if name == "tiny-hub" and sel["differs_without_groups"] == 0:
        fail(name + ": the group limit never changes the selection")
    if min(min(r) for r in report["sublayer_ratio"]) < 0.1:
        fail(name + ": a sub-layer barely changes the residual")
    if report["conv_min_asymmetry"] < 0.05:
        fail(name + ": a conv channel is nearly symmetric")


def write_tokenizer(d):
    """tiktoken.model: the first TOK_BASE ranks of ../tokenizer/tiktoken.model (a trained BPE's
    ranks, so every kept token is made of kept tokens); tokenizer_config.json: the specials."""
    with open(os.path.join(TOKENIZER_DIR, "tiktoken.model")) as f:
        lines = [ln for ln in f.read().splitlines() if ln]
    kept = lines[:TOK_BASE]
    for r, ln in enumerate(kept):
        if int(ln.split()[1]) != r:
            fail("../tokenizer/tiktoken.model: rank %d out of order" % r)
    tmp = os.path.join(d, "tiktoken.model.tmp")
    with open(tmp, "w") as f:
        f.write("\n".join(kept) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(d, "tiktoken.model"))
    decoder = {str(TOK_BASE + i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                   "single_word": False, "special": True} for i, c in sorted(SPECIAL_NAMES.items())}
    write_json(os.path.join(d, "tokenizer_config.json"), {
        "added_tokens_decoder": decoder, "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]",
        "unk_token": "[UNK]", "model_max_length": 1048576, "tokenizer_class": "TikTokenTokenizer"})


def make(name, spec):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(spec["seed"])
    config = tf5_config(spec)
    config._attn_implementation = "eager"
    model = KimiLinearForCausalLM(config).eval()
    init_weights(model, spec["seed"], spec["half"])
    prompt_seed, prompts = pick_prompts(model, spec["seed"] + 7)
    print(name, "prompt seed", prompt_seed)
    check_spread(model, prompts, name)

    hub = to_hub_names(model, spec["half"])
    write_checkpoint(d, hub, spec["hub"])
    if spec["hub"]:
        write_json(os.path.join(d, "config.json"), hub_config(spec))
        write_tokenizer(d)
    else:
        config.architectures = ["KimiLinearForCausalLM"]
        config.dtype = spec["half"] or torch.float32
        config.save_pretrained(d)
        if os.path.exists(os.path.join(d, "generation_config.json")):
            os.remove(os.path.join(d, "generation_config.json"))

    tensors, greedy_ids, margins = {}, [], []
    for i, p in enumerate(prompts):
        logits = forward_logits(model, p)
        toks, step_logits = greedy(model, p)
        full = forward_logits(model, torch.cat([p, toks[:-1]]))
        want = full[p.numel() - 1:].argmax(-1)
        if not torch.equal(want, toks):
            fail("%s prompt %d: cached greedy %s differs from uncached argmax %s" % (name, i, toks.tolist(), want.tolist()))
        gap = float((step_logits - full[p.numel() - 1:]).abs().max())
        top2 = full[p.numel() - 1:].topk(2, -1)[0]
        margin = float((top2[:, 0] - top2[:, 1]).min())
        print("%s prompt %d (T=%d): cached-vs-uncached max |dlogit| %.3g, smallest top-2 margin %.3g"
              % (name, i, p.numel(), gap, margin))
        if not torch.isfinite(logits).all():
            fail("non-finite logits")
        tensors["prompt.%d" % i] = p.to(torch.int32).contiguous()
        tensors["logits.%d" % i] = logits.contiguous()
        tensors["greedy_logits.%d" % i] = step_logits.contiguous()
        greedy_ids.append(toks.tolist())
        margins.append(round(margin, 4))
    write_tensors(os.path.join(d, "expected.safetensors"), tensors)
    write_json(os.path.join(d, "expected.json"), {"prompts": [p.tolist() for p in prompts], "greedy": greedy_ids,
                                                          "greedy_min_margin": margins})

    # transformers reads the files back: same weights, same logits, bit for bit
    back = KimiLinearForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    ref, got = model.state_dict(), back.state_dict()
    if set(ref) != set(got):
        fail("%s: reloaded names differ: %s" % (name, sorted(set(ref) ^ set(got))))
    for k in ref:
        if not torch.equal(ref[k], got[k].float()):
            fail("%s: %s differs after reload" % (name, k))
    for key in ("layer_types", "mlp_layer_types", "n_group", "topk_group", "norm_topk_prob", "linear_num_heads",
                "linear_head_dim", "linear_conv_kernel_dim", "num_local_experts", "num_experts_per_tok"):
        if getattr(back.config, key) != getattr(config, key):
            fail("%s: config %s read back as %r" % (name, key, getattr(back.config, key)))
    for i, p in enumerate(prompts):
        if not torch.equal(forward_logits(back, p), tensors["logits.%d" % i]):
            fail("%s: reloaded logits differ for prompt %d" % (name, i))
    for i, p in enumerate(prompts):
        want = reference.logits(d, p.long())
        err = float((want - tensors["logits.%d" % i].double()).abs().max())
        print("%s prompt %d: float64 reference from the files vs transformers fp32: max |dlogit| %.3g (logits up to %.3g)"
              % (name, i, err, float(want.abs().max())))
        if not err < 1e-4:
            fail("%s: the float64 reference disagrees with transformers on prompt %d" % (name, i))
    for reference.MUTATION in ("conv taps reversed", "decay bounded at -5", "bias left out of the choice", "groups ignored",
                     "renormalize flipped", "MLA scale 1/sqrt(nope)"):
        err = max(float((reference.logits(d, p.long()) - tensors["logits.%d" % i].double()).abs().max())
                  for i, p in enumerate(prompts))
        mutation = reference.MUTATION
        print("%s: with %s the reference is off by up to %.3g" % (name, mutation, err))
        if err < 1e-2 and not (mutation == "groups ignored" and spec["groups"] == 1):
            fail("%s: the fixtures do not catch: %s" % (name, mutation))
    reference.MUTATION = None
    with safe_open(os.path.join(d, "expected.safetensors"), "pt") as f:
        if sorted(f.keys()) != sorted(tensors):
            fail("expected.safetensors keys")
    print(name, "ok:", len(hub), "tensors,", sum(t.numel() for t in hub.values()), "parameters")


def main():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    if not transformers.__version__.startswith("5.25"):
        print("warning: made with transformers 5.25, this is", transformers.__version__)
    for name, spec in MODELS.items():
        make(name, spec)
    print("transformers", transformers.__version__, "torch", torch.__version__)


if __name__ == "__main__":
    main()
