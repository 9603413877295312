#!/usr/bin/env python3
"""A bounded loopback load test of `rill serve`.

    scripts/bench/serve_load.py [--bin target/release/rill] [--model fixtures/models/qwen35moe.f32.gguf]
                                [--requests 400] [--workers 8] [--disconnect 0.15] [--malformed 0.15]

Starts `rill serve` on 127.0.0.1 (or uses --url), then sends --requests requests from --workers threads:
a mix of chat and completions, streamed and not; a fraction --disconnect are streams the client drops after
a few events, a fraction --malformed are bad bodies (broken JSON, wrong types, bad values) that must get a
4xx JSON error. It checks that every valid request completes (200, a finish_reason, `[DONE]` for streams),
that the server stays up, and that /metrics shows no sequence running or waiting afterwards; it prints the
server's RSS before and after. Everything stays on loopback and is bounded in count and time.
Only the standard library is used. Exit status 0 = all checks passed.
"""
import argparse
import atexit
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Client:
    def __init__(self, host, port, api_key=None, timeout=120):
        self.host, self.port, self.timeout = host, port, timeout
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def get(self, path):
        c = self.conn()
        try:
            c.request("GET", path, headers=self.headers)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def post(self, path, body: bytes):
        c = self.conn()
        try:
            c.request("POST", path, body=body, headers=self.headers)
            r = c.getresponse()
            return r.status, r.read().decode("utf-8", "replace")
        finally:
            c.close()

    def stream(self, path, payload, stop_after=None):
        """Returns (status, events); with stop_after, closes the socket after that many events."""
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(payload).encode(), headers=self.headers)
            r = c.getresponse()
            if r.status != 200:
                return r.status, [r.read().decode("utf-8", "replace")]
            events = []
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode("utf-8", "replace").rstrip("\r\n")
                if line.startswith("data:"):
                    events.append(line[5:].strip())
                    if stop_after is not None and len(events) >= stop_after:
                        break  # drop the connection mid-stream
                    if events[-1] == "[DONE]":
                        break
            return 200, events
        finally:
            if stop_after is not None and c.sock is not None:
                # An abrupt close (RST), as a client that dies would.
                try:
                    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
            c.close()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


MALFORMED = [
    (b"{", 400),
    (b"not json at all", 400),
    (b'{"messages": "hello"}', 400),
    (b'{"messages": [{"role": "user", "content": "hi"}], "temperature": -1}', 400),
    (b'{"messages": [{"role": "user", "content": "hi"}], "top_p": 7}', 400),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -3}', 400),
    (b'{"messages": [{"role": "user", "content": "hi"}], "n": 3}', 400),
    (b'{"messages": [{"role": "wizard", "content": "hi"}]}', 400),
    (b'{"messages": [{"role": "user", "content": "hi"}], "model": "nope"}', 404),
    (b'\xff\xfe\x00garbage', 400),
    (b"[]", 400),
]


