#!/usr/bin/env python3
"""Prompt-cache check for hybrid models: time to first token of a follow-up turn vs a cold run.

    scripts/bench/serve_cache_ttft.py [-m MODEL.gguf] [-t 2] [--words 1500] [--followup-words 0]
                                      [--ctx-size 8192] [--rill target/release/rill]

Starts `rill serve` (on its embedded demo model without `-m`), sends a long first user turn (about `--words`
words, ~2,000 tokens at the default) and lets the model answer; then sends the conversation extended by the
answer and a second question (a short one, or about `--followup-words` words) and measures its time to first
token (streaming). The cold reference is the same second-turn request on a fresh server. Prints both TTFTs,
the speed-up, and the prompt-cache counters from /metrics. Standard library only.

#16's long-context figure, a 2,000-token follow-up of a 100k-token conversation:
    serve_cache_ttft.py --words 100000 --followup-words 2000 --ctx-size 110000
and the model's whole context (262,144 tokens) through the server:
    serve_cache_ttft.py --words 255000 --followup-words 2000 --ctx-size 262144 --no-cold
"""
import argparse
import http.client
import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(rill, model, threads, ctx):
    port = free_port()
    cmd = [rill, "serve"] + (["-m", model] if model else []) + [
        "--port", str(port), "-t", str(threads), "--parallel", "1", "--ctx-size", str(ctx)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    sys.exit("server did not start")


def chat(port, messages, max_tokens, stream):
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": stream,
            "chat_template_kwargs": {"enable_thinking": False}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=7200)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if not stream:
        return json.loads(r.read()), None
    ttft = None
    while True:
        line = r.readline()
        if not line:
            break
        if line.strip() == b"data: [DONE]":
            break
        if line.startswith(b"data: ") and ttft is None:
            chunk = json.loads(line[6:])
            if any((ch.get("delta") or {}).get("content") for ch in chunk.get("choices", [])):
                ttft = time.perf_counter() - t0
    return None, ttft


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    return {l.split()[0]: l.split()[1] for l in text.splitlines() if l.startswith("rill_prompt")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", help="GGUF file or model folder (default: the embedded demo model)")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--followup-words", type=int, default=0, help="words of the second question (0: a short one)")
    ap.add_argument("--ctx-size", type=int, default=8192)
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("--no-cold", action="store_true",
                    help="skip the cold reference run (at 250k tokens it costs as much as the first turn)")
    a = ap.parse_args()
    rnd = random.Random(0)
    vocab = "river stone light field music paper winter garden number system cloud window story engine".split()
    long_text = " ".join(rnd.choice(vocab) for _ in range(a.words))
    first = [{"role": "user", "content": "Summarise this text: " + long_text}]
    question = "And in one word?"
    if a.followup_words:
        question = "Now this one: " + " ".join(rnd.choice(vocab) for _ in range(a.followup_words))

    proc, port = start(a.rill, a.model, a.t, a.ctx_size)
    try:
        t0 = time.perf_counter()
        resp, _ = chat(port, first, 8, stream=False)
        answer = resp["choices"][0]["message"]["content"] or ""
        print(f"first turn: {resp['usage']['prompt_tokens']} prompt tokens, {time.perf_counter() - t0:.1f} s")
        second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": question}]
        _, warm = chat(port, second, 4, stream=True)
        m = metrics(port)
    finally:
        proc.terminate()
        proc.wait()
    if a.no_cold:
        print(f"second turn TTFT: warm {warm:.3f} s (no cold run)")
        print("metrics:", m)
        return
    proc, port = start(a.rill, a.model, a.t, a.ctx_size)
    try:
        _, cold = chat(port, second, 4, stream=True)
    finally:
        proc.terminate()
        proc.wait()
    print(f"second turn TTFT: warm {warm:.3f} s, cold {cold:.3f} s -> {cold / warm:.1f}x sooner")
    print("metrics:", m)


if __name__ == "__main__":
    main()
