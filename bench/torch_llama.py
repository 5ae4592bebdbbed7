#!/usr/bin/env python3
"""PyTorch peer for Peregrine's dense GPU benchmarks (issue 6), on the same GPU in the same call.

The model: the shape of a Llama config.json (configs/llama-3.1-8b by default) with random bf16
weights on the GPU. Two implementations of the same math:
  * "hf":  Hugging Face transformers' LlamaForCausalLM built from the config (sdpa attention,
           DynamicCache), run eagerly as users run it. It also supplies the weights.
  * "ref": a compact hand-written forward of the same math over the same weights (q/k/v and
           gate/up concatenated into one matrix each, as Peregrine does; a static KV cache of
           [batch, kv_heads, context, head_dim] per layer; F.scaled_dot_product_attention with
           flash / cuDNN / efficient kernels only, never the O(n^2)-memory math fallback). Its
           logits are checked against "hf" first (max|diff| / std(hf)).
Measured (each point skipped with a printed reason when it does not fit memory or the budget):
  decode ms/token at batch 1, 8, 32, 128 x context 1K, 32K: ref eager, ref under one CUDA graph
    (torch.cuda.graph, static cache; the "CUDA-graph decode loop"), optionally ref's decode
    step compiled by torch.compile (inductor, default mode, fullgraph) and that compiled step
    captured by torch.cuda.graph (--compile; compile time and max|diff| vs ref printed),
    and hf eager at batch 1 / 1K;
  prefill tokens/s for one prompt of 8K and 32K tokens (ref, one forward; hf at 8K);
  TTFT: 800 new tokens after a 50K-token cached prefix (random K/V values, untimed), timed to
    the first token's id on the host.
Prints one line per point and writes --json (read by tools/gpu/dense_summary.py).
"""
import argparse
import gc
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------------
# Model shape, RoPE
# ---------------------------------------------------------------------------------------------
class Shape:
    def __init__(self, cfg):
        self.hidden = cfg["hidden_size"]
        self.inter = cfg["intermediate_size"]
        self.layers = cfg["num_hidden_layers"]
        self.heads = cfg["num_attention_heads"]
        self.kv_heads = cfg.get("num_key_value_heads", self.heads)
        self.head_dim = cfg.get("head_dim") or self.hidden // self.heads
        self.vocab = cfg["vocab_size"]
        self.eps = cfg.get("rms_norm_eps", 1e-5)
        self.theta = cfg.get("rope_theta", 10000.0)
        self.rope_scaling = cfg.get("rope_scaling") or {}
        self.group = self.heads // self.kv_heads

    def kv_bytes_per_token(self):
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # K and V, bf16

    def linear_params_per_token(self):
        h, qd, kvd = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.layers * (h * (qd + 2 * kvd) + qd * h + 3 * h * self.inter)