def one_request(cl, rng, args, stats, lock):
    kind = rng.random()
    if kind < args.malformed:
        body, want = rng.choice(MALFORMED)
        status, text = cl.post("/v1/chat/completions", body)
        ok = status == want
        try:
            ok = ok and "error" in json.loads(text)
        except ValueError:
            ok = False
        with lock:
            stats["malformed"] += 1
            if not ok:
                stats["failures"].append(f"malformed {body[:40]!r} -> {status} {text[:200]}")
        return
    chat = rng.random() < 0.6
    path = "/v1/chat/completions" if chat else "/v1/completions"
    max_tokens = rng.randint(1, args.max_tokens)
    payload = {"max_tokens": max_tokens, "temperature": rng.choice([0, 0.7, 1.0]), "seed": rng.randint(0, 1 << 30)}
    if chat:
        payload["messages"] = [{"role": "user", "content": "Tell me about item %d." % rng.randint(0, 50)}]
        if rng.random() < 0.5:
            payload["chat_template_kwargs"] = {"enable_thinking": False}
    else:
        payload["prompt"] = "Item %d: " % rng.randint(0, 50) * rng.randint(1, 8)
    if kind < args.malformed + args.disconnect:
        payload.update(stream=True, max_tokens=max(max_tokens, 64), ignore_eos=True)
        status, events = cl.stream(path, payload, stop_after=rng.randint(1, 4))
        with lock:
            stats["disconnected"] += 1
            if status != 200:
                stats["failures"].append(f"disconnect stream -> {status} {events[:1]}")
        return
    stream = rng.random() < 0.5
    if stream:
        payload["stream"] = True
        status, events = cl.stream(path, payload)
        ok = status == 200 and events and events[-1] == "[DONE]"
        if ok:
            chunks = [json.loads(e) for e in events[:-1]]
            finishes = [c["choices"][0].get("finish_reason") for c in chunks if c.get("choices")]
            ok = any(f in ("stop", "length") for f in finishes)
        detail = events[-2:] if status == 200 else events
    else:
        status, text = cl.post(path, json.dumps(payload).encode())
        ok = status == 200
        if ok:
            r = json.loads(text)
            ok = r["choices"][0]["finish_reason"] in ("stop", "length") and r["usage"]["completion_tokens"] <= max_tokens
        detail = text[:300]
    with lock:
        stats["valid"] += 1
        if ok:
            stats["completed"] += 1
        else:
            stats["failures"].append(f"valid {path} stream={stream} -> {status} {detail}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("--model", default=str(REPO / "fixtures" / "models" / "qwen35moe.f32.gguf"))
    ap.add_argument("--url", help="use a running server (host:port) instead of starting one")
    ap.add_argument("--api-key")
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--disconnect", type=float, default=0.15)
    ap.add_argument("--malformed", type=float, default=0.15)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--time-limit", type=float, default=600, help="seconds; the test stops sending after this")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--server-args", default="", help="extra `rill serve` arguments, e.g. '--cache-ram 0'")
    args = ap.parse_args()

    proc = None
    if args.url:
        host, port = args.url.rsplit(":", 1)
        port = int(port)
    else:
        host, port = "127.0.0.1", free_port()
        cmd = [args.bin, "serve", "-m", args.model, "--host", host, "--port", str(port), "--parallel",
               str(args.parallel), "--queue", str(max(64, args.workers * 4)), "-t", str(args.threads)]
        if args.api_key:
            cmd += ["--api-key", args.api_key]
        cmd += args.server_args.split()
        log_path = Path(tempfile.mkdtemp(prefix="serve_load.")) / "server.log"
        log = open(log_path, "w")
        print(f"server log: {log_path}")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
        atexit.register(lambda: proc.poll() is None and proc.kill())
    cl = Client(host, port, args.api_key)
    deadline = time.time() + 120
    while True:
        try:
            if cl.get("/health")[0] == 200:
                break
        except OSError:
            pass
        if (proc and proc.poll() is not None) or time.time() > deadline:
            if proc:
                proc.kill()
            sys.exit("server did not come up (see its log)")
        time.sleep(0.2)

    rss0 = rss_mib(proc.pid) if proc else float("nan")
    stats = {"valid": 0, "completed": 0, "malformed": 0, "disconnected": 0, "failures": []}
    lock = threading.Lock()
    counter = iter(range(args.requests))
    end_by = time.time() + args.time_limit

    def worker(i):
        rng = random.Random(args.seed * 1000 + i)
        while time.time() < end_by:
            with lock:
                n = next(counter, None)
            if n is None:
                return
            try:
                one_request(cl, rng, args, stats, lock)
            except Exception as e:  # noqa: BLE001 - any client-side failure is a test failure
                with lock:
                    stats["failures"].append(f"exception: {e!r}")

    t0 = time.time()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0

    # The server is still up, and nothing is left running or waiting.
    def safe_get(path):
        try:
            return cl.get(path)
        except OSError as e:
            return 0, f"unreachable: {e!r}"

    ok_health = safe_get("/health")[0] == 200
    running = queue = None
    settle = time.time() + 30
    while time.time() < settle:
        text = safe_get("/metrics")[1]
        running, queue = metric(text, "rill_requests_running"), metric(text, "rill_queue_depth")
        if running == 0 and queue == 0:
            break
        time.sleep(0.1)
    text = safe_get("/metrics")[1]
    rss1 = rss_mib(proc.pid) if proc else float("nan")

    sent = stats["valid"] + stats["malformed"] + stats["disconnected"]
    print(f"requests sent       {sent} in {wall:.1f} s ({sent / wall:.1f}/s) from {args.workers} workers")
    print(f"valid completed     {stats['completed']}/{stats['valid']}")
    print(f"malformed refused   {stats['malformed']}")
    print(f"disconnected        {stats['disconnected']}")
    print(f"server health       {'ok' if ok_health else 'DOWN'}")
    print(f"running / queued    {running} / {queue}")
    print(f"cancelled (engine)  {metric(text, 'rill_requests_cancelled_total')}")
    print(f"generated tokens    {metric(text, 'rill_generated_tokens_total')}")
    print(f"RSS MiB             {rss0:.1f} before, {rss1:.1f} after")

    code = 0
    if proc:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "timeout"
        print(f"server exit         {code} (SIGTERM)")
    failures = list(stats["failures"])
    if stats["completed"] != stats["valid"]:
        failures.append("not every valid request completed")
    if sent < args.requests:
        failures.append(f"only {sent} of {args.requests} requests sent within the time limit")
    if not ok_health:
        failures.append("server not healthy after the load")
    if running != 0 or queue != 0:
        failures.append(f"requests still running ({running}) or queued ({queue})")
    if proc and code != 0:
        failures.append(f"server exit status {code}")
    for f in failures[:20]:
        print("FAIL:", f)
    print("serve_load:", "FAILED" if failures else "passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
