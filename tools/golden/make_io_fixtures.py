#!/usr/bin/env python3
"""Writes the small io test fixtures under tests/data/io/ with PyPI's `gguf` and `safetensors`
packages (independent writers for src/io's readers), plus an expectations JSON per fixture
holding the values numpy/gguf computed, so the C++ tests compare against this script, not
against themselves.

  python3 tools/golden/make_io_fixtures.py            # rewrites tests/data/io/fixtures/
"""
import json
import os
import struct

import numpy as np
import gguf
from gguf import GGUFValueType as VT
from gguf import GGMLQuantizationType as QT
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "io", "fixtures")
rng = np.random.default_rng(20261130)


def f32_list(a):
    return [float(x) for x in np.asarray(a, dtype=np.float32).reshape(-1)]


# ---------------------------------------------------------------- GGUF
def write_gguf(path, alignment=None):
    w = gguf.GGUFWriter(path, arch="testarch")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    # One key per GGUF value type (13), including arrays and nested arrays.
    w.add_key_value("test.u8", 200, VT.UINT8)
    w.add_key_value("test.i8", -100, VT.INT8)
    w.add_key_value("test.u16", 60000, VT.UINT16)
    w.add_key_value("test.i16", -30000, VT.INT16)
    w.add_key_value("test.u32", 4000000000, VT.UINT32)
    w.add_key_value("test.i32", -2000000000, VT.INT32)
    w.add_key_value("test.f32", 0.1, VT.FLOAT32)
    w.add_key_value("test.bool", True, VT.BOOL)
    w.add_key_value("test.string", "héllo wörld ✓ 你好 🙂", VT.STRING)
    w.add_key_value("test.u64", 2**63 + 12345, VT.UINT64)
    w.add_key_value("test.i64", -(2**62) - 7, VT.INT64)
    w.add_key_value("test.f64", -1.0 / 3.0, VT.FLOAT64)
    w.add_key_value("test.arr_i16", [-3, 7, 32000, -32000, 0], VT.ARRAY, sub_type=VT.INT16)
    w.add_key_value("test.arr_str", ["a", "", "Ġthe", "<|im_end|>"], VT.ARRAY)
    w.add_key_value("test.arr_nested", [[1, 2, 3], [4], [5, 6]], VT.ARRAY)
    w.add_key_value("test.arr_f32", [1.5, -2.25, 3e-5], VT.ARRAY, sub_type=VT.FLOAT32)
    tensors = {}
    # Awkward shapes; row-major numpy shapes (gguf writes ne[] reversed).
    a = rng.standard_normal((3, 5)).astype(np.float32)
    w.add_tensor("t.f32", a)
    tensors["t.f32"] = {"ggml_type": int(QT.F32), "shape": [3, 5], "values": f32_list(a)}
    b = rng.standard_normal((7,)).astype(np.float16)
    w.add_tensor("t.f16", b)
    tensors["t.f16"] = {"ggml_type": int(QT.F16), "shape": [7], "values": f32_list(b)}
    c = rng.standard_normal((3, 64)).astype(np.float32)
    cq = gguf.quants.quantize(c, QT.Q8_0)
    w.add_tensor("t.q8_0", cq, raw_shape=cq.shape, raw_dtype=QT.Q8_0)
    tensors["t.q8_0"] = {"ggml_type": int(QT.Q8_0), "shape": [3, 64],
                         "values": f32_list(gguf.quants.dequantize(cq, QT.Q8_0))}
    d = rng.standard_normal((2, 3, 32)).astype(np.float32)
    dq = gguf.quants.quantize(d, QT.Q4_1) if hasattr(gguf.quants, "quantize") else None
    try:
        w.add_tensor("t.q4_1", dq, raw_shape=dq.shape, raw_dtype=QT.Q4_1)
        tensors["t.q4_1"] = {"ggml_type": int(QT.Q4_1), "shape": [2, 3, 32],
                             "values": f32_list(gguf.quants.dequantize(dq, QT.Q4_1))}
    except (NotImplementedError, gguf.quants.QuantError, AttributeError):
        pass  # this gguf version cannot quantize Q4_1
    e = rng.integers(-2**31, 2**31 - 1, size=(11,), dtype=np.int32)
    w.add_tensor("t.i32", e)
    tensors["t.i32"] = {"ggml_type": int(QT.I32), "shape": [11], "values": [int(x) for x in e]}
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def gguf_expect(path, tensors):
    return {
        "metadata": {
            "general.architecture": {"type": "string", "value": "testarch"},
            "test.u8": {"type": "u8", "value": 200},
            "test.i8": {"type": "i8", "value": -100},
            "test.u16": {"type": "u16", "value": 60000},
            "test.i16": {"type": "i16", "value": -30000},
            "test.u32": {"type": "u32", "value": 4000000000},
            "test.i32": {"type": "i32", "value": -2000000000},
            "test.f32": {"type": "f32", "value": float(np.float32(0.1))},
            "test.bool": {"type": "bool", "value": True},
            "test.string": {"type": "string", "value": "héllo wörld ✓ 你好 🙂"},
            "test.u64": {"type": "u64", "value": 2**63 + 12345},
            "test.i64": {"type": "i64", "value": -(2**62) - 7},
            "test.f64": {"type": "f64", "value": -1.0 / 3.0},
            "test.arr_i16": {"type": "array", "element_type": "i16",
                             "values": [-3, 7, 32000, -32000, 0]},
            "test.arr_str": {"type": "array", "element_type": "string",
                             "values": ["a", "", "Ġthe", "<|im_end|>"]},
            "test.arr_nested": {"type": "array", "element_type": "array",
                                "values": [[1, 2, 3], [4], [5, 6]]},
            "test.arr_f32": {"type": "array", "element_type": "f32",
                             "values": f32_list([1.5, -2.25, 3e-5])},
        },
        "tensors": tensors,
    }


