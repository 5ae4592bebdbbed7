#!/usr/bin/env python3
"""Random DeepSeek-V2/V3-shaped models as llama.cpp GGUF files ("deepseek2"), for Peregrine's
GGUF MoE loader (goldens from llama.cpp itself: tools/golden/llamacpp_goldens.cpp).

Needs numpy and PyPI's `gguf` (llama.cpp's own gguf-py), no torch:

  python3 -m venv /tmp/gv && /tmp/gv/bin/pip install numpy gguf

The layout is the one llama.cpp's converter writes today (conversion/deepseek.py,
DeepseekV2Model) and src/models/deepseek2.cpp reads:
  - attention.q_lora_rank (0: attn_q directly, as DeepSeek-V2-Lite; written explicitly, since
    llama.cpp only infers "lite" from a 26 / 27 layer count), attention.kv_lora_rank;
  - the absorbed-MLA form: head_count_kv 1, key_length = kv_lora + rope, value_length =
    kv_lora, key_length_mla = nope + rope, value_length_mla = v; kv_b split into
    blk.<i>.attn_k_b [heads, kv_lora, nope] (W_UK transposed per head) and attn_v_b
    [heads, v, kv_lora];
  - rope.dimension_count = qk_rope_head_dim, YaRN rope.scaling.* with yarn_log_multiplier =
    0.1 * mscale_all_dim (the converter's convention);
  - leading_dense_block_count dense layers (ffn_gate/up/down), then MoE layers: router
    ffn_gate_inp, optional exp_probs_b.bias, stacked ffn_{gate,up,down}_exps, shared expert
    ffn_{gate,up,down}_shexp; expert_gating_func / _weights_norm / _weights_scale /
    _group_count / _group_used_count.

  --shape tiny        hidden 64, 3 layers (layer 0 dense), 4 heads, q_lora 64, kv_lora 64,
                      nope 32, rope 16, v 32, 16 experts top 4 of ffn 32 in 4 groups (top 2
                      groups), 1 shared, sigmoid + bias, norm, scale 2.5, YaRN x4 over 64
                      positions, vocab 384
  --shape tiny-lite   DeepSeek-V2-Lite's kind of model at tiny size: no q_lora, softmax
                      without bias, 1 group, no norm, scale 1
  --shape v2-lite     DeepSeek-V2-Lite's shapes (hidden 2048, 16 heads, kv_lora 512, nope 128,
                      rope 64, v 128, 64 experts top 6 of ffn 1408, 2 shared, dense ffn 10944,
                      vocab 102400) over --layers layers (bench files)
  --types f32         f32 everywhere
  --types quant       experts Q4_0 (gate) / Q4_1 (up) / Q8_0 (down), shared expert, dense MLP,
                      attention (k_b / v_b included), embedding and output Q8_0; router, bias
                      and norms f32
  --types q4_0        every matrix Q4_0 but k_b / v_b (Q8_0), router and norms f32 (bench)
  --tokenizer-from F.gguf   copy F's gpt2 BPE tokenizer (make_qwen3moe_gguf.py's), for tools
                      that load the tokenizer (peregrine bench decode)

The committed test files (run from tools/golden/; goldens: llamacpp_goldens.cpp F DIR 32):
  tests/data/models/tiny-deepseek2-llamacpp-f32       --shape tiny --types f32
  tests/data/models/tiny-deepseek2-llamacpp-lite-f32  --shape tiny-lite --types f32
  tests/data/models/tiny-deepseek2-llamacpp-quant     --shape tiny --types quant --seed 18
"""
import argparse, sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

from make_qwen3moe_gguf import add_random_args, copy_bpe_vocab, finish, random_adders, spm_vocab

ARCH = "deepseek2"

BASE = dict(max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0)
SHAPES = {
    "tiny": dict(hidden=64, layers=3, dense_layers=1, heads=4, q_lora=64, kv_lora=64, nope=32,
                 rope=16, v=32, experts=16, top_k=4, ffn=32, shared=1, dense_ffn=96, vocab=384,
                 groups=4, topk_groups=2, gating="sigmoid", bias=True, norm=True, scale=2.5,
                 yarn_factor=4.0, yarn_orig=64, mscale_all_dim=1.0),
    "tiny-lite": dict(hidden=64, layers=3, dense_layers=1, heads=4, q_lora=0, kv_lora=64, nope=32,
                      rope=16, v=32, experts=8, top_k=2, ffn=32, shared=2, dense_ffn=96, vocab=384,
                      groups=1, topk_groups=1, gating="softmax", bias=False, norm=False, scale=1.0,
                      yarn_factor=4.0, yarn_orig=64, mscale_all_dim=0.707),
    "v2-lite": dict(hidden=2048, layers=27, dense_layers=1, heads=16, q_lora=0, kv_lora=512,
                    nope=128, rope=64, v=128, experts=64, top_k=6, ffn=1408, shared=2,
                    dense_ffn=10944, vocab=102400, groups=1, topk_groups=1, gating="softmax",
                    bias=False, norm=False, scale=1.0, yarn_factor=40.0, yarn_orig=4096,
                    mscale_all_dim=0.707),
}


