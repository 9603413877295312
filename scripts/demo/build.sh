#!/usr/bin/env bash
# Regenerate assets/demo/rill-demo.gguf from scratch on a CPU machine (about an hour on 2 cores).
#   scripts/demo/build.sh [WORK_DIR]      (default /tmp/rill-demo)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
W=${1:-/tmp/rill-demo}
ORACLE=${RILL_ORACLE_DIR:-$HOME/.cache/rill-oracle}
PY=$ORACLE/venv/bin/python
mkdir -p "$W"
# 1. the text: Python 3.11's documentation sources (reST) from Debian's python3-doc
[ -d /usr/share/doc/python3.11/html/_sources ] || { apt-get update -q && apt-get install -y -q python3-doc; }
# 2. the toolchain: transformers + torch (CPU) + llama.cpp with its converter (shared/oracle/setup.sh)
[ -x "$ORACLE/llama_oracle" ] || bash "$REPO/../shared/oracle/setup.sh" "$ORACLE"
# 3. tokenizer + token streams, 4. training (trunk ~45 min, MTP ~10 min, time-boxed), 5. GGUF + checks
"$PY" "$HERE/data.py" "$W/data"
"$PY" "$HERE/train.py" "$W/data" "$W/hf" 2>&1 | grep -v "falling back" | tee "$W/train.log"
"$PY" "$HERE/check.py" "$W/hf" "$W/rill-demo.gguf" --outtype q8_0 --json "$W/samples.json" 2>&1 \
    | grep -v "falling back" | tee "$W/check.log"
mkdir -p "$REPO/assets/demo"
cp "$W/rill-demo.gguf" "$REPO/assets/demo/rill-demo.gguf"
cp "$W/metrics.json" "$HERE/metrics.json"
cp "$W/samples.json" "$HERE/samples.json"
cp "$W/data/data_stats.json" "$HERE/data_stats.json"
"$PY" "$HERE/mtp_server_check.py" "$REPO/assets/demo/rill-demo.gguf" | tee "$HERE/mtp_server.json"
echo "wrote $REPO/assets/demo/rill-demo.gguf"
