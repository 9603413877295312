#!/usr/bin/env python3
"""A json_schema-constrained stream's tokens/s against an unconstrained one on the same request.

    scripts/bench/structured_speed.py [-m MODEL.gguf] [-t 2] [-r 5] [--rill target/release/rill]

Without -m, the demo model built into rill. Starts `rill serve --parallel 1` and streams the same chat
request (greedy, thinking off) twice per round: constrained by a JSON schema (a long list of strings, so
the grammar runs for every token), and unconstrained with `ignore_eos` and `max_tokens` set to the
constrained reply's length, so both decode as many tokens. Speculation is off for both (`speculative.n_max
0`, so this compares the mask's cost alone); the constrained and unconstrained runs with the server's default
speculation (drafts drawn under the grammar's mask) are printed beside them. Decode speed is the server's `timings.predicted_per_second`
(tokens after the first over the time after the first; mean, sd and median over the rounds), and the
client's own count over the stream's wall time after the first chunk; `ratio_paired_median` is the median
over rounds of each round's constrained/unconstrained pair (the order flips every round). Prints one JSON object. Run it under /tmp/exclusive.sh (or on an idle machine).
Standard library only.
"""
import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string", "maxLength": 40},
        "facts": {"type": "array", "items": {"type": "string", "minLength": 20, "maxLength": 60}, "minItems": 40, "maxItems": 40},
    },
    "required": ["topic", "facts"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "List forty facts about Python's list type, as JSON."}]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(rill, model, threads):
    port = free_port()
    cmd = [rill, "serve", "--port", str(port), "-t", str(threads), "--parallel", "1", "--ctx-size", "4096",
           "--cache-ram", "0"]
    if model:
        cmd += ["-m", model]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("rill serve did not start")


def stream(port, body):
    """(completion tokens, server decode tok/s, client decode tok/s, text) of one streamed request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = dict(body, stream=True, stream_options={"include_usage": True})
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    first = last = None
    text, usage, timings = [], None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for ch in chunk.get("choices", []):
            piece = (ch.get("delta") or {}).get("content")
            if piece:
                now = time.perf_counter()
                first = first or now
                last = now
                text.append(piece)
        usage = chunk.get("usage") or usage
        timings = chunk.get("timings") or timings
    n = usage["completion_tokens"]
    client = (n - 1) / (last - first) if last and first and last > first else 0.0
    return n, timings["predicted_per_second"], client, "".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=None)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--items", type=int, default=40, help="facts in the JSON (the reply's length)")
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    a = ap.parse_args()
    SCHEMA["properties"]["facts"]["minItems"] = SCHEMA["properties"]["facts"]["maxItems"] = a.items
    proc, port = start(a.rill, a.model, a.threads)
    try:
        base = {"messages": MESSAGES, "temperature": 0, "max_tokens": 2000,
                "chat_template_kwargs": {"enable_thinking": False}}
        constrained_body = dict(base, **{"speculative.n_max": 0,
                                         "response_format": {"type": "json_schema", "json_schema": {
                                             "name": "facts", "schema": SCHEMA, "strict": True}}})
        n, _, _, text = stream(port, constrained_body)  # warm-up; also fixes the length
        json.loads(text)
        plain_body = dict(base, **{"max_tokens": n, "ignore_eos": True, "speculative.n_max": 0})
        spec_body = dict(base, **{"max_tokens": n, "ignore_eos": True})
        constrained_spec_body = {k: v for k, v in constrained_body.items() if k != "speculative.n_max"}
        stream(port, plain_body)
        runs = {"constrained": [], "unconstrained": [], "unconstrained_spec": [], "constrained_spec": []}
        for k in range(a.rounds):
            order = [("constrained", constrained_body), ("unconstrained", plain_body),
                     ("unconstrained_spec", spec_body), ("constrained_spec", constrained_spec_body)]
            # Every other round the other way round, so a drift in the machine's speed
            # does not favour one side of a pair.
            for name, body in (order if k % 2 == 0 else order[::-1]):
                got = stream(port, body)
                if name.startswith("constrained"):
                    json.loads(got[3])  # valid JSON every time
                runs[name].append(got)
        out = {"tokens": n, "rounds": a.rounds, "threads": a.threads, "model": a.model or "demo"}
        for name, rs in runs.items():
            out[name] = {
                "server_tok_s": round(statistics.mean(r[1] for r in rs), 1),
                "server_tok_s_median": round(statistics.median(r[1] for r in rs), 1),
                "server_tok_s_sd": round(statistics.pstdev(r[1] for r in rs), 1),
                "client_tok_s": round(statistics.mean(r[2] for r in rs), 1),
            }
        out["ratio_server"] = round(out["constrained"]["server_tok_s"] / out["unconstrained"]["server_tok_s"], 3)
        out["ratio_server_median"] = round(out["constrained"]["server_tok_s_median"]
                                           / out["unconstrained"]["server_tok_s_median"], 3)
        # Each round's constrained run over its unconstrained neighbour: on a machine whose speed
        # drifts, the median of these pairs is the steadier figure.
        pairs = [c[1] / u[1] for c, u in zip(runs["constrained"], runs["unconstrained"])]
        out["ratio_paired_median"] = round(statistics.median(pairs), 3)
        out["ratio_paired"] = [round(p, 3) for p in pairs]
        out["ratio_client"] = round(out["constrained"]["client_tok_s"] / out["unconstrained"]["client_tok_s"], 3)
        print(json.dumps(out))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
