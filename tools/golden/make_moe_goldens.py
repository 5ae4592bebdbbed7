#!/usr/bin/env python3
"""Golden logits and greedy continuations for the MoE / MLA models (issue 7), from Hugging
Face transformers (the oracle). Modelled on make_model_goldens.py; run on the GPU machine:

  python3 tools/golden/make_moe_goldens.py --out OUT

Writes, per model, into OUT/<name>/:
  config.json, model.safetensors   tiny random model, tensors named as in the hub checkpoints
                                   (one tensor per expert: mlp.experts.<e>.gate_proj.weight ...)
  golden.json                      prompts (token ids), greedy continuations, top-1 margins
  logits_<i>.f32                   full-vocab logits (float32, little-endian) after prompt i

Models:
  tiny-qwen3-moe        Qwen3MoeForCausalLM: softmax router, top-3 of 12, norm_topk_prob,
                        q/k norm, one dense layer (mlp_only_layers), untied output
  tiny-deepseek-v3      DeepseekV3ForCausalLM: MLA with q_lora_rank, YaRN rope (interleaved),
                        sigmoid router with e_score_correction_bias, n_group/topk_group,
                        routed_scaling_factor, shared expert, first_k_dense_replace = 1
  tiny-deepseek-v3-fp8  the same architecture without q_lora (q_proj), hidden 200 (partial
                        128x128 blocks), every linear layer stored as float8_e4m3fn with
                        weight_scale_inv [ceil(out/128), ceil(in/128)] (DeepSeek's format) and
                        quantization_config in config.json
  tiny-deepseek-v3-mla512[-fp8]  the two above with the latent dims the CUDA MLA kernels
                        are compiled for (kv_lora_rank 512, rope 64, nope 64, v 64)

The golden model is exactly the model of the stored weights: bf16 values (or fp8 values times
their block scale) widened to float32, computed in float32 with TF32 off and eager attention.
The HF model is loaded with from_pretrained from a hub-format copy of the weights, so the test
data uses the names real checkpoints use; a direct fallback maps them onto fused expert
parameters if this transformers version does not convert hub names itself.
"""
import argparse, json, math, os, re, shutil, sys, tempfile

import torch

PROMPT_LENS = (1, 7, 33, 100)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_goldens import write_golden  # noqa: E402  (greedy decode + golden.json)


def save_case(d, name, prompts, model, extra):
    write_golden(d, name, prompts, model, "tools/golden/make_moe_goldens.py", extra)


def bf16(t):
    return t.to(torch.bfloat16).float()


