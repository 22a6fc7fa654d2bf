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

step "format and lints"
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings

step "library and CLI tests"
cargo test

if [ -x scripts/ci-measurement.sh ]; then
  step "measurement harness (libtorch on CPU)"
  scripts/ci-measurement.sh
fi

if [ -x scripts/ci-exporter.sh ]; then
  step "the Python exporter and the proof against real implementations"
  scripts/ci-exporter.sh
fi

step "the factor history and the factors are audited"
if [ "$(git rev-parse --is-shallow-repository 2>/dev/null)" = "true" ]; then
  git fetch -q --unshallow || echo "warning: a shallow clone; the audit needs the history"
fi
cargo run -q -- audit

step "the committed site/ is what data/ produces"
cargo run -q -- build --check


if [ -x scripts/browser-check.sh ] && [ -f site/index.html ]; then
  step "the site in headless Chromium"
  scripts/browser-check.sh site target/site-screenshot.png
fi
step "done"
echo
echo "all checks passed"
