#!/usr/bin/env python3
"""A real-geometry BF16 Hugging Face folder and the BF16 GGUF of the same weights, for the folder-vs-GGUF
benchmark of issue #17 (`rill bench -m DIR` beside `rill bench -m FILE.gguf`).

    PY=~/.cache/rill-oracle/venv/bin/python
    $PY scripts/bench/make_hf_bench.py /tmp/rill-hf-bench      # -> DIR/hf (the folder)
    $PY scripts/fixtures/convert.py DIR/hf --outtype bf16 --no-mtp --outfile DIR/model.bf16.gguf

Geometry: the `realdims` preset of scripts/fixtures/models.py (Qwen3.5-35B-A3B per-layer shapes: hidden 2048,
16/2 attention heads of 256, GDN 16 key / 32 value heads of 128, 64 experts top-8 of FF 512 + shared 512;
4 layers GDN GDN GDN ATTN, vocabulary 2048), 0.8 B parameters, 1.6 GB in BF16.
"""
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures"))
import models  # noqa: E402


def write_folder(hf, p, shards=2):
    """Preset `p`'s random weights as a BF16 Hugging Face folder in `hf`, in `shards` safetensors files (as
    releases ship them), with its config, a small tokenizer and a generation config."""
    hf.mkdir(parents=True, exist_ok=True)
    cfg, shapes = models.hf_param_shapes(p)
    from safetensors.torch import save_file
    names = sorted(shapes)
    weight_map = {}
    for k in range(shards):
        fn = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = names[k * len(names) // shards:(k + 1) * len(names) // shards]
        tensors = {n: models.gen_tensor(n, shapes[n], p, 0).to(torch.bfloat16).contiguous() for n in part}
        save_file(tensors, str(hf / fn), metadata={"format": "pt"})
        weight_map.update({n: fn for n in part})
        del tensors
    (hf / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cfg.dtype = "bfloat16"
    cfg.save_pretrained(str(hf))
    models.write_small_tokenizer(hf, p["vocab"])
    (hf / "generation_config.json").write_text(json.dumps({"eos_token_id": p["vocab"] - 1}))


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rill-hf-bench")
    hf = out / "hf"
    write_folder(hf, models.preset("realdims"))
    print(hf)


if __name__ == "__main__":
    main()
