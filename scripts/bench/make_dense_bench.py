#!/usr/bin/env python3
"""A dense `qwen35` benchmark model: Qwen3.5's per-layer geometry without experts, for serving benchmarks.

    scripts/bench/make_dense_bench.py --out DIR [--llama-dir ~/.cache/rill-oracle] [--seed 0]

8 layers (GDN, GDN, GDN, attention, ...), hidden 2048, attention 16/2 heads of 256 (rotary 64, mrope 11/11/10),
GDN 16 key / 32 value heads of 128, dense SwiGLU FF 6144, untied 248,320-token head, random weights drawn as the
fixtures' (`scripts/fixtures/models.py`), with the real Qwen3.5 tokenizer. Writes DIR/hf (transformers layout),
then, with llama.cpp's converter and quantizer from `--llama-dir` (as `../shared/oracle/setup.sh` builds them),
DIR/dense-bf16.gguf and DIR/dense-q4_k_m.gguf. Needs torch, transformers and safetensors (the oracle venv).

Why a dense model: with 256 experts top-8, N concurrent streams read nearly N times the expert weights of
one, so batching gains are bounded by memory bandwidth (see the README); a dense model's weights are read
once per step for every stream, which shows what continuous batching itself delivers.
"""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "fixtures"))
import models  # noqa: E402

EOS, PAD = 248046, 248044  # <|im_end|>, <|endoftext|> in the real tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--llama-dir", type=Path, default=Path.home() / ".cache" / "rill-oracle")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    hf = args.out / "hf"
    p = models.preset("qwen35", vocab=248320, tie=False, hidden_size=2048, num_hidden_layers=8,
                      num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
                      linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
                      intermediate_size=6144,
                      rope_parameters=dict(models.QWEN35_ROPE_TINY, mrope_section=[11, 11, 10]))
    p["res_gain"] = None  # the usual 1/sqrt(2L) on residual outputs (the fixtures' 0.7 is for tied toy models)
    hf.mkdir(parents=True, exist_ok=True)
    from safetensors.torch import save_file
    cfg, sd = models.make_state_dict(p, args.seed)
    save_file(models.to_checkpoint_layout(p, sd), str(hf / "model.safetensors"), metadata={"format": "pt"})
    del sd
    cfg.eos_token_id, cfg.pad_token_id = EOS, PAD
    cfg.save_pretrained(str(hf))
    gen = {"bos_token_id": None, "eos_token_id": [EOS, PAD], "pad_token_id": PAD, "do_sample": False}
    (hf / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    for f in models.TOKENIZER_SRC.iterdir():
        shutil.copy(f, hf / f.name)

    py = args.llama_dir / "venv" / "bin" / "python"
    convert = args.llama_dir / "llama.cpp" / "convert_hf_to_gguf.py"
    quantize = args.llama_dir / "llama-build" / "bin" / "llama-quantize"
    bf16, q4 = args.out / "dense-bf16.gguf", args.out / "dense-q4_k_m.gguf"
    subprocess.run([str(py), str(convert), str(hf), "--outtype", "bf16", "--no-mtp", "--outfile", str(bf16)],
                   check=True)
    subprocess.run([str(quantize), str(bf16), str(q4), "Q4_K_M", "2"], check=True)
    print(q4)


if __name__ == "__main__":
    main()
