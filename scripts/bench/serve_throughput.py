#!/usr/bin/env python3
"""Aggregate generation throughput of `rill serve` with 1 vs N concurrent streams, optionally beside llama-server.

    scripts/bench/serve_throughput.py -m MODEL.gguf [-t 2] [--max-tokens 128] [--prompt-words 48]
                                      [--concurrency 1,4] [--rounds 2] [--llama-server PATH [--no-repack] | --no-llama]

Each engine is started on 127.0.0.1 with `--parallel max(concurrency)` and the same thread count; then for each
concurrency C, C streaming /v1/completions requests run at once (prompts of the same length, `max_tokens`
fixed, `ignore_eos: true`, greedy), `--rounds` times. Printed per engine and C:
  - aggregate tok/s: generated tokens of all streams / wall time from the first request to the last token
  - decode tok/s per stream: (tokens - 1) / (last token - first token), averaged over streams
  - TTFT: time to the first token, averaged
and the ratios: N-stream over 1-stream aggregate (how well batching scales), and rill over llama-server.
llama-server defaults to ~/.cache/rill-oracle/llama-build/bin/llama-server (skipped when absent).
Only the standard library is used; all traffic stays on loopback.
"""
import argparse
import atexit
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_LLAMA = Path.home() / ".cache" / "rill-oracle" / "llama-build" / "bin" / "llama-server"

WORDS = ("river stone light cloud forest mountain evening quiet window garden letter morning bridge "
         "harbor lantern meadow thunder silver candle whisper orchard valley feather ember").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt(i, n_words):
    # Same length for every stream, different text (no shared prefix beyond the first word).
    return " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n_words))


def wait_healthy(port, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            return False
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


def one_stream(port, text, max_tokens, out, idx):
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"prompt": text, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out[idx] = {"error": f"{r.status} {r.read()[:200]!r}"}
        return
    first = last = None
    n_text_events = 0
    usage = None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            if ch.get("text"):
                now = time.perf_counter()
                first = first or now
                last = now
                n_text_events += 1
    c.close()
    tokens = (usage or {}).get("completion_tokens") or max_tokens
    out[idx] = {"start": t0, "first": first, "last": last, "tokens": tokens, "events": n_text_events}


def run_concurrent(port, n, max_tokens, n_words, base):
    out = [None] * n
    threads = [threading.Thread(target=one_stream, args=(port, prompt(base + i, n_words), max_tokens, out, i))
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = [o["error"] for o in out if o and "error" in o]
    if errors or any(o is None or o["first"] is None for o in out):
        raise RuntimeError(f"stream failed: {errors or out}")
    start = min(o["start"] for o in out)
    end = max(o["last"] for o in out)
    total = sum(o["tokens"] for o in out)
    decode = [(o["tokens"] - 1) / (o["last"] - o["first"]) for o in out if o["last"] > o["first"]]
    return {
        "aggregate": total / (end - start),
        "decode": statistics.mean(decode) if decode else float("nan"),
        "ttft_ms": statistics.mean((o["first"] - o["start"]) * 1e3 for o in out),
    }


def bench_engine(name, cmd, port, args, log_dir):
    log = open(log_dir / f"{name}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    atexit.register(lambda: proc.poll() is None and proc.kill())
    try:
        if not wait_healthy(port, proc):
            raise RuntimeError(f"{name} did not start; see {log_dir / (name + '.log')}")
        run_concurrent(port, 1, min(8, args.max_tokens), args.prompt_words, 999)  # warm-up
        results = {}
        for c in args.concurrency:
            rounds = [run_concurrent(port, c, args.max_tokens, args.prompt_words, 100 * r + 10 * c)
                      for r in range(args.rounds)]
            results[c] = {k: statistics.mean(r[k] for r in rounds) for k in rounds[0]}
            print(f"  {name:13s} C={c}: {results[c]['aggregate']:8.1f} tok/s aggregate, "
                  f"{results[c]['decode']:7.1f} tok/s per stream, TTFT {results[c]['ttft_ms']:7.1f} ms", flush=True)
        return results
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default=str(REPO / "fixtures" / "models" / "qwen35moe.f32.gguf"))
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=48)
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--precision", default="exact", choices=["exact", "q8"],
                    help="rill's matrix-product numerics (q8: 8-bit activations, as llama.cpp)")
    ap.add_argument("--ctx", type=int, default=2048, help="context per sequence")
    ap.add_argument("--llama-server", default=str(DEFAULT_LLAMA))
    ap.add_argument("--no-repack", action="store_true",
                    help="start llama-server with --no-repack (its AMX/AVX-512 repacked kernels crash on some VMs)")
    ap.add_argument("--no-llama", action="store_true")
    args = ap.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    n_par = max(args.concurrency)
    log_dir = Path(tempfile.mkdtemp(prefix="serve_throughput."))
    print(f"model {args.model}, threads {args.threads}, max_tokens {args.max_tokens}, "
          f"prompt {args.prompt_words} words, rounds {args.rounds} (logs in {log_dir})")

    results = {}
    port = free_port()
    results["rill"] = bench_engine("rill", [
        args.bin, "serve", "-m", args.model, "--port", str(port), "--parallel", str(n_par),
        "--ctx-size", str(args.ctx), "-t", str(args.threads), "--queue", str(4 * n_par),
        "--precision", args.precision], port, args, log_dir)
    if not args.no_llama and Path(args.llama_server).exists():
        port = free_port()
        try:
            results["llama-server"] = bench_engine("llama-server", [
                args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-np", str(n_par),
                "-c", str(args.ctx * n_par), "-t", str(args.threads), "-tb", str(args.threads)]
                + (["--no-repack"] if args.no_repack else []), port, args, log_dir)
        except RuntimeError as e:
            print(f"  llama-server: {e}")
    elif not args.no_llama:
        print(f"  (llama-server not found at {args.llama_server}; skipped)")

    lo, hi = min(args.concurrency), max(args.concurrency)
    print("\nratios")
    for name, r in results.items():
        print(f"  {name:13s} C={hi} / C={lo} aggregate: {r[hi]['aggregate'] / r[lo]['aggregate']:.2f}x")
    if "llama-server" in results:
        for c in args.concurrency:
            a, b = results["rill"][c], results["llama-server"][c]
            print(f"  rill / llama-server C={c}: aggregate {a['aggregate'] / b['aggregate']:.2f}x, "
                  f"per stream {a['decode'] / b['decode']:.2f}x, TTFT {a['ttft_ms'] / b['ttft_ms']:.2f}x (lower is better)")


if __name__ == "__main__":
    main()