def hub_weights(kind, c, g):
    """Random weights under hub checkpoint names (float32 values, bf16-representable)."""
    H, V = c["hidden_size"], c["vocab_size"]
    w = {}

    def lin(name, out_f, in_f, std=0.08):
        w[name] = bf16(torch.randn(out_f, in_f, generator=g) * std)

    def norm(name, n):
        w[name] = bf16(1.0 + 0.1 * torch.randn(n, generator=g))

    def mlp(p, inter):
        lin(p + "gate_proj.weight", inter, H)
        lin(p + "up_proj.weight", inter, H)
        lin(p + "down_proj.weight", H, inter)

    w["model.embed_tokens.weight"] = bf16(torch.randn(V, H, generator=g) * 0.5)
    norm("model.norm.weight", H)
    lin("lm_head.weight", V, H)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        norm(p + "input_layernorm.weight", H)
        norm(p + "post_attention_layernorm.weight", H)
        a = p + "self_attn."
        if kind == "qwen3_moe":
            nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
            lin(a + "q_proj.weight", nh * hd, H)
            lin(a + "k_proj.weight", nkv * hd, H)
            lin(a + "v_proj.weight", nkv * hd, H)
            lin(a + "o_proj.weight", H, nh * hd)
            norm(a + "q_norm.weight", hd)
            norm(a + "k_norm.weight", hd)
            moe = i not in c["mlp_only_layers"] and (i + 1) % c["decoder_sparse_step"] == 0
            if moe:
                lin(p + "mlp.gate.weight", c["num_experts"], H)
                for e in range(c["num_experts"]):
                    mlp(p + f"mlp.experts.{e}.", c["moe_intermediate_size"])
            else:
                mlp(p + "mlp.", c["intermediate_size"])
        else:
            nh = c["num_attention_heads"]
            qk = c["qk_nope_head_dim"] + c["qk_rope_head_dim"]
            if c["q_lora_rank"]:
                lin(a + "q_a_proj.weight", c["q_lora_rank"], H)
                norm(a + "q_a_layernorm.weight", c["q_lora_rank"])
                lin(a + "q_b_proj.weight", nh * qk, c["q_lora_rank"])
            else:
                lin(a + "q_proj.weight", nh * qk, H)
            lin(a + "kv_a_proj_with_mqa.weight", c["kv_lora_rank"] + c["qk_rope_head_dim"], H)
            norm(a + "kv_a_layernorm.weight", c["kv_lora_rank"])
            lin(a + "kv_b_proj.weight", nh * (c["qk_nope_head_dim"] + c["v_head_dim"]),
                c["kv_lora_rank"])
            lin(a + "o_proj.weight", H, nh * c["v_head_dim"])
            if i >= c["first_k_dense_replace"]:
                E = c["n_routed_experts"]
                lin(p + "mlp.gate.weight", E, H)
                # Positive bias: selection scores stay > 0, so masking dropped groups with 0
                # (HF) or -inf (DeepSeek's reference code) selects the same experts.
                w[p + "mlp.gate.e_score_correction_bias"] = torch.rand(E, generator=g) * 0.3
                for e in range(E):
                    mlp(p + f"mlp.experts.{e}.", c["moe_intermediate_size"])
                mlp(p + "mlp.shared_experts.", c["moe_intermediate_size"] * c["n_shared_experts"])
            else:
                mlp(p + "mlp.", c["intermediate_size"])
    return w


def fp8_blocks(w, block=128):
    """DeepSeek's fp8 format: per 128x128 block scale_inv = amax / 448, q = w / scale_inv.
    Returns (q as float8_e4m3fn, scale_inv f32, dequantized f32 = float(q) * scale_inv)."""
    out_f, in_f = w.shape
    so, si = math.ceil(out_f / block), math.ceil(in_f / block)
    scale = torch.ones(so, si)
    for bo in range(so):
        for bi in range(si):
            blk = w[bo * block:(bo + 1) * block, bi * block:(bi + 1) * block]
            amax = float(blk.abs().max())
            scale[bo, bi] = amax / 448.0 if amax > 0 else 1.0
    full = scale.repeat_interleave(block, 0)[:out_f].repeat_interleave(block, 1)[:, :in_f]
    q = (w / full).to(torch.float8_e4m3fn)
    return q, scale, q.float() * full


def is_fp8_linear(name):
    return (name.endswith("_proj.weight") or name.endswith("kv_a_proj_with_mqa.weight")) and \
        ".layers." in name


def fused_fallback(model, hub):
    """Copies hub-named tensors into a model whose experts are fused 3-D parameters."""
    sd = model.state_dict()
    new = {}
    for name, p in sd.items():
        if name in hub:
            new[name] = hub[name]
            continue
        m = re.match(r"(.*\.experts)\.(gate_up_proj|down_proj|gate_proj|up_proj)(\.weight)?$", name)
        if not m:
            raise RuntimeError(f"fallback: no hub tensor for {name} {tuple(p.shape)}")
        base, kind = m.group(1), m.group(2)
        n = p.shape[0]
        parts = []
        for e in range(n):
            if kind == "gate_up_proj":
                t = torch.cat([hub[f"{base}.{e}.gate_proj.weight"], hub[f"{base}.{e}.up_proj.weight"]], 0)
            else:
                t = hub[f"{base}.{e}.{kind}.weight"]
            parts.append(t)
        t = torch.stack(parts)
        if tuple(t.shape) != tuple(p.shape):
            t = t.transpose(1, 2).contiguous()
        if tuple(t.shape) != tuple(p.shape):
            raise RuntimeError(f"fallback: {name} {tuple(p.shape)} vs {tuple(t.shape)}")
        new[name] = t
    model.load_state_dict(new, strict=True)
    return model


