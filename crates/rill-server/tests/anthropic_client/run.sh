#!/usr/bin/env bash
# Runs the official `anthropic` Python client against `rill serve` on the fixture model.
# Usage: crates/rill-server/tests/anthropic_client/run.sh   (from anywhere; needs PyPI access once)
# Env: RILL_BIN (use this binary instead of building), VENV (default target/anthropic-venv),
#      PROFILE (release|debug, default release).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
cd "$root"
venv="${VENV:-$root/target/anthropic-venv}"
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
exec "$venv/bin/python" -m pytest -q "$here/test_anthropic.py"
