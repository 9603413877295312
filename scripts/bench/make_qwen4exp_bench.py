#!/usr/bin/env python3
"""A qwen4exp GGUF with the real layer geometry of Qwen3.8-Flash-Next, 8 layers, random weights, for
benchmarks side by side with llama.cpp (both engines run the same file).

Written straight as a GGUF (F16 matrices, F32 vectors), one tensor at a time, with the metadata keys and
tensor names of llama.cpp's converter (taken from the committed fixture `fixtures/models/qwen4exp.f32.gguf`),
then `llama-quantize` makes the Q4_K_M.

Geometry (wave2.md §C.5): hidden 2560, 4 streams of rank 320, 24/2 attention heads of 256 (rotary 64,
mrope 11/11/10), GDN 16 key / 48 value heads of 128, experts top-10 of FF 640 plus a shared expert of 640,
the indexer 4 heads × 128 with a budget of 2048 tokens in blocks of 4, PLE on layer 1 (3-grams, 16 heads
of 160 values: the real row size), vocabulary 248,320 (the token list is the fixture's 512 tokens padded,
which is all a benchmark of random ids needs). Two things are smaller than the real model, neither of
which changes what a token reads: 64 experts instead of 512 (a token reads 10 of them either way), and
an n-gram table of 16 × ~125k rows instead of 16 × 20M (a token reads one row per head).

    PY=~/.cache/rill-oracle/venv/bin/python
    $PY scripts/bench/make_qwen4exp_bench.py --out /tmp/bench/qwen4exp-f16.gguf
    ~/.cache/rill-oracle/llama-build/bin/llama-quantize /tmp/bench/qwen4exp-f16.gguf /tmp/bench/qwen4exp-q4_k_m.gguf Q4_K_M 2
"""
import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
ORACLE = Path(os.environ.get("RILL_ORACLE_DIR", Path.home() / ".cache" / "rill-oracle"))
sys.path.insert(0, str(ORACLE / "llama.cpp" / "gguf-py"))
import gguf  # noqa: E402

H, S, R = 2560, 4, 320
NH, NKV, HD, NROT = 24, 2, 256, 64
NK, NV, DK = 16, 48, 128
E, TOPK, FF, SFF = 64, 10, 640, 640
NIDX, DIDX, BUDGET, RATIO = 4, 128, 2048, 4
V = 248320
LAYERS = 8
PLE_LAYER, NGRAM, HPN, ROW = 1, 3, 8, 160
PLE_BASE = 125_000
CONV_DIM = 2 * NK * DK + NV * DK


def is_prime(v):
    if v < 2 or v % 2 == 0:
        return v == 2
    return all(v % d for d in range(3, math.isqrt(v) + 1, 2))


