#!/usr/bin/env python3
"""Golden logits and greedy continuations from Hugging Face transformers (the oracle).

Run on the GPU machine (tools/gpu/golden.sh). Writes, per model, into OUT/<name>/:
  config.json, model.safetensors   (tiny random models only; weights stored as bf16)
  golden.json                      prompts (token ids), greedy continuations, top-1 margins
  logits_<i>.f32                   full-vocab logits (float32, little-endian) after prompt i

Models:
  tiny-llama   random LlamaForCausalLM, GQA 4:2, llama3 rope scaling, untied output
  tiny-qwen3   random Qwen3ForCausalLM, q/k RMSNorm, explicit head_dim, tied embeddings
  tiny-llama-hd128  random LlamaForCausalLM with head_dim 128 (the tensor-core prefill kernels
               take head_dim 128 only), prompts up to 300 tokens (several 128-row tiles)
  smollm2      SmolLM2-135M-Instruct from the embedded Q4_1 GGUF (transformers dequantizes)

All computation is float32 with TF32 off, so the golden is the exact model of the stored
weights (bf16 values widened to f32, or GGUF blocks dequantized to f32).
"""
import argparse, json, os, sys

import torch

NUM_NEW = 64


def greedy(model, ids, num_new):
    """Greedy decode with the KV cache; returns new tokens, first-step logits and margins."""
    dev = next(model.parameters()).device
    x = torch.tensor([ids], device=dev)
    out = model(input_ids=x, use_cache=True)
    past = out.past_key_values
    logits = out.logits[0, -1].float()
    first = logits.detach().cpu().clone()
    toks, margins = [], []
    for _ in range(num_new):
        top2 = torch.topk(logits, 2)
        t = int(top2.indices[0])
        toks.append(t)
        margins.append(float(top2.values[0] - top2.values[1]))
        out = model(input_ids=torch.tensor([[t]], device=dev), past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
    return toks, first, margins


def write_golden(d, name, prompts, model, generator, extra=None):
    """Greedy-decodes every prompt; writes logits_<i>.f32 and golden.json into folder d."""
    os.makedirs(d, exist_ok=True)
    cases = []
    for i, ids in enumerate(prompts):
        toks, logits, margins = greedy(model, ids, NUM_NEW)
        logits.numpy().astype("<f4").tofile(os.path.join(d, f"logits_{i}.f32"))
        cases.append({"prompt_ids": ids, "greedy_ids": toks, "top1_margins": margins,
                      "logits_file": f"logits_{i}.f32"})
        print(name, i, "prompt", len(ids), "->", toks[:12], "min margin %.4f" % min(margins),
              flush=True)
    meta = {"generator": generator,
            "transformers": __import__("transformers").__version__,
            "torch": torch.__version__, "dtype": "float32", "num_new_tokens": NUM_NEW,
            "cases": cases}
    meta.update(extra or {})
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(meta, f, indent=1)


def save_case(outdir, name, prompts, model):
    write_golden(os.path.join(outdir, name), name, prompts, model,
                 "tools/golden/make_model_goldens.py")


def random_model(cls, cfg, seed):
    torch.manual_seed(seed)
    model = cls(cfg)
    # Make weights exactly bf16-representable, then keep computing in f32.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.08)
            p.copy_(p.to(torch.bfloat16).float())
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or "layernorm" in n:
                p.copy_((1.0 + 0.1 * torch.randn_like(p)).to(torch.bfloat16).float())
    return model


def tiny_models(outdir, dev, only=""):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(1234)
    specs = [
        ("tiny-llama", LlamaForCausalLM, LlamaConfig(
            vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
            rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            bos_token_id=1, eos_token_id=2)),
        ("tiny-qwen3", Qwen3ForCausalLM, Qwen3Config(
            vocab_size=384, hidden_size=96, intermediate_size=224, num_hidden_layers=2,
            num_attention_heads=6, num_key_value_heads=2, head_dim=40,
            max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
            tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)),
        # Last, so the earlier models' prompts (drawn from g in order) stay as they were.
        ("tiny-llama-hd128", LlamaForCausalLM, LlamaConfig(
            vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, head_dim=128,
            max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    ]
    lengths = {"tiny-llama-hd128": (1, 100, 300)}
    for name, cls, cfg in specs:
        model = random_model(cls, cfg, seed=7).to(dev).eval()
        prompts = [torch.randint(3, cfg.vocab_size, (n,), generator=g).tolist()
                   for n in lengths.get(name, (1, 7, 33, 100))]
        if only and name != only:
            continue
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        cfg.architectures = [cls.__name__]
        cfg.save_pretrained(d)
        sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        with torch.no_grad():
            save_case(outdir, name, prompts, model)


def smollm2(outdir, dev, gguf_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, fname = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=fname)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=fname, torch_dtype=torch.float32)
    model = model.to(dev).eval()
    texts = [
        "The capital of France is",
        "def fibonacci(n):\n    ",
        "<|im_start|>user\nWhat is 12 * 7?<|im_end|>\n<|im_start|>assistant\n",
        "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    ]
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    with torch.no_grad():
        save_case(outdir, "smollm2", prompts, model)
    meta_path = os.path.join(outdir, "smollm2", "golden.json")
    meta = json.load(open(meta_path))
    for c, t in zip(meta["cases"], texts):
        c["prompt_text"] = t
        c["greedy_text"] = tok.decode(c["greedy_ids"])
    json.dump(meta, open(meta_path, "w"), indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gguf", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if a.only in ("", "tiny") or a.only.startswith("tiny-"):
        tiny_models(a.out, dev, a.only if a.only.startswith("tiny-") else "")
    if a.only in ("", "smollm2"):
        smollm2(a.out, dev, a.gguf)


if __name__ == "__main__":
    main()
