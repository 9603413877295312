"""Starting and stopping `rill serve` (and other HTTP processes) for the
Python client tests: openai_client, anthropic_client and router import it."""

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FIXTURE_MODEL = ROOT / "fixtures" / "models" / "qwen35moe.f32.gguf"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary():
    """$RILL_BIN, else a built target/{release,debug}/rill, else None."""
    env = os.environ.get("RILL_BIN")
    if env:
        return env
    for p in ("target/release/rill", "target/debug/rill"):
        if (ROOT / p).exists():
            return str(ROOT / p)
    return None


def wait_ready(url, proc, what, timeout=90):
    """Polls `url` until it answers 200; a process that exits or a timeout
    raises with what the process printed."""
    deadline = time.time() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            out = proc.stdout.read() if proc.stdout else ""
            raise RuntimeError(f"{what} did not start:\n{out}")
        time.sleep(0.2)


def start(cmd, what, health="/health", timeout=90):
    """Starts `cmd` (which listens on the port given as `{port}` in it) and
    waits for it; returns (process, base URL)."""
    port = free_port()
    cmd = [str(c).replace("{port}", str(port)) for c in cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base + health, proc, what, timeout)
    return proc, base


def start_rill(rill, model, *args):
    """`rill serve -m MODEL --port P ARGS…`, ready; returns (process, base URL)."""
    return start([rill, "serve", "-m", model, "--port", "{port}", *args], "rill serve")


def stop(proc, timeout=30):
    """SIGTERM (rill drains gracefully), then the exit code and what it printed."""
    proc.terminate()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    out = proc.stdout.read() if proc.stdout else ""
    return code, out


def server_fixture(api_key, alias):
    """A module-scoped pytest fixture: `rill serve` on the fixture model behind
    `api_key`, served as `alias`, yielding its base URL; it must exit 0 on
    SIGTERM (a graceful drain)."""
    import pytest

    @pytest.fixture(scope="module")
    def server():
        rill = binary() or pytest.skip("no rill binary: build it or set RILL_BIN")
        proc, base = start_rill(
            rill, FIXTURE_MODEL, "--parallel", "2", "--ctx-size", "2048", "--api-key", api_key,
            "--alias", alias, "-t", "1",
        )
        yield base
        code, out = stop(proc)
        assert code == 0, f"rill serve exited with {code}:\n{out}"

    return server
