#!/usr/bin/env bash
# Drives rill's chat page (GET /) in headless Chromium against `rill serve` on the fixture model.
# Usage: crates/rill-server/tests/webui/run.sh   (from anywhere; needs the npm registry once)
# Needs Debian's `chromium` (apt-get install -y chromium) and Node >= 20.
# Env: RILL_BIN (use this binary instead of building), PROFILE (release|debug, default release),
#      RILL_WEBUI_MODEL (another model file), CHROMIUM (default /usr/bin/chromium).
# Writes target/webui/screenshot.png (and screenshot-narrow.png).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../harness.sh"
# playwright-core, pinned by the committed lockfile, installed under target/.
deps="$target/webui-node"
mkdir -p "$deps"
cp "$here/package.json" "$here/package-lock.json" "$deps/"
if ! cmp -s "$here/package-lock.json" "$deps/node_modules/.package-lock.json.installed" 2>/dev/null; then
    (cd "$deps" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
    cp "$here/package-lock.json" "$deps/node_modules/.package-lock.json.installed"
fi
rill_binary
export NODE_PATH="$deps/node_modules"
exec node --test --test-reporter=spec "$here/webui.test.cjs"
