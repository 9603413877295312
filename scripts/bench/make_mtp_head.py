#!/usr/bin/env python3
"""An MTP-only GGUF for a trunk GGUF that has none, to measure what speculation costs on it.

The head's block is a full-attention MoE layer shaped like the trunk's: this copies the trunk's last
full-attention layer (its tensors as stored, quantized or not) as `blk.{n_layer}.*`, adds the head's own
tensors — `nextn.eh_proj` ([2·n_embd → n_embd], random, Q8_0) and the `enorm` / `hnorm` /
`shared_head_norm` RMSNorm weights (ones) — and copies the embeddings, output norm and LM head, the layout
llama.cpp's `convert_hf_to_gguf.py --mtp` writes. Its drafts are meaningless (random head); its cost per
step is the real one, which is what `rill bench --verify-costs -m TRUNK --mtp-model OUT` measures.

    PY=~/.cache/rill-oracle/venv/bin/python
    $PY scripts/bench/make_mtp_head.py /tmp/bench/bench-q4_k_m.gguf /tmp/bench/bench-mtp-only.gguf
"""
import argparse
import sys
from pathlib import Path

import numpy as np

ORACLE = Path.home() / ".cache" / "rill-oracle" / "llama.cpp" / "gguf-py"
sys.path.insert(0, str(ORACLE))
import gguf  # noqa: E402


def field_value(field):
    return field.contents()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trunk")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    r = gguf.GGUFReader(args.trunk)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    n_layer = int(field_value(r.fields[f"{arch}.block_count"]))
    n_embd = int(field_value(r.fields[f"{arch}.embedding_length"]))
    tensors = {t.name: t for t in r.tensors}
    attn = [i for i in range(n_layer) if f"blk.{i}.attn_q.weight" in tensors]
    if not attn:
        sys.exit(f"{args.trunk}: no full-attention layer to shape the head's block on")
    src = attn[-1]
    w = gguf.GGUFWriter(args.out, arch)
    for field in r.fields.values():
        name = field.name
        if name == "general.architecture" or name.startswith("GGUF.") or name.startswith("tokenizer."):
            continue
        vt = field.types[0]
        sub = field.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        value = field_value(field)
        if name == f"{arch}.block_count":
            value = n_layer + 1
        w.add_key_value(name, value, vt, sub_type=sub)
    w.add_key_value(f"{arch}.nextn_predict_layers", 1, gguf.GGUFValueType.UINT32)

    out = []  # (name, data, dtype)
    for t in r.tensors:
        if t.name.startswith(f"blk.{src}."):
            out.append((t.name.replace(f"blk.{src}.", f"blk.{n_layer}.", 1), t.data, t.tensor_type))
        elif t.name in ("token_embd.weight", "output.weight", "output_norm.weight"):
            out.append((t.name, t.data, t.tensor_type))
    rng = np.random.default_rng(args.seed)
    eh = (rng.standard_normal((n_embd, 2 * n_embd)) * 0.02).astype(np.float32)
    out.append((f"blk.{n_layer}.nextn.eh_proj.weight", gguf.quants.quantize(eh, gguf.GGMLQuantizationType.Q8_0),
                gguf.GGMLQuantizationType.Q8_0))
    for norm in ("enorm", "hnorm", "shared_head_norm"):
        out.append((f"blk.{n_layer}.nextn.{norm}.weight", np.ones(n_embd, np.float32), gguf.GGMLQuantizationType.F32))
    for name, data, dtype in out:
        w.add_tensor_info(name, data.shape, data.dtype, data.nbytes, dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, data, dtype in out:
        w.write_tensor_data(data)
    w.close()
    print(f"{args.out}: the head's block from layer {src}, {len(out)} tensors")


if __name__ == "__main__":
    main()
