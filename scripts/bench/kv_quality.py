#!/usr/bin/env python3
"""What each KV cache type costs, rill beside llama.cpp on the same file and text.

    python3 scripts/bench/kv_quality.py -m MODEL -f TEXT [-c 2048] [--chunks 8] [-t 2]

For each engine: a base run with an f32 KV cache (`--kl-divergence-base`; `--base f16` for an f16
one, the default KV of both engines), then one run per KV type against it (`--kl-divergence`): mean KL divergence, ln(PPL/PPL_base), same-top %. llama.cpp
runs as it does by default (Hadamard rotation of Q/K/V when the cache is quantized) and with
LLAMA_ATTN_ROT_DISABLE=1. rill's quantized rows run with and without the rotation, its 4-bit ones without and with
its f16 sinks/window. The base
files are each engine's own, so each engine's KV error is measured against its own f32 cache.
"""
import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORACLE = Path(os.environ.get("RILL_ORACLE_DIR", Path.home() / ".cache/rill-oracle"))


def run(cmd, env=None, stdout_only=False):
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return r.stdout if stdout_only else r.stdout + r.stderr


def llama_kld(log):
    g = lambda pat: float(re.search(pat, log).group(1))
    return {
        "kld": g(r"Mean    KLD:\s*(-?[0-9.]+)"),
        "ln_ppl_ratio": g(r"Mean ln\(PPL\(Q\)/PPL\(base\)\)\s*:\s*(-?[0-9.]+)"),
        "same_top": g(r"Same top p:\s*([0-9.]+)") / 100,
        "ppl": g(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file", required=True)
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rill", default=str(ROOT / "target/release/rill"))
    ap.add_argument("--types", default="f16,q8_0,q4_0")
    ap.add_argument("--base", default="f32", help="KV type of the base run (f32 or f16)")
    a = ap.parse_args()
    work = Path("/tmp/rill-kv-quality")
    work.mkdir(exist_ok=True)
    common = ["-m", a.model, "-t", str(a.threads)]

    # llama.cpp (its rows cached per setting: they do not change with rill)
    cache = work / f"llama_rows_{Path(a.model).name}_{Path(a.file).name}_{a.ctx}_{a.chunks}_{a.types}_{a.base}.json"
    if cache.exists():
        rows = [tuple(r) for r in json.loads(cache.read_text())]
    else:
        rows = llama_rows(a, common, work)
        cache.write_text(json.dumps(rows))
    rill_rows(a, common, work, rows)
    print_rows(a, rows)


def llama_rows(a, common, work):
    rows = []
    ppl = str(ORACLE / "llama-build/bin/llama-perplexity")
    lbase = str(work / f"llama_{a.base}.kld")
    c = ["-c", str(a.ctx), "-b", str(a.ctx)]
    log = run([ppl, *common, *c, "-f", a.file, "--chunks", str(a.chunks), "-ctk", a.base, "-ctv", a.base,
               "--kl-divergence-base", lbase])
    lppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", log).group(1))
    rows.append(("llama.cpp", a.base, {"ppl": lppl}))
    for t in a.types.split(","):
        for rot, env in ([("", {})] if t == "f16" else [("", {}), (" no-rot", {"LLAMA_ATTN_ROT_DISABLE": "1"})]):
            log = run([ppl, *common, *c, "-ctk", t, "-ctv", t, "--kl-divergence-base", lbase,
                       "--kl-divergence"], env)
            rows.append((f"llama.cpp{rot}", t, llama_kld(log)))
    return rows


def rill_rows(a, common, work, rows):
    rbase = str(work / f"rill_{a.base}.kld")
    out = run([a.rill, "perplexity", *common, "-c", str(a.ctx), "-f", a.file, "--chunks", str(a.chunks),
               "-ctk", a.base, "-ctv", a.base, "--kl-divergence-base", rbase, "--json"], stdout_only=True)
    rows.append(("rill", a.base, {"ppl": json.loads(out.strip().splitlines()[-1])["ppl"]}))
    for t in a.types.split(","):
        variants = [("", [])]
        if t in ("q8_0", "q4_0", "q5_1"):
            variants = [("", []), (" no-rot", ["--no-kv-rotation"])]
        if t in ("q4_0", "q5_1"):
            off = ["--kv-sinks", "0", "--kv-window", "0"]
            variants = [(" no sinks/window", off), (" no-rot no sinks/window", off + ["--no-kv-rotation"]),
                        (" + f16 sinks 4 / window 256", [])]
        for tag, extra in variants:
            out = run([a.rill, "perplexity", *common, "-ctk", t, "-ctv", t, *extra,
                       "--kl-divergence-base", rbase, "--kl-divergence", "--json"], stdout_only=True)
            j = json.loads(out.strip().splitlines()[-1])
            rows.append((f"rill{tag}", t, {"kld": j["kld_mean"], "ln_ppl_ratio": j["ln_ppl_ratio"],
                                           "same_top": j["same_top"], "ppl": j["ppl"]}))


def print_rows(a, rows):
    print(f"model {a.model}, text {a.file}, -c {a.ctx}, {a.chunks} windows, {a.threads} threads")
    print(f"{'engine':38} {'KV':6} {'PPL':>10} {'KLD vs ' + a.base + ' KV':>14} {'ln PPL ratio':>13} {'same top':>9}")
    for eng, t, r in rows:
        f = lambda k, fmt: format(r[k], fmt) if k in r else "-"
        print(f"{eng:38} {t:6} {f('ppl', '10.4f')} {f('kld', '14.6f')} {f('ln_ppl_ratio', '13.6f')} "
              f"{f('same_top', '9.4f')}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