def inv_freq(s: Shape):
    """RoPE inverse frequencies [head_dim/2] f32, with Llama-3 frequency scaling if configured."""
    d = s.head_dim
    inv = 1.0 / (s.theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    rs = s.rope_scaling
    if rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv / factor + smooth * inv
        medium = (wavelen >= old / hi) & (wavelen <= old / lo)
        inv = torch.where(medium, smoothed, scaled)
    return inv


def rope_tables(s: Shape, inv, start, count, device):
    """cos, sin [count, head_dim] bf16 for positions start .. start + count - 1 (HF layout:
    the half-dimension frequencies repeated twice, rotate_half pairing)."""
    pos = torch.arange(start, start + count, device=device, dtype=torch.float32)
    f = pos[:, None] * inv.to(device)[None, :]
    emb = torch.cat([f, f], dim=-1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


def rms_norm(x, w, eps):
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


# ---------------------------------------------------------------------------------------------
# The hand-written reference ("ref")
# ---------------------------------------------------------------------------------------------
try:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    FAST_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                 SDPBackend.EFFICIENT_ATTENTION]
except Exception:  # older torch: no backend control
    sdpa_kernel, FAST_SDPA = None, None


def sdpa_fast(q, k, v, **kw):
    if sdpa_kernel is None:
        return F.scaled_dot_product_attention(q, k, v, **kw)
    with sdpa_kernel(FAST_SDPA):
        return F.scaled_dot_product_attention(q, k, v, **kw)


class RefLlama:
    """Weights: embed [V, h]; per layer wqkv [qd + 2 kvd, h], wo [h, qd], wgu [2 inter, h],
    wd [h, inter], ln1, ln2 [h]; norm [h]; lm_head [V, h]. All bf16 on the GPU."""

    def __init__(self, s: Shape, weights, device):
        self.s, self.w, self.device = s, weights, device
        self.inv = inv_freq(s)
        self.gqa_mode = "enable_gqa"  # or "expand" if the fast kernels refuse enable_gqa
        self.decode_attn = "sdpa"     # or "matmul"; ref_decode times both and keeps the faster

    def attend_prefill(self, q, keys, vals, prefix):
        """q [B, H, T, d]; keys/vals [B, KVH, prefix + T, d]; causal with the prefix visible."""
        T, S = q.shape[2], keys.shape[2]
        kw = {}
        if prefix == 0:
            kw["is_causal"] = True
        else:
            from torch.nn.attention.bias import causal_lower_right
            kw["attn_mask"] = causal_lower_right(T, S)
        if self.gqa_mode == "enable_gqa":
            try:
                return sdpa_fast(q, keys, vals, enable_gqa=True, **kw)
            except Exception as e:  # no fast kernel takes GQA here: expand the kv heads
                log(f"  note: sdpa enable_gqa refused ({type(e).__name__}: {str(e)[:120]}); "
                    f"expanding kv heads")
                self.gqa_mode = "expand"
        g = self.s.group
        return sdpa_fast(q, keys.repeat_interleave(g, dim=1), vals.repeat_interleave(g, dim=1), **kw)

    def forward(self, ids, start, caches, cos=None, sin=None):
        """ids [B, T] int64 at positions start .. start + T - 1 of every sequence; caches: per
        layer (K, V) [B, KVH, S, d] with S >= start + T (rows [0, start) hold the prefix).
        Returns the last token's logits [B, V] bf16."""
        s, w = self.s, self.w
        B, T = ids.shape
        H, KVH, d = s.heads, s.kv_heads, s.head_dim
        if cos is None:
            cos, sin = rope_tables(s, self.inv, start, T, ids.device)
        x = F.embedding(ids, w["embed"])  # [B, T, h]
        qd, kvd = H * d, KVH * d
        for l in range(s.layers):
            L = w["layers"][l]
            r = rms_norm(x, L["ln1"], s.eps)
            qkv = r @ L["wqkv"].t()
            q = qkv[..., :qd].view(B, T, H, d).transpose(1, 2)
            k = qkv[..., qd:qd + kvd].view(B, T, KVH, d).transpose(1, 2)
            v = qkv[..., qd + kvd:].view(B, T, KVH, d).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            K, V = caches[l]
            K[:, :, start:start + T].copy_(k)
            V[:, :, start:start + T].copy_(v)
            keys, vals = K[:, :, :start + T], V[:, :, :start + T]
            if T == 1:
                # Decode: the group's query heads become the query rows of their kv head
                # (no mask: the one new token sees every cached key).
                qg = q.reshape(B, KVH, s.group, d)
                if self.decode_attn == "matmul":
                    # Two batched GEMMs over the cache (cuBLAS splits long contexts, which
                    # SDPA's flash kernel does not for a few query rows) and an f32 softmax.
                    sc = torch.matmul(qg, keys.transpose(-1, -2)) * (d ** -0.5)
                    o = torch.matmul(torch.softmax(sc.float(), dim=-1).to(qg.dtype), vals)
                else:
                    o = sdpa_fast(qg, keys, vals)
                o = o.reshape(B, 1, qd)
            else:
                o = self.attend_prefill(q, keys, vals, start).transpose(1, 2).reshape(B, T, qd)
            x = x + o @ L["wo"].t()
            r = rms_norm(x, L["ln2"], s.eps)
            gate, up = (r @ L["wgu"].t()).chunk(2, dim=-1)
            x = x + (F.silu(gate) * up) @ L["wd"].t()
        last = rms_norm(x[:, -1], w["norm"], s.eps)
        return last @ w["lm_head"].t()

    def new_caches(self, batch, context, fill=True):
        s = self.s
        shape = (batch, s.kv_heads, context, s.head_dim)
        caches = []
        for _ in range(s.layers):
            K = torch.empty(shape, dtype=torch.bfloat16, device=self.device)
            V = torch.empty(shape, dtype=torch.bfloat16, device=self.device)
            if fill:  # realistic values for the cached rows (timing only)
                K.normal_(), V.normal_()
            caches.append((K, V))
        return caches


def ref_weights_from_hf(hf):
    m = hf.model
    layers = []
    for blk in m.layers:
        a, f = blk.self_attn, blk.mlp
        layers.append({
            "wqkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0).contiguous(),
            "wo": a.o_proj.weight, "wgu": torch.cat([f.gate_proj.weight, f.up_proj.weight], 0).contiguous(),
            "wd": f.down_proj.weight, "ln1": blk.input_layernorm.weight,
            "ln2": blk.post_attention_layernorm.weight})
    return {"embed": m.embed_tokens.weight, "norm": m.norm.weight, "lm_head": hf.lm_head.weight,
            "layers": layers}


def random_ref_weights(s: Shape, device, gen_std=0.02):
    def r(*shape):
        return (torch.randn(shape, dtype=torch.bfloat16, device=device) * gen_std)

    def norm():
        return 1 + 0.1 * torch.randn(s.hidden, dtype=torch.bfloat16, device=device)
    qd, kvd = s.heads * s.head_dim, s.kv_heads * s.head_dim
    return {"embed": r(s.vocab, s.hidden), "norm": norm(), "lm_head": r(s.vocab, s.hidden),
            "layers": [{"wqkv": r(qd + 2 * kvd, s.hidden), "wo": r(s.hidden, qd),
                        "wgu": r(2 * s.inter, s.hidden), "wd": r(s.hidden, s.inter),
                        "ln1": norm(), "ln2": norm()} for _ in range(s.layers)]}


# ---------------------------------------------------------------------------------------------
# Timing helpers
# ---------------------------------------------------------------------------------------------
def event_ms(fn, iters, warmup=2):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iters):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / iters


