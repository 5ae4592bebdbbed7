#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer folder (tokenizer.json) from a GGUF's byte-level BPE
vocabulary and merges (llama.cpp `gpt2` tokenizer model, as SmolLM2's), for tools such as
aiperf that want an HF tokenizer and cannot download one here.

  gguf_to_hf_tokenizer.py MODEL.gguf OUT_DIR        (needs: pip install gguf tokenizers transformers)
"""
import os
import sys

from gguf import GGUFReader
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def strings(reader, name):
    field = reader.fields[name]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def main():
    gguf_path, out_dir = sys.argv[1], sys.argv[2]
    r = GGUFReader(gguf_path)
    model = bytes(r.fields["tokenizer.ggml.model"].parts[-1]).decode()
    if model != "gpt2":
        sys.exit(f"{gguf_path}: tokenizer model {model!r}; only byte-level BPE ('gpt2') is handled")
    tokens = strings(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings(r, "tokenizer.ggml.merges")]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    os.makedirs(out_dir, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tk).save_pretrained(out_dir)
    print(f"{len(tokens)} tokens, {len(merges)} merges -> {out_dir}")


if __name__ == "__main__":
    main()
