#!/usr/bin/env python3
"""rill vs llama.cpp, side by side on the same GGUF, same threads, same machine, in one run.

    scripts/bench/compare_llama.py MODEL.gguf [MODEL.gguf ...] [-t 2] [-p 512] [-n 128] [-r 3] [--rounds 2]
                                   [--precision exact|q8] [--kernels CLASS] [--llama-bin DIR]

By default rill runs in its own default precision (q8 where the CPU has the integer kernels);
`--precision q8|exact` forces one: q8 is the numerics llama.cpp itself uses on CPUs, exact keeps
rill's f32 activations (the reference results), which cost more arithmetic. `--kernels` forces rill's
kernel class (avx2, avx-vnni, avx512, amx, neon, scalar; default: the best the CPU runs), and `--llama-bin`
names the directory of a llama-bench built for the same class (e.g. `-DGGML_NATIVE=OFF -DGGML_AVX2=ON
-DGGML_FMA=ON -DGGML_F16C=ON`); the report gives the CPU model and both engines' classes.

For each model it alternates the two engines `--rounds` times (rill, llama.cpp, rill, llama.cpp, ...) so
that both see the same machine state, and prints for each figure the mean over rounds and the ratio:
  - pp (prompt processing, tokens/s) and tg (generation, tokens/s): `rill bench --json` and `llama-bench -o json`
  - peak resident memory of each benchmark process (from /usr/bin/time's "Maximum resident set size";
    both processes map the same file, so page cache counted as RSS is alike)
  - cold-start time to first token: page cache dropped (needs root; skipped otherwise), then the wall time
    of a process that loads the model, reads a short prompt and prints one token
  - decode weight bandwidth (weight bytes touched per token x tokens/s) against the machine's read
    bandwidth (`rill bench --bandwidth` probe, same thread count)

llama.cpp comes from the source distribution of the PyPI package llama-cpp-python (see --llama-dir):
if `LLAMA_DIR/llama-build/bin/llama-bench` is missing, the script builds it (pip download of the sdist,
cmake + ninja from PyPI; ~10 minutes on 2 cores). Only the standard library is used here.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LLAMA_CPP_PYTHON = "0.3.36"


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def ensure_llama(llama_dir: Path) -> Path:
    bin_dir = llama_dir / "llama-build" / "bin"
    if (bin_dir / "llama-bench").exists():
        return bin_dir
    print(f"building llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON} sdist) into {llama_dir} ...", file=sys.stderr)
    llama_dir.mkdir(parents=True, exist_ok=True)
    venv = llama_dir / "venv"
    if not (venv / "bin" / "python").exists():
        sh([sys.executable, "-m", "venv", str(venv)])
    pip = str(venv / "bin" / "pip")
    sh([pip, "install", "-q", "cmake", "ninja", "scikit-build-core"])
    src_root = llama_dir / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    if not src_root.exists():
        # --no-build-isolation: otherwise pip builds cmake from source just to read the sdist's metadata
        sh([pip, "download", "-q", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", str(llama_dir / "sdist")])
        sh(["tar", "xzf", str(llama_dir / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"), "-C", str(llama_dir)])
    src = (src_root / "vendor" / "llama.cpp").resolve()
    env = dict(os.environ, PATH=f"{venv / 'bin'}:{os.environ['PATH']}")
    sh(["cmake", "-S", str(src), "-B", str(llama_dir / "llama-build"), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF"], env=env)
    sh(["cmake", "--build", str(llama_dir / "llama-build"), "-j", str(os.cpu_count() or 2),
        "--target", "llama-bench", "llama-cli"], env=env)
    return bin_dir


def timed(cmd):
    """Run cmd under /usr/bin/time -v: (stdout, wall seconds, peak RSS bytes)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        r = subprocess.run(["/usr/bin/time", "-v", "-o", tf.name] + cmd, text=True, capture_output=True,
                           stdin=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", tf.read())
        return r.stdout, wall, (int(m.group(1)) * 1024 if m else None)


def drop_caches():
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def rill_choice(a):
    """rill's precision and kernel-class flags."""
    return (([] if a.precision == "default" else ["--precision", a.precision])
            + ([] if a.kernels is None else ["--kernels", a.kernels]))


def run_rill(rill, model, a):
    out, _, rss = timed([rill, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.r),
                         "-t", str(a.t), "--json"] + rill_choice(a))
    j = json.loads(out)
    return {"pp": j["pp"]["mean"], "tg": j["tg"]["mean"], "rss": rss,
            "active_bytes": j["active_weight_bytes_per_token"], "kernels": j.get("kernels"),
            "precision": j.get("precision"), "cpu": j.get("cpu")}


def run_llama(bin_dir, model, a):
    extra = ["--repack", "0"] if a.no_repack else []
    out, _, rss = timed([str(bin_dir / "llama-bench"), "-m", model, "-p", str(a.p), "-n", str(a.n), "-r", str(a.r),
                         "-t", str(a.t), "-o", "json"] + extra)
    rows = json.loads(out)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return {"pp": pp, "tg": tg, "rss": rss, "build": rows[0].get("build_commit"),
            "cpu_info": rows[0].get("cpu_info")}


