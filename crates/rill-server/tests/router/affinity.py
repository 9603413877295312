"""Two rill replicas behind vllm-router: does session affinity keep each
conversation on the replica that has it in its prompt cache?

20 two-turn sessions. All first turns go through the router, then all
second turns in a shuffled order (sessions do not take turns in lockstep).
A second turn is a hit when the replica that serves it resumes from its
prompt cache: its `usage.prompt_tokens_details.cached_tokens` is > 0, and
the replicas' own `/metrics` (`rill_prompt_cache_hits_total`) count it.
Requests go one at a time, so the replica that served each one is known
from the replicas' `vllm:prompt_tokens_total`: a second turn must hit
exactly when it lands on its first turn's replica.

- `--policy consistent_hash` on `X-Session-ID`: every second turn lands on
  the replica that served the first, so >= 95% must hit;
- `--policy round_robin`: a second turn lands on either replica, so about
  half miss (the test asserts between 20% and 80% hits);
- `--policy cache_aware` (the router's default: its own prefix tree of the
  prompts it routed): >= 95% must hit, no X-Session-ID needed.

And the router's load-aware policy, `--policy power_of_two`, which polls
each worker's `GET /get_load`: with two long streams held open on one
replica, the router reads its load from rill (its own `/get_loads` shows
it, with no configuration on either side) and sends every new request to
the idle replica.

Prints one JSON line per policy with the counts. Run through run.sh.
"""

import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import rill_serve  # noqa: E402

MODEL = os.environ.get("RILL_ROUTER_MODEL", str(rill_serve.FIXTURE_MODEL))
SESSIONS = 20


def start_replica():
    # A long context, so that the load test's streams outlast it.
    return rill_serve.start_rill(os.environ["RILL_BIN"], MODEL, "--parallel", "2",
                                 "--ctx-size", "32768", "-t", "1", "--alias", "fixture")


def start_router(workers, policy, *extra):
    cmd = [os.environ.get("VLLM_ROUTER", "vllm-router"), "--host", "127.0.0.1", "--port", "{port}",
           "--policy", policy, "--worker-urls", *workers, "--log-level", "warning",
           "--disable-retries", "--health-check-interval-secs", "60", *extra]
    return rill_serve.start(cmd, "vllm-router")


def stop(proc):
    try:
        rill_serve.stop(proc)
    except subprocess.TimeoutExpired:
        pass


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, f"{name} missing from {base}/metrics"
    return float(m.group(1))


def chat(router, session, messages):
    body = json.dumps({"model": "fixture", "messages": messages, "max_tokens": 8,
                       "temperature": 0, "chat_template_kwargs": {"enable_thinking": False}}).encode()
    req = urllib.request.Request(router + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "X-Session-ID": session})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def first_turn(policy, k):
    # Each run's conversations are its own: the replicas keep the caches of the runs before.
    return [{"role": "system", "content": "You are a helpful assistant for Python questions."},
            {"role": "user", "content": f"{policy} session {k}: how do I read the file number {k * 7919} line by line?"}]


def served_by(replicas, before):
    """Which replica a request just served went to (requests are sent one at a time): the one whose
    prompt-token counter moved."""
    after = [metric(b, "vllm:prompt_tokens_total") for _, b in replicas]
    moved = [i for i, (a, b) in enumerate(zip(after, before)) if a > b]
    assert len(moved) == 1, f"expected one replica to serve the request, saw {moved}"
    return moved[0], after


