"""A minimal Llama / Qwen2 decoder in plain PyTorch with a static KV cache,
for torch.compile(mode="reduce-overhead") (the gpt-fast recipe).

It reads the same safetensors checkpoint as transformers and computes what
transformers' bf16 model computes, op for op where it matters for the greedy
tokens: RMSNorm in float32 then the weight multiply in bf16, rotate-half RoPE
with cos/sin made in float32 and rounded to bf16 (llama3 frequency scaling),
softmax in float32, SiLU-gated MLP, bf16 matmuls. q/k/v and gate/up are each
one fused matrix.

The KV cache is one [1, n_kv_heads, max_seq, head_dim] tensor pair per layer,
allocated once; a step writes its keys and values at `input_pos` with
index_copy_ and attends over the whole cache under a causal mask row, so
every decode step has the same shapes and can be replayed as a CUDA graph.
"""
from __future__ import annotations

import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn


def rope_inv_freq(cfg):
    """Inverse frequencies [head_dim / 2] (float32), with llama3 scaling when
    config.json asks for it (same formula as transformers)."""
    dim = cfg["head_dim"]
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise ValueError(f"rope_scaling {kind!r} is not supported here")
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg, w, prefix, max_seq, device, dtype):
        super().__init__()
        self.n_head = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.head_dim = cfg["head_dim"]
        p = prefix
        eps = cfg["rms_norm_eps"]
        self.attn_norm = RMSNorm(w.pop(p + "input_layernorm.weight"), eps)
        self.mlp_norm = RMSNorm(w.pop(p + "post_attention_layernorm.weight"), eps)
        qkv = [w.pop(f"{p}self_attn.{n}_proj.weight") for n in "qkv"]
        self.wqkv = nn.Parameter(torch.cat(qkv), requires_grad=False)
        del qkv
        if p + "self_attn.q_proj.bias" in w:
            bias = [w.pop(f"{p}self_attn.{n}_proj.bias") for n in "qkv"]
            self.bqkv = nn.Parameter(torch.cat(bias), requires_grad=False)
        else:
            self.bqkv = None
        self.wo = nn.Parameter(w.pop(p + "self_attn.o_proj.weight"), requires_grad=False)
        gate_up = [w.pop(p + "mlp.gate_proj.weight"), w.pop(p + "mlp.up_proj.weight")]
        self.w13 = nn.Parameter(torch.cat(gate_up), requires_grad=False)
        del gate_up
        self.w2 = nn.Parameter(w.pop(p + "mlp.down_proj.weight"), requires_grad=False)
        shape = (1, self.n_kv, max_seq, self.head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, device=device, dtype=dtype), persistent=False)

    def attention(self, x, cos, sin, mask, input_pos):
        # x: [1, T, n_embd]; cos, sin: [T, head_dim]; mask: [T, max_seq] bool
        _, t, _ = x.shape
        hd, nh, nkv = self.head_dim, self.n_head, self.n_kv
        qkv = F.linear(x, self.wqkv, self.bqkv)
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        q = q.view(1, t, nh, hd).transpose(1, 2)
        k = k.view(1, t, nkv, hd).transpose(1, 2)
        v = v.view(1, t, nkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        self.k_cache.index_copy_(2, input_pos, k)
        self.v_cache.index_copy_(2, input_pos, v)
        # Grouped-query attention without copying the cache: the rep = nh / nkv
        # query heads that share a kv head are stacked along the row axis.
        rep = nh // nkv
        qg = q.reshape(1, nkv, rep * t, hd)
        scores = torch.matmul(qg, self.k_cache.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        scores = scores.masked_fill(~mask.repeat(rep, 1), float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        y = torch.matmul(probs, self.v_cache).view(1, nh, t, hd)
        y = y.transpose(1, 2).reshape(1, t, nh * hd)
        return F.linear(y, self.wo)

    def forward(self, x, cos, sin, mask, input_pos):
        x = x + self.attention(self.attn_norm(x), cos, sin, mask, input_pos)
        gate, up = F.linear(self.mlp_norm(x), self.w13).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, self.w2)


class StaticDecoder(nn.Module):
    def __init__(self, cfg, weights, max_seq, device, dtype=torch.bfloat16):
        super().__init__()
        w = weights
        self.max_seq = max_seq
        self.embed = nn.Parameter(w.pop("model.embed_tokens.weight"), requires_grad=False)
        self.tied = "lm_head.weight" not in w
        self.lm_head = self.embed if self.tied else nn.Parameter(w.pop("lm_head.weight"), requires_grad=False)
        self.layers = nn.ModuleList(Block(cfg, w, f"model.layers.{i}.", max_seq, device, dtype)
                                    for i in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(w.pop("model.norm.weight"), cfg["rms_norm_eps"])
        leftover = [k for k in w if "rotary" not in k]
        if leftover:
            raise ValueError(f"unused tensors: {leftover[:5]}")
        pos = torch.arange(max_seq, dtype=torch.float32)
        freqs = pos[:, None] * rope_inv_freq(cfg)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos().to(device=device, dtype=dtype), persistent=False)
        self.register_buffer("sin", emb.sin().to(device=device, dtype=dtype), persistent=False)
        causal = torch.ones(max_seq, max_seq, dtype=torch.bool).tril()
        self.register_buffer("causal", causal.to(device), persistent=False)

    def mark_static(self):
        """Tells dynamo the caches keep their addresses (CUDA graph replay)."""
        for b in self.layers:
            torch._dynamo.mark_static_address(b.k_cache)
            torch._dynamo.mark_static_address(b.v_cache)

    def forward(self, idx, input_pos):
        # idx: [1, T] token ids at positions input_pos [T] -> logits [1, T, vocab]
        x = F.embedding(idx, self.embed)
        cos, sin = self.cos[input_pos], self.sin[input_pos]
        mask = self.causal[input_pos]
        for block in self.layers:
            x = block(x, cos, sin, mask, input_pos)
        return F.linear(self.norm(x), self.lm_head)

    def weight_bytes_per_token(self):
        """Bytes of weights one decode step reads: every matrix, norm and bias
        except the embedding table, plus the output matrix even when tied."""
        n = sum(p.numel() * p.element_size() for name, p in self.named_parameters() if name != "embed")
        if self.tied:
            n += self.embed.numel() * self.embed.element_size()
        return n


def load_checkpoint(path, device):
    """(config dict, {name: tensor on device}) from an HF safetensors folder."""
    from safetensors.torch import load_file
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    if cfg.get("rope_theta") is None and cfg.get("rope_parameters"):  # transformers-5 layout
        rp = dict(cfg["rope_parameters"])
        cfg["rope_theta"] = rp.get("rope_theta", 10000.0)
        cfg["rope_scaling"] = rp if rp.get("rope_type", "default") != "default" else None
    weights = {}
    for f in sorted(os.listdir(path)):
        if f.endswith(".safetensors"):
            weights.update(load_file(os.path.join(path, f), device=str(device)))
    if cfg.get("tie_word_embeddings"):
        weights.pop("lm_head.weight", None)
    return cfg, weights