def ttft(cmd):
    if not drop_caches():
        return None
    _, wall, _ = timed(cmd)
    return wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--precision", default="default", choices=["default", "exact", "q8"],
                    help="rill's matrix-product numerics (q8: 8-bit activations, as llama.cpp)")
    ap.add_argument("--kernels", help="rill's kernel class (default: the best this CPU runs)")
    ap.add_argument("--llama-bin", help="directory of the llama-bench (and llama-cli) to run, e.g. one built for "
                                        "the class of --kernels (default: LLAMA_DIR/llama-build/bin)")
    ap.add_argument("--rill", default=str(REPO / "target" / "release" / "rill"))
    ap.add_argument("--llama-dir", default=os.environ.get("RILL_ORACLE_DIR", str(Path.home() / ".cache" / "rill-oracle")))
    ap.add_argument("--no-ttft", action="store_true", help="skip the cold-start measurement")
    ap.add_argument("--no-repack", action="store_true",
                    help="run llama.cpp without weight repacking (needed where its AMX kernels die with SIGILL)")
    ap.add_argument("--json", help="write all figures here")
    a = ap.parse_args()
    if not Path(a.rill).exists():
        sh(["cargo", "build", "--release", "-p", "rill-cli"], cwd=REPO)
    bin_dir = Path(a.llama_bin) if a.llama_bin else ensure_llama(Path(a.llama_dir))
    probe = json.loads(sh([a.rill, "bench", "-m", a.models[0], "-p", "0", "-n", "1", "-r", "1", "-t", str(a.t),
                           "--bandwidth", "--json"] + rill_choice(a)).stdout)
    bw = probe["read_bandwidth_bytes_s"]
    report = {"threads": a.t, "precision": probe.get("precision"), "kernels": probe.get("kernels"),
              "cpu": probe.get("cpu"), "llama_bench": str(bin_dir / "llama-bench"),
              "read_bandwidth_bytes_s": bw, "models": {}}
    print(f"CPU {probe.get('cpu')}; rill {probe.get('kernels')} kernels, precision {probe.get('precision')}; "
          f"llama.cpp {bin_dir / 'llama-bench'}")
    print(f"machine read bandwidth, {a.t} threads: {bw / 1e9:.1f} GB/s")
    for model in a.models:
        rr, ll = [], []
        for i in range(a.rounds):
            rr.append(run_rill(a.rill, model, a))
            ll.append(run_llama(bin_dir, model, a))
            print(f"  round {i + 1}: rill pp {rr[-1]['pp']:.1f} tg {rr[-1]['tg']:.2f} | "
                  f"llama.cpp pp {ll[-1]['pp']:.1f} tg {ll[-1]['tg']:.2f}", file=sys.stderr)
        mean = lambda rows, k: statistics.mean(r[k] for r in rows if r[k] is not None)
        res = {k: {"rill": mean(rr, k), "llama_cpp": mean(ll, k)} for k in ("pp", "tg", "rss")}
        res["llama_cpp_cpu_info"] = ll[0].get("cpu_info")
        active = rr[0]["active_bytes"]
        res["active_weight_bytes_per_token"] = active
        if not a.no_ttft:
            prompt = "Hello"
            res["ttft_s"] = {
                "rill": ttft([a.rill, "run", "-m", model, "-p", prompt, "-n", "1", "--temp", "0", "-t", str(a.t)]
                             + rill_choice(a)),
                "llama_cpp": ttft([str(bin_dir / "llama-cli"), "-m", model, "-p", prompt, "-n", "1", "-st",
                                   "--simple-io", "--temp", "0", "-t", str(a.t), "--no-warmup"]
                                  + (["--no-repack"] if a.no_repack else [])),
            }
        report["models"][model] = res
        name = Path(model).name
        print(f"\n{name}  ({a.t} threads, pp{a.p} / tg{a.n}, {a.rounds} rounds x {a.r} reps)")
        print(f"  {'':22} {'rill':>10} {'llama.cpp':>10} {'ratio':>7}")
        for k, label, fmt in (("pp", f"pp{a.p} tok/s", "{:10.1f}"), ("tg", f"tg{a.n} tok/s", "{:10.2f}")):
            r, l = res[k]["rill"], res[k]["llama_cpp"]
            print(f"  {label:22} {fmt.format(r)} {fmt.format(l)} {r / l:6.2f}x")
        r, l = res["rss"]["rill"], res["rss"]["llama_cpp"]
        print(f"  {'peak RSS MiB':22} {r / 2**20:10.0f} {l / 2**20:10.0f} {r / l:6.2f}x")
        if "ttft_s" in res and res["ttft_s"]["rill"] is not None:
            r, l = res["ttft_s"]["rill"], res["ttft_s"]["llama_cpp"]
            print(f"  {'cold TTFT s':22} {r:10.2f} {l:10.2f} {r / l:6.2f}x")
        for who in ("rill", "llama_cpp"):
            gbs = active * res["tg"][who] / 1e9
            print(f"  decode weight bandwidth {who:9}: {gbs:5.1f} GB/s = {100 * gbs * 1e9 / bw:4.0f}% of read bandwidth")
        print(f"  weights touched per token: {active / 2**20:.0f} MiB; decode limit at full bandwidth ~{bw / active:.0f} tok/s")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
