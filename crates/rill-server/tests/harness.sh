# Sourced by the client test scripts (openai_client, anthropic_client, router, webui):
# goes to the repository root and gives them a Python venv and the rill binary.
# Env: RILL_BIN (use this binary instead of building), PROFILE (release|debug, default
#      release), VENV (the venv's folder, default target/<name>-venv), CARGO_TARGET_DIR.
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
profile="${PROFILE:-release}"

# python_venv NAME PIP_ARGS...: makes (once) and fills the venv; sets `venv`.
python_venv() {
    local name="$1"
    shift
    venv="${VENV:-$target/$name-venv}"
    if [ ! -x "$venv/bin/python" ]; then
        python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
}

# rill_binary: exports RILL_BIN, building rill-cli in $profile unless it is set.
rill_binary() {
    if [ -z "${RILL_BIN:-}" ]; then
        if [ "$profile" = release ]; then
            cargo build --release -p rill-cli
        else
            cargo build -p rill-cli
        fi
        export RILL_BIN="$target/$profile/rill"
    fi
}
