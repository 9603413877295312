#!/usr/bin/env python3
"""FP8 and NVFP4 versions of a BF16 Hugging Face folder, laid out as the releases ship them, for issue #17's
folder benchmarks (`rill bench -m DIR` beside `rill bench -m FILE.gguf` on the same weights).

    PY=~/.cache/rill-oracle/venv/bin/python
    $PY scripts/bench/make_hf_quant_bench.py BF16_DIR OUT_DIR fp8        # Qwen's FP8 layout
    $PY scripts/bench/make_hf_quant_bench.py BF16_DIR OUT_DIR nvfp4      # ModelOpt NVFP4

BF16_DIR is e.g. the `make_model.py --preset bench` folder (8 layers of the 35B-A3B geometry). Quantized, as in
the releases: every 2-D linear of the language layers (q/k/v/o, in_proj_qkv, in_proj_z, out_proj, the shared
expert and every routed expert, written per expert: `mlp.experts.{e}.{gate,up,down}_proj.weight`). Kept BF16:
embeddings, LM head, norms, conv1d, A_log, dt_bias, in_proj_a/b, routers, shared_expert_gate, the vision tower.

- fp8: `X.weight` F8_E4M3 + `X.weight_scale_inv` BF16 per 128 x 128 tile (`weight_block_size [128, 128]`).
- nvfp4: `X.weight` U8 (two E2M1 codes a byte, low nibble first) + `X.weight_scale` F8_E4M3 per 16 values +
  `X.weight_scale_2` F32 + `X.input_scale` (ModelOpt, `hf_quant_config.json`).
The quantizers are the fixture script's (scripts/fixtures/make_hf_quant_fixtures.py), vectorized.
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

QUANTIZED = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "in_proj_qkv.weight",
             "in_proj_z.weight", "out_proj.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight")
TILE = 128
E2M1_MID = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def fp8_block(w):
    """(codes F8_E4M3, scale_inv BF16 [ceil(o/128), ceil(i/128)])."""
    o, i = w.shape
    to, tc = -(-o // TILE), -(-i // TILE)
    pad = torch.zeros(to * TILE, tc * TILE)
    pad[:o, :i] = w
    amax = pad.reshape(to, TILE, tc, TILE).abs().amax(dim=(1, 3))
    s = (amax.clamp(min=1e-12) / 448.0).to(torch.bfloat16)
    full = s.float().repeat_interleave(TILE, 0)[:o].repeat_interleave(TILE, 1)[:, :i]
    q = (w / full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return q, s


def nvfp4(w):
    """(packed U8 [o, i/2], scales F8_E4M3 [o, i/16], weight_scale_2 F32)."""
    o, i = w.shape
    g = (w.abs().max().clamp(min=1e-12) / (448.0 * 6.0)).float()
    groups = w.reshape(o, i // 16, 16)
    s = (groups.abs().amax(-1) / 6.0 / g).clamp(max=448).to(torch.float8_e4m3fn)
    denom = (s.float() * g).unsqueeze(-1)
    x = torch.where(denom > 0, groups / denom, torch.zeros_like(groups)).reshape(o, i)
    mag = torch.bucketize(x.abs(), E2M1_MID)
    codes = mag | ((x < 0) & (mag > 0)).to(torch.int64) << 3
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return packed, s, g.reshape(())


def quantize_into(out, name, w, fmt):
    base = name[: -len(".weight")]
    w = w.float()
    if fmt == "fp8":
        q, s = fp8_block(w)
        out[name], out[f"{base}.weight_scale_inv"] = q, s
    else:
        packed, s, g = nvfp4(w)
        out[name], out[f"{base}.weight_scale"], out[f"{base}.weight_scale_2"] = packed, s, g
        out[f"{base}.input_scale"] = torch.tensor(1.0)


def convert_shard(path, fmt):
    out = {}
    with safe_open(str(path), "pt") as f:
        for n in f.keys():
            t = f.get_tensor(n)
            lang = ".language_model." in n
            if lang and n.endswith("mlp.experts.gate_up_proj"):
                e, two_i, _ = t.shape
                p = n[: -len("gate_up_proj")]
                for k in range(e):
                    quantize_into(out, f"{p}{k}.gate_proj.weight", t[k, : two_i // 2], fmt)
                    quantize_into(out, f"{p}{k}.up_proj.weight", t[k, two_i // 2:], fmt)
            elif lang and n.endswith("mlp.experts.down_proj"):
                p = n[: -len("down_proj")]
                for k in range(t.shape[0]):
                    quantize_into(out, f"{p}{k}.down_proj.weight", t[k], fmt)
            elif lang and n.endswith(QUANTIZED) and t.dim() == 2:
                quantize_into(out, n, t, fmt)
            else:
                out[n] = t
    return out


def main():
    src, dst, fmt = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    assert fmt in ("fp8", "nvfp4"), "format: fp8 or nvfp4"
    torch.set_num_threads(2)
    dst.mkdir(parents=True, exist_ok=True)
    index = json.loads((src / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    weight_map = {}
    for k, shard in enumerate(shards):
        tensors = convert_shard(src / shard, fmt)
        save_file({n: v.contiguous() for n, v in tensors.items()}, str(dst / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in tensors})
        log(f"[{fmt}] {k + 1}/{len(shards)} {shard}: {len(tensors)} tensors")
        del tensors
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    for f in src.iterdir():
        if f.suffix != ".safetensors" and f.name not in ("model.safetensors.index.json", "config.json"):
            shutil.copy(f, dst / f.name)
    config = json.loads((src / "config.json").read_text())
    if fmt == "fp8":
        config["quantization_config"] = {
            "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
            "weight_block_size": [TILE, TILE],
            "modules_to_not_convert": ["lm_head", "model.visual", "mlp.gate", "shared_expert_gate",
                                       "in_proj_a", "in_proj_b"]}
    else:
        exclude = ["lm_head", "model.visual*", "*mlp.gate", "*shared_expert_gate", "*in_proj_a", "*in_proj_b"]
        config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                                         "exclude_modules": exclude}
        (dst / "hf_quant_config.json").write_text(json.dumps(
            {"producer": {"name": "modelopt", "version": "0.33"},
             "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": exclude}}, indent=2))
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    size = sum(f.stat().st_size for f in dst.glob("*.safetensors"))
    log(f"[{fmt}] {dst}: {size / 1e9:.2f} GB of weights")


if __name__ == "__main__":
    main()
