#!/usr/bin/env bash
# Installs libtorch 2.11.0 (the version tch 0.24.0 is pinned to) from PyPI into .libtorch/,
# without its CUDA dependency tree: libtorch_cpu.so only needs libcudart and libcupti to load.
# Idempotent: does nothing when the pinned version is already there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dest="$root/.libtorch"
want="2.11.0"
if [ -f "$dest/.installed-$want" ]; then
  echo "libtorch $want already in $dest"
  exit 0
fi
rm -rf "$dest"
mkdir -p "$dest"
python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dest" \
  "torch==$want" nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 nvidia-cuda-crt==13.0.88
touch "$dest/.installed-$want"
echo "libtorch $want installed in $dest/torch"