def run(policy, replicas):
    t0 = time.time()
    router, base = start_router([b for _, b in replicas], policy)
    try:
        convs, first_at = {}, {}
        counters = [metric(b, "vllm:prompt_tokens_total") for _, b in replicas]
        for k in range(SESSIONS):
            msgs = first_turn(policy, k)
            r = chat(base, f"session-{policy}-{k}", msgs)
            first_at[k], counters = served_by(replicas, counters)
            msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"] or ""})
            msgs.append({"role": "user", "content": "And how do I skip blank lines?"})
            convs[k] = msgs
        before = [metric(b, "rill_prompt_cache_hits_total") for _, b in replicas]
        # The second turns in a fixed shuffled order: sessions do not take turns in lockstep.
        order = list(range(SESSIONS))
        random.Random(0).shuffle(order)
        cached = same = 0
        for k in order:
            r = chat(base, f"session-{policy}-{k}", convs[k])
            at, counters = served_by(replicas, counters)
            same += at == first_at[k]
            cached += r["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        after = [metric(b, "rill_prompt_cache_hits_total") for _, b in replicas]
        hits = [a - b for a, b in zip(after, before)]
        result = {"policy": policy, "seconds": round(time.time() - t0, 1), "second_turns": SESSIONS,
                  "on_first_turns_replica": same, "hit_by_usage": cached,
                  "hit_by_metrics": int(sum(hits)), "hits_per_replica": [int(h) for h in hits]}
        print(json.dumps(result), flush=True)
        return result
    finally:
        stop(router)


def hold(base):
    """A long streamed completion sent straight to one replica, left open: it
    runs there until closed."""
    body = json.dumps({"model": "fixture", "prompt": "hold", "max_tokens": 30000,
                       "ignore_eos": True, "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    r = urllib.request.urlopen(req, timeout=600)
    r.readline()  # the stream has started
    return r


def router_loads(router):
    with urllib.request.urlopen(router + "/get_loads", timeout=10) as r:
        return {w["worker"]: w["load"] for w in json.loads(r.read())["workers"]}


def load_aware(replicas):
    """power_of_two: two streams held on replica 0 (both its slots), then ten
    requests through the router; each must go to replica 1."""
    t0 = time.time()
    # The router polls the workers' load every --worker-startup-check-interval seconds.
    router, base = start_router([b for _, b in replicas], "power_of_two",
                                "--worker-startup-check-interval", "1")
    busy, idle = replicas[0][1], replicas[1][1]
    held = []
    try:
        held = [hold(busy), hold(busy)]
        deadline = time.time() + 30
        while True:
            loads = router_loads(base)
            if loads.get(busy, -1) >= 2 and loads.get(idle, -1) == 0:
                break
            assert time.time() < deadline, f"the router never read the replicas' load: {loads}"
            time.sleep(0.2)
        # `/get_loads` asks the workers there and then; the policy's own copy
        # comes from the router's poll: give it two polls.
        time.sleep(3)
        counters = [metric(b, "vllm:prompt_tokens_total") for _, b in replicas]
        on_idle = 0
        for k in range(10):
            chat(base, f"load-{k}", first_turn("power_of_two", k))
            at, counters = served_by(replicas, counters)
            on_idle += at == 1
        running = metric(busy, "vllm:num_requests_running")
        result = {"policy": "power_of_two", "seconds": round(time.time() - t0, 1),
                  "loads_read_by_router": loads, "requests": 10, "on_idle_replica": on_idle,
                  "busy_replica_running": running}
        print(json.dumps(result), flush=True)
        return result
    finally:
        for r in held:
            r.close()
        stop(router)


def main():
    replicas = [start_replica(), start_replica()]
    # Separate sessions per policy; the caches of the first run stay, but
    # the second run's conversations are new, so they cannot hit them.
    try:
        sticky = run("consistent_hash", replicas)
        rr = run("round_robin", replicas)
        aware = run("cache_aware", replicas)
        loaded = load_aware(replicas)
    finally:
        for p, _ in replicas:
            stop(p)
    ok = True

    def fail(msg):
        nonlocal ok
        print("FAIL: " + msg, file=sys.stderr)
        ok = False

    for r in (sticky, rr, aware):
        # A second turn hits the cache exactly when it lands where its first turn was.
        if not (r["hit_by_metrics"] == r["hit_by_usage"] == r["on_first_turns_replica"]):
            fail(f"{r['policy']}: hits (metrics {r['hit_by_metrics']}, usage {r['hit_by_usage']}) "
                 f"differ from the turns on their first replica ({r['on_first_turns_replica']})")
    if sticky["hit_by_metrics"] < 0.95 * SESSIONS:
        fail(f"consistent_hash: {sticky['hit_by_metrics']}/{SESSIONS} second turns hit the cache")
    if aware["hit_by_metrics"] < 0.95 * SESSIONS:
        fail(f"cache_aware: {aware['hit_by_metrics']}/{SESSIONS} second turns hit the cache")
    if not (0.2 * SESSIONS <= rr["hit_by_metrics"] <= 0.8 * SESSIONS):
        fail(f"round_robin: {rr['hit_by_metrics']}/{SESSIONS} hits, expected about half")
    # The held streams kept replica 0 busy to the end, so the load never evened out.
    if loaded["busy_replica_running"] != 2 or loaded["on_idle_replica"] != loaded["requests"]:
        fail(f"power_of_two: {loaded['on_idle_replica']}/{loaded['requests']} requests went to the idle "
             f"replica (the busy one ran {loaded['busy_replica_running']})")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
