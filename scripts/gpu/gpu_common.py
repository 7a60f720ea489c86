"""Shared pieces of the GPU check-and-benchmark scripts: model shapes, the
seeded weight init, config.json layout, prompt files and raw float32 I/O.

See make_checkpoints.py for why the init looks the way it does.
"""
from __future__ import annotations

import glob
import json
import math
import os

import numpy as np

# name -> (HF model_type, config kwargs).  Real shapes of public checkpoints;
# the tiny ones are for CPU runs of the scripts themselves.
SHAPES = {
    # Llama-3.2-1B
    "llama1b": ("llama", dict(
        hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
        head_dim=64, intermediate_size=8192, vocab_size=128256, max_position_embeddings=131072,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})),
    # Llama-3-8B
    "llama8b": ("llama", dict(
        hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        head_dim=128, intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    # Llama-3-70B: for tensor parallelism over 4 GPUs (~141 GB of bf16; never a default)
    "llama70b": ("llama", dict(
        hidden_size=8192, num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8,
        head_dim=128, intermediate_size=28672, vocab_size=128256, max_position_embeddings=8192,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128001,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    # Qwen2.5-1.5B
    "qwen2": ("qwen2", dict(
        hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
        head_dim=128, intermediate_size=8960, vocab_size=151936, max_position_embeddings=32768,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
        bos_token_id=151643, eos_token_id=151645,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Qwen3-1.7B: per-head q/k norms
    "qwen3": ("qwen3", dict(
        hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, intermediate_size=6144, vocab_size=151936, max_position_embeddings=40960,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False, attention_bias=False,
        bos_token_id=151643, eos_token_id=151645,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    # Gemma 3 1B (q/k norms, post norms, GeGLU, scaled embeddings, head_dim 256,
    # every sixth layer global), except the sliding window: 64 positions
    # instead of 512, so that the check's longer prompts and their
    # continuations slide.
    "gemma3": ("gemma3_text", dict(
        hidden_size=1152, num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1,
        head_dim=256, intermediate_size=6912, vocab_size=262144, max_position_embeddings=32768,
        rms_norm_eps=1e-6, tie_word_embeddings=True, query_pre_attn_scalar=256, sliding_window=64,
        layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                     for i in range(26)],
        hidden_activation="gelu_pytorch_tanh", final_logit_softcapping=None,
        attn_logit_softcapping=None, bos_token_id=2, eos_token_id=1, pad_token_id=0,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}})),
    # CPU test shapes: same code paths (GQA, llama3 rope, tied and untied, QKV bias).
    "tiny": ("llama", dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=384, vocab_size=4096, max_position_embeddings=1024,
        rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64})),
    "tiny_untied": ("llama", dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=384, vocab_size=4096, max_position_embeddings=1024,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0})),
    "tiny_qwen2": ("qwen2", dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=384, vocab_size=4096, max_position_embeddings=1024,
        rms_norm_eps=1e-6, tie_word_embeddings=True, use_sliding_window=False,
        bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
}

# Seeded init (make_checkpoints.py's docstring has the calibration).
EMBED_STD = 0.35      # embedding entries; sets the token's share of the final residual stream
BIAS_STD = 0.1        # q/k/v biases (qwen2)


def make_config(shape):
    from transformers import AutoConfig
    model_type, kw = SHAPES[shape]
    return AutoConfig.for_model(model_type, **kw)


def init_weights(model, seed, device):
    """Overwrites every parameter of `model` (on `device`) with the seeded init.

    - RMSNorm weights 1 (Gemma stores w - 1: 0).
    - q/k/v/gate/up projections: N(0, 1/fan_in) (unit gain, activations O(1)).
    - o/down projections: N(0, 1/fan_in) / sqrt(2 * n_layers), so the sum of the
      2L residual branches stays O(1) at any depth.
    - embeddings: N(0, EMBED_STD^2).
    - lm_head when untied: the embedding rows under a seeded random permutation
      (row j = embedding row perm[j]).  When tied it is the embedding itself.
    - q/k/v biases (qwen2): N(0, BIAS_STD^2).
    """
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    n_layers = model.config.num_hidden_layers
    norm_fill = 0.0 if model.config.model_type.startswith("gemma") else 1.0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(norm_fill)
            elif name.endswith(".bias"):
                p.normal_(0.0, BIAS_STD, generator=g)
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, EMBED_STD, generator=g)
            elif name == "lm_head.weight":
                continue  # below, from the embedding
            else:
                std = 1.0 / math.sqrt(p.shape[1])
                if "o_proj" in name or "down_proj" in name:
                    std /= math.sqrt(2 * n_layers)
                p.normal_(0.0, std, generator=g)
        emb = model.get_input_embeddings().weight
        head = model.get_output_embeddings().weight
        if head.data_ptr() != emb.data_ptr():
            perm = torch.randperm(emb.shape[0], generator=g, device=device)
            head.copy_(emb[perm])


