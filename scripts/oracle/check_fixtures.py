#!/usr/bin/env python3
"""By-hand check (not CI): run `rill logits` on every committed model fixture and compare with its references.

    python3 scripts/oracle/check_fixtures.py [--rill target/release/rill] [--threads 2]

Per fixture (fixtures/models/manifest.json): the prompt logits (one batch) vs `prompt.logits`, and the greedy
generation replayed token by token (`--one-by-one` over generation.prompt_ids + generation.ids[:-1]) vs
`generation.logits` (last n_gen rows) and the argmax vs generation.ids. Prints rill's max/mean abs errors next to
llama.cpp's and the manifest tolerance. Needs only numpy.
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
FIX = REPO / "fixtures" / "models"


def rill_logits(rill, gguf, ids, out, threads, one_by_one=False):
    cmd = [rill, "logits", "-m", str(gguf), "--tokens", ",".join(map(str, ids)), "--out", str(out),
           "--threads", str(threads)] + (["--one-by-one"] if one_by_one else [])
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return np.load(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    man = json.loads((FIX / "manifest.json").read_text())
    tmp = Path(tempfile.mkdtemp(prefix="rill-fixcheck-"))
    bad = 0
    for f in man["fixtures"]:
        if f["kind"] == "mtp":  # MTP-head fixtures: checked by crates/rill-model/tests/mtp.rs
            continue
        gguf = FIX / f["gguf"]
        ref = np.load(FIX / f["prompt"]["logits"])
        lg = rill_logits(args.rill, gguf, f["prompt"]["ids"], tmp / "p.npy", args.threads)
        V = ref.shape[1]
        d = np.abs(lg[:, :V].astype(np.float64) - ref)
        g = f["generation"]
        seq = g["prompt_ids"] + g["ids"][:-1]
        gl = rill_logits(args.rill, gguf, seq, tmp / "g.npy", args.threads, one_by_one=True)[-g["n_gen"]:, :V]
        gref = np.load(FIX / g["logits"])
        dg = np.abs(gl.astype(np.float64) - gref)
        gen_ok = gl.argmax(1).tolist() == g["ids"]
        tol, ll = f["tolerance"], f["llama_cpp_vs_reference"]
        ok = d.max() <= tol["max_abs"] and d.mean() <= tol.get("mean_abs", np.inf) and gen_ok
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {f['name']:24s} prompt max {d.max():.2e} mean {d.mean():.2e} "
              f"(llama.cpp {ll['prompt_max_abs']:.2e} / {ll['prompt_mean_abs']:.2e}; tol {tol['max_abs']:.1e}) | "
              f"decode max {dg.max():.2e}, greedy ids {'equal' if gen_ok else 'DIFFER'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