def write_metadata(w, c):
    w.add_context_length(BASE["max_position_embeddings"])
    w.add_embedding_length(c["hidden"])
    w.add_block_count(c["layers"])
    w.add_feed_forward_length(c["dense_ffn"])
    w.add_head_count(c["heads"])
    w.add_head_count_kv(1)
    w.add_key_length(c["kv_lora"] + c["rope"])
    w.add_value_length(c["kv_lora"])
    w.add_key_length_mla(c["nope"] + c["rope"])
    w.add_value_length_mla(c["v"])
    w.add_q_lora_rank(c["q_lora"])
    w.add_kv_lora_rank(c["kv_lora"])
    w.add_layer_norm_rms_eps(BASE["rms_norm_eps"])
    w.add_rope_freq_base(BASE["rope_theta"])
    w.add_rope_dimension_count(c["rope"])
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(c["yarn_factor"])
    w.add_rope_scaling_orig_ctx_len(c["yarn_orig"])
    w.add_rope_scaling_yarn_log_mul(0.1 * c["mscale_all_dim"])
    w.add_leading_dense_block_count(c["dense_layers"])
    w.add_expert_count(c["experts"])
    w.add_expert_used_count(c["top_k"])
    w.add_expert_shared_count(c["shared"])
    w.add_expert_feed_forward_length(c["ffn"])
    w.add_expert_group_count(c["groups"])
    w.add_expert_group_used_count(c["topk_groups"])
    w.add_expert_weights_scale(c["scale"])
    if c["norm"]:
        w.add_expert_weights_norm(True)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID if c["gating"] == "sigmoid"
                             else gguf.ExpertGatingFuncType.SOFTMAX)
    w.add_vocab_size(c["vocab"])


def random_model(out, shape, types, layers, seed, tokenizer_from=None):
    c = dict(SHAPES[shape])
    if layers:
        c["layers"] = layers
    rng = np.random.default_rng(seed)
    h, nh, E, ff, V = c["hidden"], c["heads"], c["experts"], c["ffn"], c["vocab"]
    qk, rank, lat = c["nope"] + c["rope"], c["kv_lora"], c["kv_lora"] + c["rope"]
    w = gguf.GGUFWriter(out, ARCH)
    w.add_name(f"random deepseek2 ({shape}, {types})")
    write_metadata(w, c)
    if tokenizer_from:
        copy_bpe_vocab(w, tokenizer_from, V)
    else:
        spm_vocab(w, V)

    add, norm = random_adders(w, rng)

    pick = {"f32": dict(emb=QT.F32, attn=QT.F32, kvb=QT.F32, gate=QT.F32, up=QT.F32, down=QT.F32,
                        dense=QT.F32, out=QT.F32),
            "quant": dict(emb=QT.Q8_0, attn=QT.Q8_0, kvb=QT.Q8_0, gate=QT.Q4_0, up=QT.Q4_1,
                          down=QT.Q8_0, dense=QT.Q8_0, out=QT.Q8_0),
            "q4_0": dict(emb=QT.Q4_0, attn=QT.Q4_0, kvb=QT.Q8_0, gate=QT.Q4_0, up=QT.Q4_0,
                         down=QT.Q4_0, dense=QT.Q4_0, out=QT.Q4_0)}[types]
    add("token_embd.weight", (V, h), 1.0, pick["emb"])
    norm("output_norm.weight", h)
    add("output.weight", (V, h), 0.1, pick["out"])
    for i in range(c["layers"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", h)
        norm(p + "ffn_norm.weight", h)
        if c["q_lora"]:
            add(p + "attn_q_a.weight", (c["q_lora"], h), h ** -0.5, pick["attn"])
            norm(p + "attn_q_a_norm.weight", c["q_lora"])
            add(p + "attn_q_b.weight", (nh * qk, c["q_lora"]), c["q_lora"] ** -0.5, pick["attn"])
        else:
            add(p + "attn_q.weight", (nh * qk, h), h ** -0.5, pick["attn"])
        add(p + "attn_kv_a_mqa.weight", (lat, h), h ** -0.5, pick["attn"])
        norm(p + "attn_kv_a_norm.weight", rank)
        add(p + "attn_k_b.weight", (nh, rank, c["nope"]), rank ** -0.5, pick["kvb"])
        add(p + "attn_v_b.weight", (nh, c["v"], rank), rank ** -0.5, pick["kvb"])
        add(p + "attn_output.weight", (h, nh * c["v"]), (nh * c["v"]) ** -0.5, pick["attn"])
        if i < c["dense_layers"]:
            add(p + "ffn_gate.weight", (c["dense_ffn"], h), h ** -0.5, pick["dense"])
            add(p + "ffn_up.weight", (c["dense_ffn"], h), h ** -0.5, pick["dense"])
            add(p + "ffn_down.weight", (h, c["dense_ffn"]), c["dense_ffn"] ** -0.5, pick["dense"])
            continue
        # Router logits ~N(0, 1): sigmoid scores away from saturation (where f32 ties and
        # quantization noise would decide the experts).
        add(p + "ffn_gate_inp.weight", (E, h), h ** -0.5, QT.F32)
        if c["bias"]:
            w.add_tensor(p + "exp_probs_b.bias", (0.1 * rng.standard_normal(E)).astype(np.float32))
        add(p + "ffn_gate_exps.weight", (E, ff, h), h ** -0.5, pick["gate"])
        add(p + "ffn_up_exps.weight", (E, ff, h), h ** -0.5, pick["up"])
        add(p + "ffn_down_exps.weight", (E, h, ff), ff ** -0.5, pick["down"])
        sff = ff * c["shared"]
        add(p + "ffn_gate_shexp.weight", (sff, h), h ** -0.5, pick["dense"])
        add(p + "ffn_up_shexp.weight", (sff, h), h ** -0.5, pick["dense"])
        add(p + "ffn_down_shexp.weight", (h, sff), sff ** -0.5, pick["dense"])
        print(f"layer {i} written", file=sys.stderr) if not shape.startswith("tiny") else None
    finish(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_random_args(ap, SHAPES)
    a = ap.parse_args()
    random_model(a.out, a.shape, a.types, a.layers, a.seed, a.tokenizer_from)


if __name__ == "__main__":
    main()