def ple_constants():
    """Hash constants as transformers' Qwen4ExpTextNGramEmbedding derives them (layer 0 of the PLE list)."""
    mask = (1 << 64) - 1

    def splitmix(x):
        x = (x + 0x9E3779B97F4A7C15) & mask
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        return (x ^ (x >> 31)) & mask

    half = max(1, ((1 << 63) - 1) // V // 2)
    mult = [2 * (splitmix((1234 + 0x9E3779B97F4A7C15 * (i + 1)) & mask) % half) + 1 for i in range(NGRAM)]
    sizes, offsets, total, p = [], [], 0, PLE_BASE - 1
    for _ in range((NGRAM - 1) * HPN):
        p += 1
        while not is_prime(p):
            p += 1
        sizes.append(p)
        offsets.append(total)
        total += p
    rows = (total + 127) // 128 * 128
    return mult, offsets, sizes, rows


def tensors(ple_rows):
    """(name, ggml shape, init std or a rule) in the converter's order."""
    out = [("token_embd.weight", [H, V], 1.0), ("output.weight", [H, V], 2.5 / math.sqrt(H)),
           ("output_hc_norm.weight", [S * H], "norm"), ("output_hc_down.weight", [S * H, R], None),
           ("output_hc_up.weight", [R, S * H], None)]
    res = 1.0 / math.sqrt(2 * LAYERS)
    for il in range(LAYERS):
        p = f"blk.{il}"
        for mix in ("hc_attn", "hc_ffn"):
            out += [(f"{p}.{mix}_norm.weight", [S * H], "norm"), (f"{p}.{mix}_down.weight", [S * H, R], None),
                    (f"{p}.{mix}_up.weight", [R, S * H], None), (f"{p}.{mix}_inject.weight", [S * H, S], None)]
        if (il + 1) % 4:
            out += [(f"{p}.ssm_a", [NV], "ssm_a"), (f"{p}.ssm_conv1d.weight", [4, CONV_DIM], "conv"),
                    (f"{p}.ssm_dt.bias", [NV], "dt"), (f"{p}.ssm_alpha.weight", [H, NV], 0.5 / math.sqrt(H)),
                    (f"{p}.ssm_beta.weight", [H, NV], None), (f"{p}.attn_qkv.weight", [H, CONV_DIM], None),
                    (f"{p}.attn_gate.weight", [H, NV * DK], None), (f"{p}.ssm_norm.weight", [DK], "one"),
                    (f"{p}.ssm_out.weight", [NV * DK, H], res / math.sqrt(NV * DK))]
        else:
            out += [(f"{p}.attn_q.weight", [H, 2 * NH * HD], None), (f"{p}.attn_k.weight", [H, NKV * HD], None),
                    (f"{p}.attn_v.weight", [H, NKV * HD], None),
                    (f"{p}.attn_output.weight", [NH * HD, H], res / math.sqrt(NH * HD)),
                    (f"{p}.attn_q_norm.weight", [HD], "norm"), (f"{p}.attn_k_norm.weight", [HD], "norm"),
                    (f"{p}.indexer.q_proj.weight", [H, NIDX * DIDX], None),
                    (f"{p}.indexer.k_proj.weight", [H, DIDX], None),
                    (f"{p}.indexer.q_norm.weight", [DIDX], "norm"), (f"{p}.indexer.k_norm.weight", [DIDX], "norm")]
        if il == PLE_LAYER:
            ple = (NGRAM - 1) * HPN * ROW
            out += [(f"{p}.ple_conv1d.weight", [4, S * H], "conv"), (f"{p}.ple_key.weight", [ple, S * H], None),
                    (f"{p}.ple_norm_conv.weight", [S * H], "norm"), (f"{p}.ple_norm_key.weight", [S * H], "norm"),
                    (f"{p}.ple_norm_query.weight", [S * H], "norm"), ("per_layer_token_embd.weight", [ROW, ple_rows], 1.0),
                    (f"{p}.ple_value.weight", [ple, H], None)]
        out += [(f"{p}.ffn_gate_inp.weight", [H, E], None), (f"{p}.ffn_gate_exps.weight", [H, FF, E], None),
                (f"{p}.ffn_up_exps.weight", [H, FF, E], None),
                (f"{p}.ffn_down_exps.weight", [FF, H, E], res / math.sqrt(FF)),
                (f"{p}.ffn_gate_inp_shexp.weight", [H, 1], None), (f"{p}.ffn_gate_shexp.weight", [H, SFF], None),
                (f"{p}.ffn_up_shexp.weight", [H, SFF], None),
                (f"{p}.ffn_down_shexp.weight", [SFF, H], res / math.sqrt(SFF))]
    return out


def values(name, shape, rule, rng):
    """The tensor as numpy (C order: reversed ggml shape)."""
    np_shape = tuple(reversed(shape))
    if rule == "norm":
        return (1.0 + 0.1 * rng.standard_normal(np_shape)).astype(np.float32)
    if rule == "one":
        return (1.0 + 0.1 * rng.standard_normal(np_shape)).astype(np.float32)
    if rule == "conv":  # F32, as the converter writes convolutions
        return (0.5 * rng.standard_normal(np_shape)).astype(np.float32)
    if rule == "ssm_a":
        return (-rng.uniform(1.0, 16.0, np_shape)).astype(np.float32)
    if rule == "dt":
        dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), np_shape))
        return (dt + np.log(-np.expm1(-dt))).astype(np.float32)
    std = rule if rule is not None else 1.0 / math.sqrt(shape[0])
    a = rng.standard_normal(np_shape, dtype=np.float32)
    a *= std
    return a.astype(np.float16) if len(shape) >= 2 and shape[1] > 1 else a.astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/bench/qwen4exp-f16.gguf")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    tmpl = gguf.GGUFReader(str(REPO / "fixtures" / "models" / "qwen4exp.f32.gguf"))
    mult, offsets, sizes, ple_rows = ple_constants()
    over = {
        "block_count": LAYERS, "context_length": 262144, "embedding_length": H, "attention.head_count": NH,
        "attention.head_count_kv": NKV, "rope.dimension_sections": [11, 11, 10, 0], "expert_count": E,
        "expert_used_count": TOPK, "attention.key_length": HD, "attention.value_length": HD,
        "expert_feed_forward_length": FF, "expert_shared_feed_forward_length": SFF, "ssm.state_size": DK,
        "ssm.group_count": NK, "ssm.time_step_rank": NV, "ssm.inner_size": NV * DK,
        "attention.recurrent_layers": [bool((i + 1) % 4) for i in range(LAYERS)], "rope.dimension_count": NROT,
        "hyper_connection.low_rank": R, "attention.indexer.key_length": DIDX, "attention.indexer.top_k": BUDGET,
        "attention.compress_ratios": [0 if (i + 1) % 4 else RATIO for i in range(LAYERS)],
        "ple.layers": [PLE_LAYER], "embedding_length_per_layer_input": ROW, "ple.layer_multipliers": mult,
        "ple.head_offsets": offsets, "ple.head_vocab_sizes": sizes, "general.file_type": 1,
        "general.name": "qwen4exp-bench (random, 8 layers, real geometry)",
    }
    w = gguf.GGUFWriter(a.out, "qwen4exp")
    for key, f in tmpl.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        short = key[len("qwen4exp."):] if key.startswith("qwen4exp.") else key
        vt = gguf.GGUFValueType(f.types[0])
        sub = gguf.GGUFValueType(f.types[1]) if vt == gguf.GGUFValueType.ARRAY else None
        val = over.get(short, f.contents())
        if key == "tokenizer.ggml.tokens":
            val = list(val) + [f"[PAD{i}]" for i in range(len(val), V)]
        if key == "tokenizer.ggml.token_type":
            val = list(val) + [gguf.TokenType.USER_DEFINED] * (V - len(val))
        w.add_key_value(key, val, vt, sub)
    rng = np.random.default_rng(a.seed)
    specs = tensors(ple_rows)
    for name, shape, rule in specs:
        f16 = rule not in ("norm", "one", "ssm_a", "dt", "conv") and len(shape) >= 2 and shape[1] > 1
        dt = np.float16 if f16 else np.float32
        n = int(np.prod(shape))
        w.add_tensor_info(name, list(reversed(shape)), np.dtype(dt), n * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    total = 0
    for i, (name, shape, rule) in enumerate(specs):
        t = values(name, shape, rule, rng)
        w.write_tensor_data(t)
        total += t.nbytes
        print(f"[{i + 1}/{len(specs)}] {name} {shape} {t.dtype} ({total / 2**30:.2f} GiB)", file=sys.stderr, flush=True)
    w.close()
    print(f"wrote {a.out}: {total / 2**30:.2f} GiB", file=sys.stderr)


if __name__ == "__main__":
    main()
