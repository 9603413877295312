#!/usr/bin/env bash
# The aarch64 (NEON) kernel class under qemu-user, since the CI machine is
# x86-64: the kernel tests (every kernel against the scalar reference, bit
# for bit) and the model-logit tests (float64 truth, llama.cpp's q8 error).
# Needs the aarch64 standard library (rustup) and Debian's emulator and
# cross linker; where those cannot be installed it says so and stops
# without failing the run (the x86 classes were tested already).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! rustup target add aarch64-unknown-linux-gnu; then
    echo "NEON tests skipped: rustup could not add the aarch64-unknown-linux-gnu target"
    exit 0
fi
if ! command -v qemu-aarch64-static >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    if ! { apt-get update -q && apt-get install -y -q qemu-user-static gcc-aarch64-linux-gnu libc6-dev-arm64-cross; }; then
        echo "NEON tests skipped: qemu-user-static or the aarch64 cross linker could not be installed"
        exit 0
    fi
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -L /usr/aarch64-linux-gnu"
echo "rill-kernels tests on aarch64 (NEON) under qemu-user"
cargo test -q --locked -p rill-kernels --target aarch64-unknown-linux-gnu
echo "rill-model reference logits on aarch64 (NEON) under qemu-user"
cargo test -q --locked -p rill-model --target aarch64-unknown-linux-gnu --test reference_logits
