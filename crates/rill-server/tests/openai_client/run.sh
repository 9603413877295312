#!/usr/bin/env bash
# Runs the official `openai` Python client against `rill serve` on the fixture model.
# Usage: crates/rill-server/tests/openai_client/run.sh   (from anywhere; needs PyPI access once)
# Env: see ../harness.sh (RILL_BIN, PROFILE, VENV).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../harness.sh"
python_venv openai openai pytest
rill_binary
exec "$venv/bin/python" -m pytest -q "$here/test_openai.py"
