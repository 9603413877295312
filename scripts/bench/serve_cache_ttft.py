#!/usr/bin/env python3
"""Prompt-cache check for hybrid models: time to first token of a follow-up turn vs a cold run.

    scripts/bench/serve_cache_ttft.py -m MODEL.gguf [-t 2] [--words 1500] [--rill target/release/rill]

Starts `rill serve`, sends a long first user turn (about `--words` words, ~2,000 tokens) and lets the model
answer; then sends the conversation extended by the answer and a short second question (streaming) and
measures its time to first token. The cold reference is the same second-turn request on a fresh server.
Prints both TTFTs, the speed-up, and the prompt-cache counters from /metrics. Standard library only.
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


def start(rill, model, threads):
    port = free_port()
    proc = subprocess.Popen([rill, "serve", "-m", model, "--port", str(port), "-t", str(threads), "--parallel", "1",
                             "--ctx-size", "8192"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
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
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--words", type=int, default=1500)
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    a = ap.parse_args()
    rnd = random.Random(0)
    vocab = "river stone light field music paper winter garden number system cloud window story engine".split()
    long_text = " ".join(rnd.choice(vocab) for _ in range(a.words))
    first = [{"role": "user", "content": "Summarise this text: " + long_text}]

    proc, port = start(a.rill, a.model, a.t)
    try:
        resp, _ = chat(port, first, 8, stream=False)
        answer = resp["choices"][0]["message"]["content"] or ""
        print(f"first turn: {resp['usage']['prompt_tokens']} prompt tokens")
        second = first + [{"role": "assistant", "content": answer}, {"role": "user", "content": "And in one word?"}]
        _, warm = chat(port, second, 4, stream=True)
        m = metrics(port)
    finally:
        proc.terminate()
        proc.wait()
    proc, port = start(a.rill, a.model, a.t)
    try:
        _, cold = chat(port, second, 4, stream=True)
    finally:
        proc.terminate()
        proc.wait()
    print(f"second turn TTFT: warm {warm:.3f} s, cold {cold:.3f} s -> {cold / warm:.1f}x sooner")
    print("metrics:", m)


if __name__ == "__main__":
    main()