def patch_version(src, dst, version):
    data = bytearray(open(src, "rb").read())
    data[4:8] = struct.pack("<I", version)  # v2 and v3 share the little-endian layout
    open(dst, "wb").write(bytes(data))


# ---------------------------------------------------------------- safetensors
def st_tensors():
    t = {
        "model.embed.weight": rng.standard_normal((13, 7)).astype(np.float32),
        "model.layers.0.w": rng.standard_normal((5, 3, 2)).astype(np.float16),
        "model.layers.0.ids": rng.integers(-2**40, 2**40, size=(9,), dtype=np.int64),
        "model.mask": rng.integers(0, 2, size=(4, 4)).astype(np.bool_),
        "model.bytes": rng.integers(0, 256, size=(6,), dtype=np.uint8),
        "model.scalar": np.array(3.25, dtype=np.float32),
        "model.empty": np.zeros((0, 3), dtype=np.float32),
    }
    return t


def st_expect(tensors):
    out = {}
    for name, a in tensors.items():
        dtype = {np.float32: "F32", np.float16: "F16", np.int64: "I64", np.bool_: "BOOL",
                 np.uint8: "U8"}[a.dtype.type]
        vals = ([int(x) for x in a.reshape(-1)] if a.dtype.kind in "iub"
                else f32_list(a))
        out[name] = {"dtype": dtype, "shape": list(a.shape), "values": vals}
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    expect = {}

    p = os.path.join(OUT, "basic_v3.gguf")
    tensors = write_gguf(p)
    expect["basic_v3.gguf"] = dict(gguf_expect(p, tensors), version=3, alignment=32)
    patch_version(p, os.path.join(OUT, "basic_v2.gguf"), 2)
    expect["basic_v2.gguf"] = dict(expect["basic_v3.gguf"], version=2)
    p = os.path.join(OUT, "align64.gguf")
    tensors = write_gguf(p, alignment=64)
    e = gguf_expect(p, tensors)
    e["metadata"]["general.alignment"] = {"type": "u32", "value": 64}
    expect["align64.gguf"] = dict(e, version=3, alignment=64)

    st = st_tensors()
    save_file(st, os.path.join(OUT, "single.safetensors"),
              metadata={"format": "pt", "note": "ünïcode ✓"})
    expect["single.safetensors"] = {"metadata": {"format": "pt", "note": "ünïcode ✓"},
                                    "tensors": st_expect(st)}

    # Sharded checkpoint: two shards + HF-style index.
    shard_dir = os.path.join(OUT, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    names = sorted(st)
    shards = {"model-00001-of-00002.safetensors": names[:3],
              "model-00002-of-00002.safetensors": names[3:]}
    weight_map = {}
    total = 0
    for fname, ns in shards.items():
        save_file({n: st[n] for n in ns}, os.path.join(shard_dir, fname))
        for n in ns:
            weight_map[n] = fname
            total += st[n].nbytes
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    expect["sharded"] = {"tensors": st_expect(st), "num_shards": 2, "total_size": total}

    with open(os.path.join(OUT, "expect.json"), "w") as f:
        json.dump(expect, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
