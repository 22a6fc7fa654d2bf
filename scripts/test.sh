#!/usr/bin/env bash
# Runs every test of memcal on a fresh machine (Rust, Python 3.11 and gcc are all it assumes):
# installs libtorch for the harness, checks formatting and lints, runs the library, CLI and
# harness tests, checks the CUDA build compiles, checks that the committed site/ is current,
# runs the Python exporter's tests and the proof against real torchvision and transformers
# models, and loads the site in headless Chromium.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step prints its duration when the next begins (and the total so far).
started=$(date +%s)
last=""
step() {
  local now
  now=$(date +%s)
  if [ -n "$last" ]; then
    printf '(step took %d s; %d s in all)\n' $((now - last)) $((now - started))
  fi
  last=$now
  printf '\n==> %s\n' "$*"
}

# The downloads (libtorch and Python torch from PyPI, Debian's chromium) wait on the network,
# not the CPU: they start now, in the background, and each step that needs one waits for it.
mkdir -p target
bg_pytorch=""
bg_chromium=""
if [ -x scripts/setup-pytorch.sh ]; then
  scripts/setup-pytorch.sh > target/ci-setup-pytorch.log 2>&1 &
  bg_pytorch=$!
fi
if [ -x scripts/browser-check.sh ] && ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium) \
    > target/ci-setup-chromium.log 2>&1 &
  bg_chromium=$!
fi
# wait_for PID LOG: the background job's end; its log, and a failure, if it failed.
wait_for() {
  [ -n "$1" ] || return 0
  if ! wait "$1"; then
    echo "a background download failed; its log ($2):" >&2
    tail -n 40 "$2" >&2
    return 1
  fi
  echo "(background download done: $2)"
}

step "format and lints"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings

step "library and CLI tests (release build: the same tests, several times quicker to run)"
cargo test --release

if [ -x scripts/ci-measurement.sh ]; then
  step "measurement harness (libtorch on CPU)"
  wait_for "$bg_pytorch" target/ci-setup-pytorch.log
  bg_pytorch=""
  scripts/ci-measurement.sh
fi

if [ -x scripts/ci-exporter.sh ]; then
  step "the Python exporter and the proof against real implementations"
  wait_for "$bg_pytorch" target/ci-setup-pytorch.log
  scripts/ci-exporter.sh
fi

step "the factor history and the factors are audited"
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = "true" ]; then
  git fetch -q --unshallow || echo "warning: a shallow clone; the audit needs the history"
fi
cargo run --release -q -- audit

step "the committed site/ is what data/ produces"
cargo run --release -q -- build --check


if [ -x scripts/browser-check.sh ] && [ -f site/index.html ]; then
  step "the site in headless Chromium"
  wait_for "$bg_chromium" target/ci-setup-chromium.log
  scripts/browser-check.sh site target/site-screenshot.png
fi
step "done"
echo
echo "all checks passed"
