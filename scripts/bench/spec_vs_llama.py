#!/usr/bin/env python3
"""MTP speculative decoding beside llama.cpp's (`--spec-type draft-mtp`), same file, same threads.

For each prompt: llama-server's greedy completion with and without its MTP drafting (tokens, tok/s,
drafted and accepted), and `rill run` with `--spec mtp` and `--spec off` (tokens, tok/s, drafted and
accepted). Prints a table and, with --fixture, writes llama.cpp's greedy tokens with drafting so that
a test can hold rill's speculative greedy output to them.

    python3 scripts/bench/spec_vs_llama.py [--model assets/demo/rill-demo.gguf] [--threads 2] [-n 128]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LLAMA = Path(os.environ.get("RILL_ORACLE_DIR", Path.home() / ".cache" / "rill-oracle")) / "llama-build" / "bin"
PROMPTS = [
    "<|im_start|>user\nTell me about the os module.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat does os.path.join do?<|im_end|>\n<|im_start|>assistant\n",
    "The json module",
]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def llama(model, threads, n, spec, k, exact=False, port=18931):
    args = [str(LLAMA / "llama-server"), "-m", str(model), "-t", str(threads), "-tb", str(threads), "--port", str(port),
            "-c", "4096", "-np", "1", "--no-warmup", "-fa", "off"]
    if exact:
        args += ["-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32"]
    if spec:
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(k)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        out = []
        for p in PROMPTS:
            ids = post(port, "/tokenize", {"content": p, "add_special": True, "parse_special": True})["tokens"]
            body = {"prompt": ids, "n_predict": n, "temperature": 0, "top_k": 1, "ignore_eos": True,
                    "return_tokens": True, "cache_prompt": False}
            post(port, "/completion", body)  # warm-up
            r = post(port, "/completion", body)
            t = r["timings"]
            out.append({"prompt_ids": ids, "tokens": r["tokens"], "tok_s": t["predicted_per_second"],
                        "drafted": t.get("draft_n", 0), "accepted": t.get("draft_n_accepted", 0)})
        return out
    finally:
        proc.terminate()
        proc.wait()


def rill(binary, model, threads, n, spec, k, exact=False):
    out = []
    for p in PROMPTS:
        args = [str(binary), "run", "-p", p, "-n", str(n), "--temp", "0", "--ignore-eos", "--json",
                "-t", str(threads), "--spec", "mtp" if spec else "off", "--draft-max", str(k)]
        if exact:
            args += ["--precision", "exact"]
        if model:
            args += ["-m", str(model)]
        runs = []
        for _ in range(2):  # the first warms the page cache
            r = subprocess.run(args, capture_output=True, text=True, check=True)
            runs.append(json.loads(r.stdout))
        v = runs[-1]
        t = v["timings"]
        out.append({"tokens": v["tokens"], "tok_s": t["predicted_per_second"], "drafted": t["draft_n"],
                    "accepted": t["draft_n_accepted"]})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(REPO / "assets" / "demo" / "rill-demo.gguf"))
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--fixture", help="write llama.cpp's speculative greedy tokens here")
    ap.add_argument("--exact", action="store_true",
                    help="f32 everywhere: llama.cpp's KV caches f32, rill --precision exact (an F32 file's "
                         "tokens then agree, as the logits do)")
    a = ap.parse_args()
    res = {
        "llama spec": llama(a.model, a.threads, a.n, True, a.k, a.exact),
        "llama plain": llama(a.model, a.threads, a.n, False, a.k, a.exact),
        "rill spec": rill(a.rill, a.model, a.threads, a.n, True, a.k, a.exact),
        "rill plain": rill(a.rill, a.model, a.threads, a.n, False, a.k, a.exact),
    }
    print("| prompt | engine | tok/s | drafted | accepted | tokens = llama plain | tokens = rill plain |")
    print("|---|---|---|---|---|---|---|")
    for i in range(len(PROMPTS)):
        ref = res["llama plain"][i]["tokens"]
        for name, rows in res.items():
            r = rows[i]
            same = r["tokens"] == res["rill plain"][i]["tokens"]
            print(f"| {i} | {name} | {r['tok_s']:.1f} | {r['drafted']} | {r['accepted']} | {r['tokens'] == ref} | {same} |")
    if a.fixture:
        fx = {"model": os.path.relpath(a.model, REPO), "n_predict": a.n, "draft_max": a.k, "exact": a.exact,
              "generator": "scripts/bench/spec_vs_llama.py (llama-server 0c1e570, --spec-type draft-mtp, greedy)",
              "cases": [{"prompt": p, "prompt_ids": l["prompt_ids"], "llama_spec_tokens": l["tokens"],
                         "llama_plain_tokens": q["tokens"]}
                        for p, l, q in zip(PROMPTS, res["llama spec"], res["llama plain"])]}
        Path(a.fixture).write_text(json.dumps(fx, indent=1) + "\n")
        print(f"wrote {a.fixture}")


if __name__ == "__main__":
    main()
