#!/usr/bin/env python3
"""A model whose sequence state has the real per-layer geometry of Qwen3.5-35B-A3B and little else, for
issue #16's memory figure: peak RSS of 4 concurrent 64k-token sequences with a q8_0 KV against the weights
plus the KV and GDN bytes those sequences need.

    PY=~/.cache/rill-oracle/venv/bin/python
    $PY scripts/bench/make_kv_rss_model.py /tmp/rill-kv-rss       # -> DIR/hf (a BF16 Hugging Face folder)
    /usr/bin/time -v target/release/rill bench -m DIR/hf -p 0 -n 16 -r 1 -d 65536 --parallel 4 -ctk q8_0 -ctv q8_0

What a sequence holds is the real model's per layer: attention K and V of 2 heads of 256 values, GDN states
of 32 value heads of 128 × 128 (16 key heads, a conv window of 4). The layer pattern is the real 3:1
(GDN GDN GDN ATTN; the 40-layer model has ten such groups, so its state is ten times this one's). What a
token computes is cut down so that 262,144 prefilled tokens take minutes on 2 cores: hidden 256, 2 query
heads (the KV heads; query heads do not change the state), 8 experts top-2 of 64. The weights are a few MB,
so the peak RSS is the state plus what the process needs besides it.
"""
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "fixtures"))
import models  # noqa: E402
from make_hf_bench import write_folder  # noqa: E402


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/rill-kv-rss")
    hf = out / "hf"
    p = models.preset("realdims", hidden_size=256, num_attention_heads=2, num_experts=8, num_experts_per_tok=2,
                      moe_intermediate_size=64, shared_expert_intermediate_size=64,
                      max_position_embeddings=262144)
    write_folder(hf, p, shards=1)
    print(hf)


if __name__ == "__main__":
    main()
