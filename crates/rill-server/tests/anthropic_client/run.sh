#!/usr/bin/env bash
# Runs the official `anthropic` Python client against `rill serve` on the fixture model.
# Usage: crates/rill-server/tests/anthropic_client/run.sh   (from anywhere; needs PyPI access once)
# Env: see ../harness.sh (RILL_BIN, PROFILE, VENV).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../harness.sh"
python_venv anthropic -r "$here/requirements.txt"
rill_binary
exec "$venv/bin/python" -m pytest -q "$here/test_anthropic.py"
