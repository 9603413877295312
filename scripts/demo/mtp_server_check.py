"""llama.cpp's own MTP path on the demo GGUF: llama-server with `--spec-type draft-mtp` (greedy), a few chat
requests on 127.0.0.1; prints drafted / accepted token counts and checks the replies equal the ones without MTP.

    mtp_server_check.py GGUF [--port 18093]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ORACLE_DIR = Path(os.environ.get("RILL_ORACLE_DIR", Path.home() / ".cache" / "rill-oracle"))
QUESTIONS = ["What does os.path.join do?", "What is the capital of Italy?", "Write a Python function that checks "
             "whether a number is even.", "Explain itertools.chain in Python."]


def serve(gguf, port, mtp):
    cmd = [str(ORACLE_DIR / "llama-build" / "bin" / "llama-server"), "-m", str(gguf), "--host", "127.0.0.1",
           "--port", str(port), "-t", "2", "-c", "2048", "-np", "1", "--temp", "0"]
    if mtp:
        cmd += ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"/tmp/rill_demo_server_{int(mtp)}.log", "w"))
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return p
        except Exception:
            if p.poll() is not None:
                raise RuntimeError(f"llama-server exited, see /tmp/rill_demo_server_{int(mtp)}.log")
            time.sleep(0.5)
    p.kill()
    raise RuntimeError("llama-server did not come up")


def ask(port, q):
    body = json.dumps({"messages": [{"role": "user", "content": q}], "max_tokens": 96, "temperature": 0,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    r = json.loads(urllib.request.urlopen(req, timeout=300).read())
    m = r["choices"][0]["message"]
    return (m.get("reasoning_content") or "") + "|" + (m.get("content") or ""), r["choices"][0].get("finish_reason"), r.get("timings", {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("--port", type=int, default=18093)
    a = ap.parse_args()
    res = {}
    for mtp in (False, True):
        p = serve(a.gguf, a.port, mtp)
        try:
            res[mtp] = [ask(a.port, q) for q in QUESTIONS]
        finally:
            p.terminate()
            p.wait(timeout=30)
    drafted = sum(t.get("draft_n", 0) for _, _, t in res[True])
    accepted = sum(t.get("draft_n_accepted", 0) for _, _, t in res[True])
    same = [x[0] == y[0] for x, y in zip(res[False], res[True])]
    out = dict(drafted=drafted, accepted=accepted, acceptance=round(accepted / drafted, 4) if drafted else None,
               same_replies_with_and_without_mtp=same, finish_reasons=[f for _, f, _ in res[True]],
               replies=[r for r, _, _ in res[True]])
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    sys.exit(main())