def load_hf(cls, cfg, hub, dev):
    """The HF model of the hub-format weights `hub` (float32)."""
    from safetensors.torch import save_file
    tmp = tempfile.mkdtemp()
    try:
        cfg.save_pretrained(tmp)
        save_file({k: v.contiguous() for k, v in hub.items()}, os.path.join(tmp, "model.safetensors"),
                  metadata={"format": "pt"})
        try:
            model, info = cls.from_pretrained(tmp, dtype=torch.float32,
                                              attn_implementation="eager",
                                              output_loading_info=True)
            bad = {k: v for k, v in info.items()
                   if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
        except Exception as e:  # noqa: BLE001 - any failure: use the direct mapping
            print("from_pretrained failed:", repr(e)[:400], flush=True)
            bad = {"error": [repr(e)[:200]]}
        if bad:
            print("from_pretrained did not map every tensor:", {k: list(v)[:6] for k, v in bad.items()},
                  "-> direct fallback", flush=True)
            model = fused_fallback(cls(cfg).float(), hub)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    model = model.to(dev).eval()
    # Check the loaded model really holds our weights (a silent mis-mapping would make the
    # golden meaningless).
    sd = model.state_dict()
    for k in ("model.embed_tokens.weight", "lm_head.weight", "model.layers.0.self_attn.o_proj.weight"):
        assert torch.equal(sd[k].cpu(), hub[k]), k
    return model


def build(outdir, name, cls, cfg, kind, dev, g, fp8=False):
    # Read through getattr: configs alias some fields (attribute_map), which to_dict() may
    # list under another name.
    keys = ["hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "intermediate_size", "moe_intermediate_size"]
    keys += (["head_dim", "num_experts", "mlp_only_layers", "decoder_sparse_step"]
             if kind == "qwen3_moe" else
             ["qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "q_lora_rank", "kv_lora_rank",
              "first_k_dense_replace", "n_routed_experts", "n_shared_experts"])
    c = {k: getattr(cfg, k) for k in keys}
    print(name, c, flush=True)
    hub = hub_weights(kind, c, g)
    stored = dict(hub)
    if fp8:
        for k in list(hub):
            if is_fp8_linear(k):
                q, s, deq = fp8_blocks(hub[k])
                hub[k] = deq
                stored[k] = q
                stored[k + "_scale_inv"] = s
    model = load_hf(cls, cfg, hub, dev)
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    cfg.architectures = [cls.__name__]
    cfg.save_pretrained(d)
    if fp8:
        p = os.path.join(d, "config.json")
        j = json.load(open(p))
        j["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                    "quant_method": "fp8", "weight_block_size": [128, 128]}
        json.dump(j, open(p, "w"), indent=2)
    from safetensors.torch import save_file

    def as_stored(k, v):
        if v.dtype == torch.float8_e4m3fn or k.endswith("_scale_inv") or k.endswith("correction_bias"):
            return v.contiguous()
        return v.to(torch.bfloat16).contiguous()

    save_file({k: as_stored(k, v) for k, v in stored.items()}, os.path.join(d, "model.safetensors"),
              metadata={"format": "pt"})
    prompts = [torch.randint(3, c["vocab_size"], (n,), generator=g).tolist() for n in PROMPT_LENS]
    with torch.no_grad():
        save_case(d, name, prompts, model, {"fp8_block_scaled": fp8})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    from transformers import (DeepseekV3Config, DeepseekV3ForCausalLM, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM)
    g = torch.Generator().manual_seed(4321)
    yarn = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}
    specs = [
        ("tiny-qwen3-moe", Qwen3MoeForCausalLM, "qwen3_moe", False, Qwen3MoeConfig(
            vocab_size=352, hidden_size=128, intermediate_size=192, moe_intermediate_size=80,
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=40,
            num_experts=12, num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1,
            mlp_only_layers=[1], max_position_embeddings=4096, rms_norm_eps=1e-6,
            rope_theta=1000000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
        ("tiny-deepseek-v3", DeepseekV3ForCausalLM, "deepseek_v3", False, DeepseekV3Config(
            vocab_size=320, hidden_size=160, intermediate_size=224, moe_intermediate_size=96,
            num_hidden_layers=3, first_k_dense_replace=1, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32,
            qk_rope_head_dim=16, v_head_dim=24, n_routed_experts=16, n_group=4, topk_group=2,
            num_experts_per_tok=4, n_shared_experts=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, rope_interleave=True, max_position_embeddings=512,
            rope_theta=10000.0, rope_scaling=dict(yarn), rms_norm_eps=1e-6,
            tie_word_embeddings=False, attention_bias=False, bos_token_id=1, eos_token_id=2)),
        ("tiny-deepseek-v3-fp8", DeepseekV3ForCausalLM, "deepseek_v3", True, DeepseekV3Config(
            vocab_size=288, hidden_size=200, intermediate_size=176, moe_intermediate_size=136,
            num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2,
            num_key_value_heads=2, q_lora_rank=None, kv_lora_rank=48, qk_nope_head_dim=24,
            qk_rope_head_dim=8, v_head_dim=32, n_routed_experts=8, n_group=2, topk_group=1,
            num_experts_per_tok=2, n_shared_experts=2, routed_scaling_factor=1.5,
            norm_topk_prob=True, rope_interleave=True, max_position_embeddings=512,
            rope_theta=10000.0, rope_scaling=dict(yarn), rms_norm_eps=1e-6,
            tie_word_embeddings=False, attention_bias=False, bos_token_id=1, eos_token_id=2)),
        # The CUDA MLA kernels are compiled for kv_lora_rank 512 / rope 64 (DeepSeek-V3, Kimi
        # K2, V2-Lite, Moonlight) and (nope, v) = (128, 128) or (64, 64): tiny models with those
        # latent dims check the device path against HF (made with --only mla512, so their
        # weights do not depend on the models above).
        ("tiny-deepseek-v3-mla512", DeepseekV3ForCausalLM, "deepseek_v3", False, DeepseekV3Config(
            vocab_size=256, hidden_size=128, intermediate_size=128, moe_intermediate_size=64,
            num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=512, qk_nope_head_dim=64,
            qk_rope_head_dim=64, v_head_dim=64, n_routed_experts=8, n_group=2, topk_group=1,
            num_experts_per_tok=2, n_shared_experts=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, rope_interleave=True, max_position_embeddings=512,
            rope_theta=10000.0, rope_scaling=dict(yarn), rms_norm_eps=1e-6,
            tie_word_embeddings=False, attention_bias=False, bos_token_id=1, eos_token_id=2)),
        ("tiny-deepseek-v3-mla512-fp8", DeepseekV3ForCausalLM, "deepseek_v3", True, DeepseekV3Config(
            vocab_size=256, hidden_size=200, intermediate_size=144, moe_intermediate_size=72,
            num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=2,
            num_key_value_heads=2, q_lora_rank=None, kv_lora_rank=512, qk_nope_head_dim=64,
            qk_rope_head_dim=64, v_head_dim=64, n_routed_experts=4, n_group=2, topk_group=1,
            num_experts_per_tok=2, n_shared_experts=2, routed_scaling_factor=1.5,
            norm_topk_prob=True, rope_interleave=True, max_position_embeddings=512,
            rope_theta=10000.0, rope_scaling=dict(yarn), rms_norm_eps=1e-6,
            tie_word_embeddings=False, attention_bias=False, bos_token_id=1, eos_token_id=2)),
    ]
    for name, cls, kind, fp8, cfg in specs:
        if a.only and a.only not in name:
            continue
        build(a.out, name, cls, cfg, kind, dev, g, fp8=fp8)


if __name__ == "__main__":
    main()
