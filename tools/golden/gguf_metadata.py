#!/usr/bin/env python3
"""Dump a GGUF file's metadata and tensor table as JSON, using PyPI's `gguf` package as the
independent oracle for src/io/gguf.cpp (tests/unit/io/gguf_model_test.cpp compares them).

Arrays longer than --max-array are summarised: length plus the first and last few entries.
Shapes are written ROW-MAJOR (reverse of GGUF's ne[]), offsets relative to the data section.

  python3 tools/golden/gguf_metadata.py models/SmolLM2-135M-Instruct.Q4_1.gguf \
      > tests/data/io/smollm2_135m_q4_1.metadata.json
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType

TYPE_NAMES = {
    GGUFValueType.UINT8: "u8", GGUFValueType.INT8: "i8", GGUFValueType.UINT16: "u16",
    GGUFValueType.INT16: "i16", GGUFValueType.UINT32: "u32", GGUFValueType.INT32: "i32",
    GGUFValueType.FLOAT32: "f32", GGUFValueType.BOOL: "bool", GGUFValueType.STRING: "string",
    GGUFValueType.ARRAY: "array", GGUFValueType.UINT64: "u64", GGUFValueType.INT64: "i64",
    GGUFValueType.FLOAT64: "f64",
}


def scalar(v, t):
    if t == GGUFValueType.STRING:
        return bytes(v).decode("utf-8")
    if t == GGUFValueType.BOOL:
        return bool(v[0])
    if t in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64):
        return float(v[0])  # the f32 value widened exactly to f64
    return int(v[0])


def field_json(field, max_array):
    t = field.types[0]
    if t != GGUFValueType.ARRAY:
        return {"type": TYPE_NAMES[t], "value": scalar(field.parts[field.data[0]], t)}
    if len(field.types) > 2 and field.types[1] == GGUFValueType.ARRAY:
        # Nested arrays: the reader exposes no per-element structure we rely on; record length.
        return {"type": "array", "element_type": "array", "length": len(field.data)}
    et = field.types[1]
    items = [scalar(field.parts[i], et) for i in field.data]
    out = {"type": "array", "element_type": TYPE_NAMES[et], "length": len(items)}
    if len(items) <= max_array:
        out["values"] = items
    else:
        out["head"] = items[:8]
        out["tail"] = items[-4:]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--max-array", type=int, default=16)
    args = ap.parse_args()
    r = GGUFReader(args.path)
    meta = {}
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's pseudo-fields for the header
        meta[key] = field_json(field, args.max_array)
    version = int(r.fields["GGUF.version"].parts[-1][0])
    alignment = int(meta["general.alignment"]["value"]) if "general.alignment" in meta else 32
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "ggml_type": int(t.tensor_type),
            "shape": [int(x) for x in reversed(list(t.shape))],
            "offset": int(t.data_offset - r.data_offset),
            "nbytes": int(t.n_bytes),
        })
    json.dump({
        "file": os.path.basename(args.path),
        "version": version,
        "alignment": alignment,
        "data_offset": int(r.data_offset),
        "metadata": meta,
        "tensors": tensors,
    }, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
