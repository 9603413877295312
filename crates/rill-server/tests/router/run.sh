#!/usr/bin/env bash
# Two `rill serve` replicas on the fixture model behind vLLM's router
# (`vllm-router`, from PyPI): session affinity on `X-Session-ID` keeps a
# conversation's turns on the replica whose prompt cache holds it.
# Usage: crates/rill-server/tests/router/run.sh   (from anywhere; needs PyPI access once)
# Env: see ../harness.sh (RILL_BIN, PROFILE, VENV).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../harness.sh"
python_venv router -r "$here/requirements.txt"
rill_binary
export VLLM_ROUTER="$venv/bin/vllm-router"
exec "$venv/bin/python" "$here/affinity.py" "$@"