def classic_config(path):
    """Rewrites a transformers-5 config.json in the layout published
    checkpoints use (rope_theta / rope_scaling / torch_dtype), which is what
    Braid's loader reads; transformers reads it back the same."""
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters", None)
    if rp is not None and "full_attention" in rp:
        # Gemma 3: rope_theta for the global layers, rope_local_base_freq for the sliding ones.
        assert rp["full_attention"].get("rope_type", "default") == "default"
        c["rope_theta"] = rp["full_attention"]["rope_theta"]
        c["rope_local_base_freq"] = rp["sliding_attention"]["rope_theta"]
        c["rope_scaling"] = None
    elif rp is not None:
        rp = dict(rp)
        c["rope_theta"] = rp.pop("rope_theta")
        rp.pop("partial_rotary_factor", None)
        c["rope_scaling"] = None if rp.get("rope_type", "default") == "default" else rp
    c["torch_dtype"] = c.pop("dtype", "bfloat16")
    with open(path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
        f.write("\n")


def checkpoint_complete(path):
    """config.json present and every shard the index names (or model.safetensors)."""
    if not os.path.exists(os.path.join(path, "config.json")):
        return False
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = set(json.load(f)["weight_map"].values())
        return all(os.path.exists(os.path.join(path, s)) for s in shards)
    return os.path.exists(os.path.join(path, "model.safetensors"))


def safetensors_files(path):
    return sorted(glob.glob(os.path.join(path, "*.safetensors")))


def random_prompts(seed, lengths, vocab):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=n).tolist() for n in lengths]


def write_f32(path, array):
    np.ascontiguousarray(array, dtype="<f4").tofile(path)


def read_f32(path, n_cols):
    a = np.fromfile(path, dtype="<f4")
    if a.size % n_cols:
        raise ValueError(f"{path}: {a.size} floats is not a multiple of {n_cols}")
    return a.reshape(-1, n_cols)


def load_hf_model(path, device, attn="sdpa"):
    """The checkpoint at `path` as a bfloat16 transformers model on `device`.

    from_pretrained(device_map=...) where accelerate is installed; without it
    (transformers then refuses a device_map) the model is built from the same
    config on the device and the safetensors are loaded straight there, which
    avoids a round trip of the weights through host memory."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation=attn,
                                                     device_map=str(device))
        how = "from_pretrained"
    except ValueError as e:
        if "accelerate" not in str(e):
            raise
        from safetensors.torch import load_file
        cfg = AutoConfig.from_pretrained(path)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation=attn)
        state = {}
        for f in safetensors_files(path):
            state.update(load_file(f, device=str(device)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if cfg.tie_word_embeddings:
            model.tie_weights()
            missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise RuntimeError(f"{path}: missing {missing}, unexpected {unexpected}")
        how = "from_config + safetensors (no accelerate)"
    model.eval()
    assert model.dtype == torch.bfloat16, model.dtype
    return model, how


def pick_device(name):
    import torch
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device here (use --device cpu --tiny)")
    return torch.device(name)


def to_json(obj, indent=0):
    """JSON with one key per line but lists of numbers or strings on one line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(str(k))}: {to_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        items = [pad + to_json(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    if isinstance(obj, float) and not math.isfinite(obj):
        return json.dumps(str(obj))  # "nan", "inf": strict JSON has no such numbers
    if isinstance(obj, list):
        return "[" + ", ".join(to_json(v) for v in obj) + "]"
    return json.dumps(obj)


def save_json(path, obj):
    """Writes `obj` as JSON atomically (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(to_json(obj) + "\n")
    os.replace(tmp, path)
