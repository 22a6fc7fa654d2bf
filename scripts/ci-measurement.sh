#!/usr/bin/env bash
# CI for the measurement harness (memcal-measure): installs libtorch 2.11.0 from PyPI (idempotent),
# builds and tests the harness on CPU, and checks that the CUDA build compiles (headers only: no
# GPU, no link). Called from .ci/run. Also keeps the harness fmt- and clippy-clean, and runs
# sharded campaigns on a real single-node Slurm (scripts/ci-slurm.sh: apt-get installs Slurm
# and munge; about 1-2 minutes).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

scripts/setup-libtorch.sh
# Release builds: `cargo test --release` already compiled the memcal library and every shared
# dependency in that profile, so only tch and the harness compile here (a debug build recompiled
# them all: about 3.5 minutes on 2 cores).
cargo build --release -p memcal-measure
cargo test --release -p memcal-measure
scripts/ci-slurm.sh
cargo check -p memcal-measure --features cuda
cargo fmt -p memcal-measure -- --check
# --no-deps: lint this crate; the memcal library is linted by scripts/test.sh itself.
cargo clippy -p memcal-measure --no-deps --all-targets -- -D warnings
echo "ci-measurement: ok"
