"""A float64 forward of a Kimi-Linear checkpoint folder, read from its files alone.

Written from README.md's notes, independently of transformers, as a check of those notes and
of the files: make_fixtures.py compares its logits with transformers' (and, with MUTATION set
to one deliberate error, shows the fixtures catch that error). Reads config.json in either
form (the hub's linear_attn_config or transformers 5's layer_types) and the tensors under
their hub names, from model.safetensors or the shards of model.safetensors.index.json.
Shapes: T tokens, d hidden, H KDA heads x D, M MLA heads, E experts.
"""
import json
import math
import os

import torch
from safetensors import safe_open

# a deliberate error in the reference (None: none), to show that the fixtures catch it
MUTATION = None


def read_dir(d):
    """config.json (either form) and every tensor under its hub name, as float64."""
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    files = ["model.safetensors"]
    if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
        with open(os.path.join(d, "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    w = {}
    for fn in files:
        with safe_open(os.path.join(d, fn), "pt") as f:
            for k in f.keys():
                w[k] = f.get_tensor(k).to(torch.float64)
    if "linear_attn_config" in cfg:  # the hub form
        la = cfg["linear_attn_config"]
        mla = [i - 1 for i in la["full_attn_layers"]]
        kda = dict(heads=la["num_heads"], dim=la["head_dim"], conv=la["short_conv_kernel_size"])
        dense = list(range(cfg["first_k_dense_replace"]))
    else:  # the transformers-5 form
        mla = [i for i, t in enumerate(cfg["layer_types"]) if t == "full_attention"]
        kda = dict(heads=cfg["linear_num_heads"], dim=cfg["linear_head_dim"], conv=cfg["linear_conv_kernel_dim"])
        dense = [i for i, t in enumerate(cfg["mlp_layer_types"]) if t == "dense"]
    return cfg, w, mla, kda, dense


def rms(x, w, eps):
    """RMSNorm over the last axis with gain w."""
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def kda_mixer(w, p, h, kda, eps):
    """KDA layer p (prefix of its hub names) on normed h [T, d] -> [T, d], token by token."""
    T, H, D, K = h.shape[0], kda["heads"], kda["dim"], kda["conv"]
    silu = torch.nn.functional.silu

    def conv(u, taps):  # taps [H*D, 1, K]; out[t] = sum_j taps[:, 0, j] * u[t - (K - 1) + j]
        if MUTATION == "conv taps reversed":
            taps = taps.flip(-1)
        out = torch.zeros_like(u)
        for j in range(K):
            s = K - 1 - j
            out[s:] += taps[:, 0, j] * u[:T - s]
        return out

    q, k, v = (silu(conv(h @ w[p + n + "_proj.weight"].t(), w[p + n + "_conv1d.weight"])).view(T, H, D) for n in "qkv")
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    z = ((h @ w[p + "f_a_proj.weight"].t()) @ w[p + "f_b_proj.weight"].t() + w[p + "dt_bias"]).view(T, H, D)
    soft = torch.where(z > 20, z, torch.log1p(torch.exp(z)))
    g = -torch.exp(w[p + "A_log"].view(1, H, 1)) * soft                     # [T, H, D]
    if MUTATION == "decay bounded at -5":
        g = g.clamp(min=-5.0)
    beta = torch.sigmoid(h @ w[p + "b_proj.weight"].t())                     # [T, H]
    S = torch.zeros(H, D, D, dtype=torch.float64)                            # [H, D_k, D_v]
    o = torch.zeros(T, H, D, dtype=torch.float64)
    for t in range(T):
        S = S * torch.exp(g[t])[:, :, None]
        pred = torch.einsum("hkv,hk->hv", S, k[t])
        S = S + torch.einsum("hk,hv->hkv", k[t], beta[t][:, None] * (v[t] - pred))
        o[t] = torch.einsum("hkv,hk->hv", S, q[t]) / math.sqrt(D)
    gate = ((h @ w[p + "g_a_proj.weight"].t()) @ w[p + "g_b_proj.weight"].t()).view(T, H, D)
    o = rms(o, w[p + "o_norm.weight"], eps) * torch.sigmoid(gate)
    return o.reshape(T, H * D) @ w[p + "o_proj.weight"].t()


def mla_mixer(w, p, h, cfg):
    """MLA layer p on h [T, d] -> [T, d]: no query latent, the rope part shared and unrotated."""
    T, H = h.shape[0], cfg["num_attention_heads"]
    nope, rope, vd, r = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"], cfg["kv_lora_rank"]
    q = (h @ w[p + "q_proj.weight"].t()).view(T, H, nope + rope)
    ckv = h @ w[p + "kv_a_proj_with_mqa.weight"].t()                         # [T, r + rope]
    c = rms(ckv[:, :r], w[p + "kv_a_layernorm.weight"], cfg["rms_norm_eps"])
    kv = (c @ w[p + "kv_b_proj.weight"].t()).view(T, H, nope + vd)
    k = torch.cat([kv[:, :, :nope], ckv[:, None, r:].expand(T, H, rope)], -1)
    if MUTATION == "MLA scale 1/sqrt(nope)":
        q = q * math.sqrt((nope + rope) / nope)
    s = torch.einsum("thd,uhd->htu", q, k) / math.sqrt(nope + rope)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = torch.einsum("htu,uhd->thd", torch.softmax(s, -1), kv[:, :, nope:])
    return o.reshape(T, H * vd) @ w[p + "o_proj.weight"].t()


def swiglu(w, p, h):
    """W_down (SiLU(W_gate h) * W_up h) with the gate_proj/up_proj/down_proj under p."""
    silu = torch.nn.functional.silu
    return (silu(h @ w[p + "gate_proj.weight"].t()) * (h @ w[p + "up_proj.weight"].t())) @ w[p + "down_proj.weight"].t()


def moe_ffn(w, p, h, cfg):
    """Routed experts (grouped sigmoid top-k with the correction bias) plus the shared one."""
    E, k = cfg["num_experts"], cfg["num_experts_per_token"]
    G, keep = cfg["num_expert_group"], cfg["topk_group"]
    s = torch.sigmoid(h @ w[p + "gate.weight"].t())                           # [T, E]
    b = s + (0 if MUTATION == "bias left out of the choice" else w[p + "gate.e_score_correction_bias"])
    group = b.view(-1, G, E // G).topk(2, -1)[0].sum(-1)                       # [T, G]
    if MUTATION == "groups ignored":
        keep = G
    allowed = torch.zeros_like(group).scatter(1, group.topk(keep, -1)[1], 1.0).repeat_interleave(E // G, 1)
    chosen = b.masked_fill(allowed == 0, float("-inf")).topk(k, -1)[1]       # [T, k]
    pw = s.gather(1, chosen)
    if cfg["moe_renormalize"] != (MUTATION == "renormalize flipped"):
        pw = pw / pw.sum(-1, keepdim=True)
    pw = pw * cfg["routed_scaling_factor"]
    y = swiglu(w, p + "shared_experts.", h)
    for t in range(h.shape[0]):
        for j in range(k):
            e = p + "experts.%d." % int(chosen[t, j])
            u = torch.nn.functional.silu(h[t] @ w[e + "w1.weight"].t()) * (h[t] @ w[e + "w3.weight"].t())
            y[t] += pw[t, j] * (u @ w[e + "w2.weight"].t())
    return y


def logits(d, ids):
    """[T, vocab] float64 logits of the folder d's model for the ids [T]."""
    cfg, w, mla_layers, kda, dense = read_dir(d)
    eps = cfg["rms_norm_eps"]
    x = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        h = rms(x, w[p + "input_layernorm.weight"], eps)
        mixer = mla_mixer(w, p + "self_attn.", h, cfg) if i in mla_layers else kda_mixer(w, p + "self_attn.", h, kda, eps)
        x = x + mixer
        h = rms(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + (swiglu(w, p + "mlp.", h) if i in dense else moe_ffn(w, p + "block_sparse_moe.", h, cfg))
    return rms(x, w["model.norm.weight"], eps) @ w["lm_head.weight"].t()
