#!/usr/bin/env python3
"""By-hand check (not CI): rill vs transformers vs llama.cpp on the same model.

Given an HF checkpoint (--hf DIR) or a preset to generate (--preset, see scripts/fixtures/models.py: qwen35moe,
qwen35, qwen3next, qwen35moe_wide, realdims = the real Qwen3.5-35B-A3B layer geometry with 4 layers), it
  1. converts it to an F32 GGUF with llama.cpp's converter (scripts/fixtures/convert.py wrapper, --no-mtp),
     or takes --gguf FILE as given;
  2. optionally quantizes it (--quant Q4_K_M,Q8_0,...) with llama-quantize;
  3. runs `rill logits -m FILE.gguf --tokens ID,ID,... --out OUT.npy` (float32 npy [n_tokens, n_vocab]),
     llama.cpp (llama_oracle harness, f32 KV cache, flash attention off) and transformers (float32);
  4. prints max / mean |logit error| of rill and of llama.cpp against transformers; for a quantized file against
     the "exact model" (transformers on that file's weights dequantized to f32, mapped back to HF with
     scripts/fixtures/gguf_inverse.py) and, for information, against the original F32 model.

Usage (from the repo root, with the oracle venv: PY=~/.cache/rill-oracle/venv/bin/python):
    cargo build --release
    $PY scripts/oracle/compare_rill.py --preset qwen35moe
    $PY scripts/oracle/compare_rill.py --preset realdims --experts 64 --quant Q4_K_M,Q8_0 --n-tokens 64
    $PY scripts/oracle/compare_rill.py --hf /path/to/hf-dir --rill target/release/rill --json out.json
Options --layers / --experts / --vocab override a preset's size; --no-llama / --no-rill skip a side.
Memory: realdims with 64 experts is ~3.3 GB of f32 weights; HF, the exact model and llama.cpp each hold a copy.
Measured 2026-11-29 (rill build of that day, 2 threads): `--preset realdims --experts 16 --quant Q4_K_M
--n-tokens 32` peaks at 3.7 GB RSS, 90 s: F32 rill 7.4e-6 / llama.cpp 6.2e-6 max vs transformers; Q4_K_M rill
7.6e-6 / llama.cpp 0.23 max vs the exact model. The small presets and all five quant types on qwen35moe_wide
gave rill <= 5.2e-5 (dense) and <= 7.6e-6 (MoE) max.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts" / "fixtures"))
import models  # noqa: E402
import gguf_inverse as gi  # noqa: E402

ORACLE_DIR = Path(os.environ.get("RILL_ORACLE_DIR", Path.home() / ".cache" / "rill-oracle"))
sys.path.insert(0, str(REPO / "scripts" / "fixtures"))
from make_model_fixtures import LLAMA_ORACLE, build_harness  # noqa: E402  (scripts/oracle/llama_oracle.cpp)
LLAMA_QUANTIZE = ORACLE_DIR / "llama-build" / "bin" / "llama-quantize"
CAUSAL = {"qwen3_5_moe": "Qwen3_5MoeForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
          "qwen3_5": "Qwen3_5ForCausalLM", "qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_next": "Qwen3NextForCausalLM"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def errs(a, b):
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return {"max_abs": float(d.max()), "mean_abs": float(d.mean()),
            "argmax_equal": f"{int((a.argmax(-1) == b.argmax(-1)).sum())}/{a.shape[0]}"}


def run(cmd, **kw):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed (rc {r.returncode}):\n{r.stderr[-3000:]}")
    return r


def run_rill(rill, gguf, ids, work, threads):
    out = work / f"{Path(gguf).stem}.rill.npy"
    if out.exists():
        out.unlink()
    t0 = time.time()
    cmd = [rill, "logits", "-m", gguf, "--tokens", ",".join(str(i) for i in ids), "--out", out, "--threads", threads]
    run(cmd)
    a = np.load(out)
    if a.dtype != np.float32 or a.ndim != 2 or a.shape[0] != len(ids):
        raise RuntimeError(f"rill logits: expected float32 [{len(ids)}, n_vocab], got {a.dtype} {a.shape}")
    return a, time.time() - t0


def run_llama(gguf, ids, work, threads):
    prefix = str(work / f"{Path(gguf).stem}.llama")
    env = dict(os.environ, ORACLE_KV_F32="1", ORACLE_FA_OFF="1", ORACLE_NO_REPACK="1")
    t0 = time.time()
    r = run([LLAMA_ORACLE, gguf, prefix, 1, threads] + list(ids), env=env)
    lines = dict((l.split(" ", 1) + [""])[:2] for l in r.stdout.strip().splitlines())
    nv = int(lines["N_VOCAB"])
    return np.fromfile(prefix + ".prompt_logits.f32", dtype=np.float32).reshape(len(ids), nv), time.time() - t0


def text_config(hf_dir):
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(hf_dir)
    return getattr(cfg, "text_config", None) or cfg


@torch.no_grad()
def hf_logits_dir(hf_dir, ids):
    import transformers
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(hf_dir)
    cls = getattr(transformers, cfg.architectures[0])
    model = cls.from_pretrained(hf_dir, dtype=torch.float32).eval()
    lg = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    del model
    return lg


@torch.no_grad()
def hf_logits_exact(gguf, tcfg, ids):
    """transformers on the file's own weights (dequantized to f32, mapped back to HF)."""
    import transformers
    T, _ = gi.read_gguf(gguf)
    sd = gi.gguf_to_hf(T, tcfg)
    del T
    cls = getattr(transformers, CAUSAL[tcfg.model_type])
    with torch.device("meta"):
        model = cls(tcfg)
    if "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    model.load_state_dict(sd, strict=False, assign=True)
    missing = [k for k, v in model.state_dict().items() if v.is_meta]
    if missing:
        raise RuntimeError(f"exact model: parameters not set: {missing[:5]}")
    # non-persistent buffers (rotary inv_freq) were created on meta: rebuild those modules on the CPU
    for name, mod in list(model.named_modules()):
        if any(b.is_meta for b in mod.buffers(recurse=False)):
            parent = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
            setattr(parent, name.rsplit(".", 1)[-1], type(mod)(config=mod.config))
    left = [n for n, b in model.named_buffers() if b.is_meta]
    if left:
        raise RuntimeError(f"exact model: buffers still on meta: {left[:5]}")
    model.eval()
    lg = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    del model, sd
    return lg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", help="HF checkpoint dir (qwen3_5_moe[_text], qwen3_5[_text], qwen3_next)")
    src.add_argument("--preset", choices=sorted(models.PRESETS), help="generate a random model first")
    ap.add_argument("--layers", type=int)
    ap.add_argument("--experts", type=int)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", help="use this F32 GGUF of the model instead of converting")
    ap.add_argument("--quant", default="", help="comma list of llama-quantize types, e.g. Q4_K_M,Q8_0,IQ4_XS")
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("--n-tokens", type=int, default=64, help="random prompt length (ids drawn from the vocab)")
    ap.add_argument("--ids", help="comma-separated prompt ids (instead of random ones)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", default=None, help="work dir (default: a temp dir)")
    ap.add_argument("--no-llama", action="store_true")
    ap.add_argument("--no-rill", action="store_true")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if not args.no_llama:
        build_harness()
    work = Path(args.work or tempfile.mkdtemp(prefix="rill-compare-"))
    work.mkdir(parents=True, exist_ok=True)

    if args.preset:
        over = {"num_hidden_layers": args.layers, "num_experts": args.experts}
        if args.vocab:
            over["vocab"] = args.vocab
        p = models.preset(args.preset, **over)
        if args.layers and not p.get("layers") is None:
            p["layers"] = None
        hf_dir = work / f"{args.preset}-hf"
        t0 = time.time()
        models.write_hf_dir(p, hf_dir, args.seed)
        log(f"generated {args.preset} in {time.time()-t0:.1f}s -> {hf_dir}")
    else:
        hf_dir = Path(args.hf)
    tcfg = text_config(hf_dir)
    V = tcfg.vocab_size

    if args.gguf:
        f32 = Path(args.gguf)
    else:
        f32 = work / "model.f32.gguf"
        t0 = time.time()
        run([sys.executable, REPO / "scripts" / "fixtures" / "convert.py", hf_dir, "--outtype", "f32", "--no-mtp",
             "--outfile", f32])
        log(f"converted in {time.time()-t0:.1f}s -> {f32}")
    files = [("F32", f32)]
    for qt in [q for q in args.quant.split(",") if q]:
        q = work / f"model.{qt.lower()}.gguf"
        run([LLAMA_QUANTIZE, f32, q, qt, args.threads])
        files.append((qt, q))

    if args.ids:
        ids = [int(x) for x in args.ids.split(",")]
    else:
        rng = np.random.default_rng([args.seed, zlib.crc32(b"compare_rill")])
        ids = [int(x) for x in rng.integers(0, V, size=args.n_tokens)]

    t0 = time.time()
    ref = hf_logits_dir(hf_dir, ids)[:, :V]
    log(f"transformers (f32) in {time.time()-t0:.1f}s; logits std {ref.std():.3f}")
    results = {"hf_dir": str(hf_dir), "n_tokens": len(ids), "ids": ids, "files": {}}
    rows = []
    for qt, g in files:
        r = {"gguf": str(g)}
        exact = ref if qt == "F32" else hf_logits_exact(g, tcfg, ids)[:, :V]
        if qt != "F32":
            r["exact_vs_hf"] = errs(exact, ref)
        if not args.no_rill:
            try:
                lg, t = run_rill(args.rill, g, ids, work, args.threads)
                r["rill"] = errs(lg[:, :V], exact) | {"time_s": round(t, 2)}
                if qt != "F32":
                    r["rill_vs_hf"] = errs(lg[:, :V], ref)
            except Exception as e:  # keep going: the other side's figures are still useful
                r["rill_error"] = str(e)[-2000:]
        if not args.no_llama:
            lg, t = run_llama(g, ids, work, args.threads)
            r["llama_cpp"] = errs(lg[:, :V], exact) | {"time_s": round(t, 2)}
            if qt != "F32":
                r["llama_cpp_vs_hf"] = errs(lg[:, :V], ref)
        results["files"][qt] = r
        ref_name = "transformers" if qt == "F32" else "exact model"
        for side in ("rill", "llama_cpp"):
            if side in r:
                rows.append(f"{qt:8s} {side:9s} vs {ref_name:12s}: max {r[side]['max_abs']:.3e}  mean "
                            f"{r[side]['mean_abs']:.3e}  argmax {r[side]['argmax_equal']}")
        if "rill_error" in r:
            rows.append(f"{qt:8s} rill      FAILED: {r['rill_error'].strip().splitlines()[-1] if r['rill_error'].strip() else ''}")
    print("\n".join(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