def wall_s(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def free_bytes():
    return torch.cuda.mem_get_info()[0]


def release():
    gc.collect()
    torch.cuda.empty_cache()


class Budget:
    def __init__(self, seconds):
        self.end = time.time() + seconds

    def left(self):
        return self.end - time.time()


def measure_gemm_tflops():
    n = 8192
    x = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
    ms = event_ms(lambda: x @ w.t(), 10, warmup=3)
    del x, w
    return 2 * n ** 3 / (ms * 1e-3) / 1e12


def measure_hbm_gbs():
    n = 2 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty(n, dtype=torch.uint8, device="cuda")
    ms = event_ms(lambda: b.copy_(a), 8, warmup=2)
    del a, b
    return 2 * n / (ms * 1e-3) / 1e9


# ---------------------------------------------------------------------------------------------
# Benchmarks
# ---------------------------------------------------------------------------------------------
def check_against_hf(hf, ref, s, rows, prompt_len=64):
    """ref (bf16) and hf (bf16) against an fp32 copy of hf (the oracle), on the same weights:
    logits of the last prompt token and of one decode step. Random 8B weights amplify bf16
    rounding through 32 layers, so ref is held to hf's own bf16 error, not to a fixed number:
    ok when ref's max|diff|/std(oracle) <= 1.5 x hf's + 0.02, and the argmax agrees with hf's."""
    import copy
    g = torch.Generator(device="cpu").manual_seed(7)
    ids = torch.randint(0, s.vocab, (1, prompt_len), generator=g).cuda()
    logits = {}
    with torch.no_grad():
        out = hf(input_ids=ids, use_cache=True)
        logits["hf", "prefill"] = out.logits[0, -1].float()
        nxt = logits["hf", "prefill"].argmax().view(1, 1)
        logits["hf", "decode"] = hf(input_ids=nxt, past_key_values=out.past_key_values,
                                    use_cache=True).logits[0, -1].float()
        del out
        caches = ref.new_caches(1, prompt_len + 1, fill=False)
        logits["ref", "prefill"] = ref.forward(ids, 0, caches)[0].float()
        logits["ref", "decode"] = ref.forward(nxt, prompt_len, caches)[0].float()
        del caches
        oracle = copy.deepcopy(hf).float()
        out = oracle(input_ids=ids, use_cache=True)
        logits["f32", "prefill"] = out.logits[0, -1].float()
        logits["f32", "decode"] = oracle(input_ids=nxt, past_key_values=out.past_key_values,
                                         use_cache=True).logits[0, -1].float()
        del out, oracle
        release()
    res, ok = {}, True
    for step in ("prefill", "decode"):
        o = logits["f32", step]
        err = {impl: (logits[impl, step] - o).abs().max().item() / o.std().item() for impl in ("ref", "hf")}
        top = {impl: logits[impl, step].argmax().item() for impl in ("ref", "hf", "f32")}
        ok = ok and err["ref"] <= 1.5 * err["hf"] + 0.02 and top["ref"] == top["hf"]
        res[step] = err["ref"]
        res[step + "_hf"] = err["hf"]
        log(f"check vs fp32 transformers ({step}, {prompt_len}-token prompt): max|diff|/std: "
            f"ref bf16 {err['ref']:.4f}, transformers bf16 {err['hf']:.4f}; argmax ref {top['ref']} "
            f"hf {top['hf']} fp32 {top['f32']}")
    rows.append({"kind": "check", "impl": "ref_vs_hf", "ok": ok, **res})
    return ok


def hf_points(hf, s, args, rows, budget):
    with torch.no_grad():
        if 1024 in args.contexts and budget.left() > 10:
            ctx = 1024
            ids = torch.randint(0, s.vocab, (1, ctx - 1), device="cuda")
            out = hf(input_ids=ids, use_cache=True)
            pkv, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            del out

            def step():
                nonlocal tok
                o = hf(input_ids=tok, past_key_values=pkv, use_cache=True)
                tok = o.logits[:, -1:].argmax(-1)
            # The context grows by one per step (1023 + 2 warm-up + 10): ~1K.
            ms = event_ms(step, 10, warmup=2)
            log(f"hf eager decode b=1 ctx={ctx}: {ms:.2f} ms/token")
            rows.append({"kind": "decode", "impl": "hf_eager", "batch": 1, "context": ctx, "ms": ms})
            del pkv
            release()
        for p in args.hf_prompts:
            if budget.left() < 8:
                log(f"hf prefill {p}: skipped (budget)")
                continue
            ids = torch.randint(0, s.vocab, (1, p), device="cuda")
            kw = {"logits_to_keep": 1}
            try:
                hf(input_ids=ids[:, :256], use_cache=False, **kw)
            except TypeError:
                kw = {}
            sec, _ = wall_s(lambda: hf(input_ids=ids, use_cache=False, **kw))
            log(f"hf eager prefill {p}: {sec * 1e3:.1f} ms = {p / sec:.0f} tok/s")
            rows.append({"kind": "prefill", "impl": "hf_eager", "tokens": p, "seconds": sec})
            release()


def ref_prefill(ref, s, args, rows, budget):
    for p in args.prompts:
        need = p * s.kv_bytes_per_token() + p * (2 * s.inter + 4 * s.hidden) * 2 * 3
        if need > free_bytes() - (4 << 30):
            log(f"ref prefill {p}: skipped (needs ~{need / 2**30:.1f} GiB)")
            continue
        if budget.left() < 6:
            log(f"ref prefill {p}: skipped (budget)")
            continue
        caches = ref.new_caches(1, p, fill=False)
        ids = torch.randint(0, s.vocab, (1, p), device="cuda")
        with torch.no_grad():
            ref.forward(ids[:, :1024], 0, caches)  # warm-up (kernels, cuBLAS handles)
            times = []
            for _ in range(args.prefill_reps):
                sec, _ = wall_s(lambda: ref.forward(ids, 0, caches).argmax(-1).item())
                times.append(sec)
        sec = sorted(times)[len(times) // 2]
        log(f"ref eager prefill {p}: {sec * 1e3:.1f} ms = {p / sec:.0f} tok/s")
        rows.append({"kind": "prefill", "impl": "ref_eager", "tokens": p, "seconds": sec})
        del caches
        release()


def ref_ttft(ref, s, args, rows, budget):
    prefix, new = args.ttft_prefix, args.ttft_new
    if prefix <= 0 or new <= 0:
        return
    if budget.left() < 4:
        log("ref ttft: skipped (budget)")
        return
    caches = ref.new_caches(1, prefix + new, fill=True)  # the prefix: random K/V, untimed
    ids = torch.randint(0, s.vocab, (1, new), device="cuda")
    times = []
    with torch.no_grad():
        for rep in range(args.ttft_reps + 1):
            # Timed: the forward of the new tokens (cos/sin tables included) and the first
            # token's id on the host.
            sec, tok = wall_s(lambda: ref.forward(ids, prefix, caches).argmax(-1).item())
            if rep:
                times.append(sec)
    sec = sorted(times)[len(times) // 2]
    log(f"ref eager ttft {new} on {prefix}: {sec * 1e3:.1f} ms (first token {tok})")
    rows.append({"kind": "ttft", "impl": "ref_eager", "prefix": prefix, "tokens": new, "seconds": sec})
    del caches
    release()


FAILED_SCOPES = set()  # compile scopes that raised once
ON_POINT = None  # main() sets it: writes the JSON after every decode point (a job cap loses none)


def ref_decode(ref, s, args, rows, budget):
    points = args.points or [(b, ctx) for ctx in args.contexts for b in args.batches]
    for b, ctx in points:
        need = b * ctx * s.kv_bytes_per_token()
        tag = f"ref decode b={b} ctx={ctx}"
        if need > free_bytes() - (6 << 30):
            log(f"{tag}: skipped (KV needs {need / 2**30:.1f} GiB, {free_bytes() / 2**30:.1f} GiB free)")
            rows.append({"kind": "decode", "impl": "ref_graph", "batch": b, "context": ctx,
                         "skipped": f"KV {need / 2**30:.0f} GiB does not fit"})
            continue
        if budget.left() < 3:
            log(f"{tag}: skipped (budget)")
            continue
        caches = ref.new_caches(b, ctx, fill=True)
        ids = torch.randint(0, s.vocab, (b, 1), device="cuda")
        pos = ctx - 1  # every sequence appends its token at position ctx - 1
        cos, sin = rope_tables(s, ref.inv, pos, 1, "cuda")
        with torch.no_grad():
            # Each decode attention form under its own CUDA graph of one step (captured on
            # a side stream after warm-up there); the faster one is the peer's number.
            by_form = {}
            if not any(r.get("kind") == "check_decode_forms" for r in rows):
                rows.append(check_decode_forms(ref, s, b, ctx))
            for form in ("sdpa", "matmul"):
                ref.decode_attn = form
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    for _ in range(2):
                        ref.forward(ids, pos, caches, cos, sin)
                torch.cuda.current_stream().wait_stream(st)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = ref.forward(ids, pos, caches, cos, sin)
                by_form[form] = event_ms(graph.replay, args.iters, warmup=3)
                del graph, out
                release()
            ref.decode_attn = min(by_form, key=by_form.get)
            graphed = by_form[ref.decode_attn]
            eager = event_ms(lambda: ref.forward(ids, pos, caches, cos, sin), 5, warmup=2)
            row = {"kind": "decode", "impl": "ref_graph", "batch": b, "context": ctx,
                   "ms": graphed, "eager_ms": eager, "attn": ref.decode_attn,
                   "ms_sdpa": by_form["sdpa"], "ms_matmul": by_form["matmul"]}
            log(f"{tag}: graph {graphed:.3f} ms ({ref.decode_attn}; sdpa {by_form['sdpa']:.3f}, "
                f"matmul {by_form['matmul']:.3f}), eager {eager:.3f} ms")
            rows.append(row)
            if (b, ctx) in args.profile_points:
                try:
                    row["kernels"] = profile_kernels(lambda: ref.forward(ids, pos, caches, cos, sin),
                                                     f"ref b={b} ctx={ctx} ({ref.decode_attn})")
                except Exception as e:
                    log(f"  torch.profiler failed: {type(e).__name__}: {str(e)[:200]}")
            if args.compile and b in args.compile_batches:
                for scope in args.compile_scope:
                    if scope in FAILED_SCOPES:
                        continue
                    if budget.left() < args.compile_min_s:
                        log(f"{tag} torch.compile({scope}): skipped (budget)")
                        continue
                    c = compiled_decode(ref, s, args, ids, pos, caches, cos, sin, b, ctx, scope)
                    rows.append(c)
                    if "error" in c:
                        FAILED_SCOPES.add(scope)  # not retried at later points
                    if ON_POINT:
                        ON_POINT()
                    if "ms" in c and not args.compile_all_scopes:
                        break  # one working compiled form per point
        if ON_POINT:
            ON_POINT()
        del caches
        release()


def profile_kernels(fn, tag, steps=3, top=14):
    """GPU kernel time per step of fn (eager; the same kernels its CUDA graph replays), by
    kernel name, through torch.profiler (CUPTI). Returns [{name, us, calls}] per step."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    res = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0)
        if us > 0:
            res.append({"name": e.key, "us": us / steps, "calls": e.count / steps})
    res.sort(key=lambda r: -r["us"])
    total = sum(r["us"] for r in res)
    log(f"  torch kernels per step, {tag} (torch.profiler, eager; sum {total:.0f} us):")
    for r in res[:top]:
        log(f"    {r['us']:9.1f} us {100 * r['us'] / max(total, 1e-9):5.1f}%  {r['calls']:6.1f} calls  {r['name'][:90]}")
    return res[:top]


def check_decode_forms(ref, s, b, ctx):
    """The two decode attention forms on the same random q / K / V (one layer's shapes):
    max|diff| / std of the outputs; both accumulate in f32, so they agree to bf16 rounding."""
    g = torch.Generator(device="cuda").manual_seed(11)
    shape_q, shape_kv = (b, s.kv_heads, s.group, s.head_dim), (b, s.kv_heads, ctx, s.head_dim)
    q = torch.randn(shape_q, generator=g, device="cuda").to(torch.bfloat16)
    k = torch.randn(shape_kv, generator=g, device="cuda").to(torch.bfloat16)
    v = torch.randn(shape_kv, generator=g, device="cuda").to(torch.bfloat16)
    a = sdpa_fast(q, k, v).float()
    sc = torch.matmul(q, k.transpose(-1, -2)) * (s.head_dim ** -0.5)
    m = torch.matmul(torch.softmax(sc.float(), dim=-1).to(q.dtype), v).float()
    err = ((a - m).abs().max() / a.std()).item()
    log(f"decode attention forms (sdpa vs two GEMMs + softmax, b={b} ctx={ctx}, random q/K/V): "
        f"max|diff|/std {err:.4f}")
    del q, k, v
    return {"kind": "check_decode_forms", "err": err, "ok": err < 0.05}


def decode_layer(s, form, x, L, K, V, pos_t, cos, sin):
    """One decoder layer of a decode step, written for torch.compile: x [B, 1, h]; K, V
    [B, KVH, S, d] static caches (every row valid after this step's write: pos_t == S - 1);
    the new K/V row goes in by index_copy_ (an in-place write inductor keeps in place, as
    transformers' StaticCache does); no context managers, no Python-int positions."""
    B = x.shape[0]
    H, KVH, d, g = s.heads, s.kv_heads, s.head_dim, s.group
    qd, kvd = H * d, KVH * d
    r = rms_norm(x, L["ln1"], s.eps)
    qkv = r @ L["wqkv"].t()
    q = qkv[..., :qd].view(B, 1, H, d).transpose(1, 2)
    k = qkv[..., qd:qd + kvd].view(B, 1, KVH, d).transpose(1, 2)
    v = qkv[..., qd + kvd:].view(B, 1, KVH, d).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    K.index_copy_(2, pos_t, k)
    V.index_copy_(2, pos_t, v)
    qg = q.reshape(B, KVH, g, d)
    if form == "matmul":
        sc = torch.matmul(qg, K.transpose(-1, -2)) * (d ** -0.5)
        o = torch.matmul(torch.softmax(sc.float(), dim=-1).to(qg.dtype), V)
    else:
        o = F.scaled_dot_product_attention(qg, K, V)
    x = x + o.reshape(B, 1, qd) @ L["wo"].t()
    r = rms_norm(x, L["ln2"], s.eps)
    gate, up = (r @ L["wgu"].t()).chunk(2, dim=-1)
    return x + (F.silu(gate) * up) @ L["wd"].t()


def compiled_decode(ref, s, args, ids, pos, caches, cos, sin, b, ctx, scope):
    """torch.compile + CUDA-graph decode loop: the decode step compiled by inductor
    (mode="default": no inductor CUDA graphs, dynamic=False, fullgraph=True), warmed up, then
    the *compiled* step captured by us with torch.cuda.graph and replayed (inductor's own
    cudagraph trees refuse steps that mutate their inputs: the KV writes). scope "model":
    one compiled function for the whole step (32 layers, embedding to logits); "layer": one
    compiled layer called per layer (one compile, reused by every layer; quicker to build,
    no fusion across layer boundaries). Attention: the faster form of ref's graph timing.
    Checked against ref eager on the same inputs (max|diff| / std of the logits, argmax)."""
    import torch._dynamo
    form = ref.decode_attn
    w = ref.w
    pos_t = torch.tensor([pos], dtype=torch.long, device="cuda")
    cos1, sin1 = cos.view(1, 1, 1, -1), sin.view(1, 1, 1, -1)
    row = {"kind": "decode", "impl": "ref_compile", "batch": b, "context": ctx, "scope": scope,
           "attn": form, "mode": "default+cuda.graph"}
    tag = f"ref decode b={b} ctx={ctx} torch.compile({scope}) + CUDA graph"
    if scope == "model":
        def step_fn(ids, pos_t, cos1, sin1):
            x = F.embedding(ids, w["embed"])
            for l in range(s.layers):
                K, V = caches[l]
                x = decode_layer(s, form, x, w["layers"][l], K, V, pos_t, cos1, sin1)
            return rms_norm(x[:, -1], w["norm"], s.eps) @ w["lm_head"].t()
        cstep = torch.compile(step_fn, dynamic=False, fullgraph=True)

        def step():
            return cstep(ids, pos_t, cos1, sin1)
    else:
        def layer_fn(x, L, K, V, pos_t, cos1, sin1):
            return decode_layer(s, form, x, L, K, V, pos_t, cos1, sin1)
        clayer = torch.compile(layer_fn, dynamic=False, fullgraph=True)

        def head_fn(x):
            return rms_norm(x[:, -1], w["norm"], s.eps) @ w["lm_head"].t()
        chead = torch.compile(head_fn, dynamic=False, fullgraph=True)

        def step():
            x = F.embedding(ids, w["embed"])
            for l in range(s.layers):
                K, V = caches[l]
                x = clayer(x, w["layers"][l], K, V, pos_t, cos1, sin1)
            return chead(x)
    try:
        with torch.no_grad():
            t0 = time.time()
            step()  # compiles
            torch.cuda.synchronize()
            row["compile_s"] = time.time() - t0
            st = torch.cuda.Stream()
            st.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(st):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(st)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = step()
            row["capture_s"] = time.time() - t0 - row["compile_s"]
            row["ms"] = event_ms(graph.replay, args.iters, warmup=3)
            graph.replay()
            got = out.float().clone()
            want = ref.forward(ids, pos, caches, cos, sin).float()  # same inputs, same form
            # The scale of legitimate bf16 differences: ref eager with the other attention form
            # (random 8B weights amplify any bf16 rounding difference through 32 layers).
            ref.decode_attn = "matmul" if form == "sdpa" else "sdpa"
            alt = ref.forward(ids, pos, caches, cos, sin).float()
            ref.decode_attn = form
            row["err"] = ((got - want).abs().max() / want.std()).item()
            row["noise"] = ((alt - want).abs().max() / want.std()).item()
            row["argmax_diff_rows"] = int((got.argmax(-1) != want.argmax(-1)).sum().item())
            row["noise_argmax_diff_rows"] = int((alt.argmax(-1) != want.argmax(-1)).sum().item())
            del graph, out
        log(f"{tag}: {row['ms']:.3f} ms ({form}; compiled in {row['compile_s']:.1f} s, captured in "
            f"{row['capture_s']:.1f} s); logits vs ref eager: max|diff|/std {row['err']:.4f}, argmax "
            f"differs in {row['argmax_diff_rows']}/{b} rows; ref's other attention form vs ref (the "
            f"bf16 noise scale): {row['noise']:.4f}, {row['noise_argmax_diff_rows']}/{b} rows")
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        log(f"{tag}: failed: {row['error']}")
    torch._dynamo.reset()
    release()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="configs/llama-3.1-8b/config.json")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--contexts", default="1024,32768")
    ap.add_argument("--prompts", default="8192,32768")
    ap.add_argument("--hf-prompts", default="8192", help="prefill lengths for the hf eager model")
    ap.add_argument("--prefill-reps", type=int, default=2)
    ap.add_argument("--ttft-prefix", type=int, default=50000)
    ap.add_argument("--ttft-new", type=int, default=800)
    ap.add_argument("--ttft-reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20, help="timed graph replays per point")
    ap.add_argument("--points", default="",
                    help="decode points BxCTX,... (e.g. 1x1024,128x1024); default: batches x contexts")
    ap.add_argument("--profile-points", default="",
                    help="decode points BxCTX,... whose ref step is profiled by kernel (torch.profiler)")
    ap.add_argument("--compile", action="store_true",
                    help="also torch.compile + CUDA graph of the decode step per decode point")
    ap.add_argument("--compile-scope", default="model,layer",
                    help="compiled unit(s), tried in order until one works: model (whole step), layer")
    ap.add_argument("--compile-all-scopes", action="store_true", help="time every scope, not the first working")
    ap.add_argument("--compile-min-s", type=float, default=15, help="budget needed to start a compile")
    ap.add_argument("--compile-batches", default="1,8,32,128", help="batch sizes of the compiled decode")
    ap.add_argument("--no-hf", action="store_true", help="skip transformers (random ref weights)")
    ap.add_argument("--budget-s", type=float, default=300, help="skip points once this is spent")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    for k in ("batches", "contexts", "prompts", "hf_prompts", "compile_batches"):
        setattr(args, k, [int(v) for v in getattr(args, k).split(",") if v])
    args.points = [tuple(int(x) for x in p.split("x")) for p in args.points.split(",") if p]
    args.profile_points = [tuple(int(x) for x in p.split("x")) for p in args.profile_points.split(",") if p]
    args.compile_scope = [v for v in args.compile_scope.split(",") if v]
    budget = Budget(args.budget_s)
    t_start = time.time()

    cfg = json.load(open(args.config))
    s = Shape(cfg)
    dev = torch.cuda.get_device_name(0)
    log(f"torch {torch.__version__}, {dev}; config {args.config}: {s.layers} layers, hidden "
        f"{s.hidden}, heads {s.heads}/{s.kv_heads}, vocab {s.vocab}")
    hbm, gemm = measure_hbm_gbs(), measure_gemm_tflops()
    log(f"ceilings (torch, this run): HBM copy {hbm:.0f} GB/s; bf16 GEMM 8192^3 {gemm:.1f} TFLOP/s")
    rows = []
    torch.manual_seed(1)
    hf = None
    if not args.no_hf:
        try:
            import transformers
            from transformers import LlamaConfig, LlamaForCausalLM
            hcfg = LlamaConfig(**{k: v for k, v in cfg.items() if not k.startswith("_")})
            t0 = time.time()
            torch.set_default_dtype(torch.bfloat16)
            with torch.device("cuda"):
                hf = LlamaForCausalLM(hcfg)
            torch.set_default_dtype(torch.float32)
            hf.eval()
            with torch.no_grad():  # our own init: every matrix N(0, 0.02), norms 1 + N(0, 0.1)
                for name, p in hf.named_parameters():
                    if p.dim() == 1:
                        p.copy_(1 + 0.1 * torch.randn_like(p))
                    else:
                        p.normal_(0, 0.02)
            log(f"transformers {transformers.__version__}: LlamaForCausalLM built in "
                f"{time.time() - t0:.1f} s ({sum(p.numel() for p in hf.parameters()) / 1e9:.2f} G params)")
        except Exception as e:
            torch.set_default_dtype(torch.float32)
            log(f"transformers model unavailable ({type(e).__name__}: {str(e)[:200]}): ref only")
            hf = None
    if hf is not None:
        ref = RefLlama(s, ref_weights_from_hf(hf), "cuda")
        try:
            check_against_hf(hf, ref, s, rows)
        except Exception as e:
            log(f"check ref vs hf failed to run: {type(e).__name__}: {str(e)[:300]}")
        try:
            hf_points(hf, s, args, rows, budget)
        except Exception as e:
            log(f"hf points failed: {type(e).__name__}: {str(e)[:300]}")
        # ref keeps plain tensors (shared storage with hf's); dropping hf frees its separate
        # q/k/v and gate/up matrices (ref holds fused copies of them).
        ref.w = {k: (v.detach() if torch.is_tensor(v) else
                     [{kk: vv.detach() for kk, vv in L.items()} for L in v]) for k, v in ref.w.items()}
        del hf
        release()
    else:
        ref = RefLlama(s, random_ref_weights(s, "cuda"), "cuda")
    log(f"ref weights ready; {free_bytes() / 2**30:.1f} GiB free; {time.time() - t_start:.0f} s so far")
    def write_json():  # after every stage: a later stage killed by the job timeout loses nothing
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"device": dev, "torch": torch.__version__, "hbm_gbs": hbm,
                           "gemm_tflops": gemm,
                           "weight_bytes": 2 * (s.linear_params_per_token() + s.vocab * s.hidden),
                           "kv_bytes_per_token": s.kv_bytes_per_token(), "rows": rows}, f, indent=1)
    write_json()
    global ON_POINT
    ON_POINT = write_json
    for stage in (ref_prefill, ref_ttft, ref_decode):
        try:
            stage(ref, s, args, rows, budget)
        except Exception as e:
            log(f"{stage.__name__} failed: {type(e).__name__}: {str(e)[:300]}")
            release()
        write_json()
    log(f"torch peer done in {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
