#!/usr/bin/env python3
"""Qwen3-MoE models as llama.cpp GGUF files ("qwen3moe"), for Peregrine's GGUF MoE loader.

Needs numpy and PyPI's `gguf` (llama.cpp's own gguf-py), no torch:

  python3 -m venv /tmp/gv && /tmp/gv/bin/pip install numpy gguf

Two modes, one layout (the one llama.cpp's convert_hf_to_gguf.py writes and
src/models/qwen3moe.cpp reads):
  - blk.<i>.ffn_{gate,up,down}_exps.weight: the experts stacked, [experts, out, in] row-major
    (ggml ne = {in, out, experts});
  - blk.<i>.ffn_gate_inp.weight: the router [experts, hidden];
  - attention and norms under llama.cpp's names; a layer without a router is a dense SwiGLU
    (HF mlp_only_layers; llama.cpp itself needs every layer to be MoE).

  --from-hf DIR OUT.gguf   convert a HF checkpoint (config.json + one model.safetensors) with
                           each tensor in its stored dtype (bf16 stays bf16, so the GGUF holds
                           exactly the golden model's weights); tests/models/hf_to_gguf.h does
                           the same at test time for MoeGolden.TinyQwen3MoeGguf
  --random OUT.gguf        a random all-MoE model llama.cpp can load, with an SPM vocabulary
                           (<unk> <s> </s>, 256 byte tokens, filler pieces):
      --shape tiny         hidden 64, 2 layers, 4/2 heads of 16, 8 experts top 2 of ffn 32,
                           vocab 384
      --shape qwen3-30b-a3b  Qwen3-30B-A3B's layer shapes (hidden 2048, 32/4 heads of 128,
                           128 experts top 8 of ffn 768, vocab 151936) over --layers layers
      --tokenizer-from F.gguf  copy F's gpt2 BPE tokenizer (tokens padded to the vocab with
                           "[PAD<i>]" pieces) instead of the SPM one, for tools that load the
                           tokenizer too (peregrine bench decode)
      --types f32|quant|q4_0  f32 everywhere; or "quant": experts Q4_0 (gate) / Q4_1 (up) /
                           Q8_0 (down), attention Q8_0, embedding Q8_0, output Q8_0, router
                           and norms f32; or "q4_0": every matrix Q4_0 (bench files), router
                           and norms f32
"""
import argparse, json, struct, sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

