#!/usr/bin/env bash
# Two `rill serve` replicas on the fixture model behind vLLM's router
# (`vllm-router`, from PyPI): session affinity on `X-Session-ID` keeps a
# conversation's turns on the replica whose prompt cache holds it.
# Usage: crates/rill-server/tests/router/run.sh   (from anywhere; needs PyPI access once)
# Env: RILL_BIN (use this binary instead of building), VENV (default target/router-venv),
#      PROFILE (release|debug, default release).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
cd "$root"
venv="${VENV:-$root/target/router-venv}"
profile="${PROFILE:-release}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/requirements.txt"
if [ -z "${RILL_BIN:-}" ]; then
    target="${CARGO_TARGET_DIR:-$root/target}"
    if [ "$profile" = release ]; then
        cargo build --release -p rill-cli
    else
        cargo build -p rill-cli
    fi
    export RILL_BIN="$target/$profile/rill"
fi
export VLLM_ROUTER="$venv/bin/vllm-router"
exec "$venv/bin/python" "$here/affinity.py" "$@"