ARCH = "qwen3moe"


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        dt = {"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[info["dtype"]]
        out[name] = (info["dtype"], np.frombuffer(raw, dtype=dt).reshape(info["shape"]))
    return out


def add_stored(w, name, dtype, arr):
    """A tensor in its stored dtype: bf16 as raw uint16 words."""
    if dtype == "BF16":
        w.add_tensor(name, arr, raw_shape=arr.shape, raw_dtype=QT.BF16)
    else:
        w.add_tensor(name, arr)


def write_common(w, c, vocab):
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_block_count(c["num_hidden_layers"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_key_length(c["head_dim"])
    w.add_value_length(c["head_dim"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_theta"])
    w.add_expert_count(c["num_experts"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_vocab_size(vocab)


def from_hf(src, out):
    cj = json.load(open(f"{src}/config.json"))
    assert cj["model_type"] == "qwen3_moe", cj["model_type"]
    c = dict(cj)
    c["rope_theta"] = cj.get("rope_parameters", {}).get("rope_theta", cj.get("rope_theta", 1e6))
    c["num_experts"] = cj.get("num_experts", cj.get("num_local_experts"))
    t = read_safetensors(f"{src}/model.safetensors")
    w = gguf.GGUFWriter(out, ARCH)
    w.add_name("tiny-qwen3-moe (from HF)")
    write_common(w, c, cj["vocab_size"])
    w.add_bos_token_id(cj["bos_token_id"])
    w.add_eos_token_id(cj["eos_token_id"])
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    sub = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
           "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
           "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
           "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp"}
    for name, gname in top.items():
        if name in t:
            add_stored(w, gname, *t[name])
    E = c["num_experts"]
    for i in range(cj["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for hf, g in sub.items():
            if p + hf + ".weight" in t:
                add_stored(w, f"blk.{i}.{g}.weight", *t[p + hf + ".weight"])
        for proj in ("gate", "up", "down"):
            names = [f"{p}mlp.experts.{e}.{proj}_proj.weight" for e in range(E)]
            if names[0] not in t:
                continue
            dtype = t[names[0]][0]
            add_stored(w, f"blk.{i}.ffn_{proj}_exps.weight", dtype, np.stack([t[n][1] for n in names]))
    finish(w)


SHAPES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                 intermediate_size=32, vocab_size=384),
    "qwen3-30b-a3b": dict(hidden_size=2048, num_hidden_layers=48, num_attention_heads=32,
                          num_key_value_heads=4, head_dim=128, num_experts=128, num_experts_per_tok=8,
                          moe_intermediate_size=768, intermediate_size=6144, vocab_size=151936),
}


def spm_vocab(w, n):
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>"); scores.append(0.0); types.append(6)
    i = 0
    while len(tokens) < n:
        tokens.append(f"\u2581t{i}"); scores.append(-float(i)); types.append(1); i += 1
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def copy_bpe_vocab(w, src, n):
    r = gguf.GGUFReader(src)
    f = r.fields
    assert f["tokenizer.ggml.model"].contents() == "gpt2", "only a gpt2 BPE tokenizer can be copied"
    tokens = list(f["tokenizer.ggml.tokens"].contents())
    types = list(f["tokenizer.ggml.token_type"].contents())
    assert len(tokens) <= n, f"the tokenizer has {len(tokens)} tokens, more than the vocab {n}"
    tokens += [f"[PAD{i}]" for i in range(n - len(tokens))]
    types += [1] * (n - len(types))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(f["tokenizer.ggml.pre"].contents())
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(f["tokenizer.ggml.merges"].contents()))
    w.add_bos_token_id(f["tokenizer.ggml.bos_token_id"].contents())
    w.add_eos_token_id(f["tokenizer.ggml.eos_token_id"].contents())


def random_adders(w, rng):
    """add(name, shape, std, qt): an N(0, std) tensor, quantized to qt unless F32;
    norm(name, n): a 1 + N(0, 0.1) f32 vector. Both draw from rng in call order."""

    def add(name, shape_, std, qt):
        a = (rng.standard_normal(shape_, dtype=np.float32) * std).astype(np.float32)
        if qt != QT.F32:
            a = gguf.quants.quantize(a, qt)
        w.add_tensor(name, a, raw_dtype=qt if qt != QT.F32 else None)  # byte rows -> elements

    def norm(name, n):
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    return add, norm


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def add_random_args(ap, shapes):
    """The options of a --random model (shape, types, layers, seed, tokenizer) and OUT."""
    ap.add_argument("--shape", default="tiny", choices=sorted(shapes))
    ap.add_argument("--types", default="f32", choices=["f32", "quant", "q4_0"])
    ap.add_argument("--layers", type=int, default=0, help="override the shape's layer count")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tokenizer-from", metavar="F.gguf")
    ap.add_argument("out")


def random_model(out, shape, types, layers, seed, tokenizer_from=None):
    c = dict(SHAPES[shape], max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1e6)
    if layers:
        c["num_hidden_layers"] = layers
    rng = np.random.default_rng(seed)
    h, hd, E, ff, V = (c["hidden_size"], c["head_dim"], c["num_experts"], c["moe_intermediate_size"],
                       c["vocab_size"])
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    w = gguf.GGUFWriter(out, ARCH)
    w.add_name(f"random qwen3moe ({shape}, {types})")
    write_common(w, c, V)
    if tokenizer_from:
        copy_bpe_vocab(w, tokenizer_from, V)
    else:
        spm_vocab(w, V)

    add, norm = random_adders(w, rng)

    pick = {"f32": dict(emb=QT.F32, attn=QT.F32, gate=QT.F32, up=QT.F32, down=QT.F32, out=QT.F32),
            "quant": dict(emb=QT.Q8_0, attn=QT.Q8_0, gate=QT.Q4_0, up=QT.Q4_1, down=QT.Q8_0, out=QT.Q8_0),
            "q4_0": dict(emb=QT.Q4_0, attn=QT.Q4_0, gate=QT.Q4_0, up=QT.Q4_0, down=QT.Q4_0,
                         out=QT.Q4_0)}[types]
    add("token_embd.weight", (V, h), 1.0, pick["emb"])
    norm("output_norm.weight", h)
    add("output.weight", (V, h), 0.1, pick["out"])
    for i in range(c["num_hidden_layers"]):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", h)
        norm(p + "ffn_norm.weight", h)
        norm(p + "attn_q_norm.weight", hd)
        norm(p + "attn_k_norm.weight", hd)
        add(p + "attn_q.weight", (q, h), h ** -0.5, pick["attn"])
        add(p + "attn_k.weight", (kv, h), h ** -0.5, pick["attn"])
        add(p + "attn_v.weight", (kv, h), h ** -0.5, pick["attn"])
        add(p + "attn_output.weight", (h, q), q ** -0.5, pick["attn"])
        add(p + "ffn_gate_inp.weight", (E, h), 1.0, QT.F32)
        add(p + "ffn_gate_exps.weight", (E, ff, h), h ** -0.5, pick["gate"])
        add(p + "ffn_up_exps.weight", (E, ff, h), h ** -0.5, pick["up"])
        add(p + "ffn_down_exps.weight", (E, h, ff), ff ** -0.5, pick["down"])
        print(f"layer {i} written", file=sys.stderr) if shape != "tiny" else None
    finish(w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from-hf", metavar="DIR")
    ap.add_argument("--random", action="store_true")
    add_random_args(ap, SHAPES)
    a = ap.parse_args()
    if a.from_hf:
        from_hf(a.from_hf, a.out)
    elif a.random:
        random_model(a.out, a.shape, a.types, a.layers, a.seed, a.tokenizer_from)
    else:
        ap.error("give --from-hf DIR or --random")


if __name__ == "__main__":
    main()
